#!/usr/bin/env python3
"""soak.py — lio-server under mixed traffic for a set time, watched every second (issue 43, item 3).

What vLLM and TGI do before a release, on one machine: many clients send a mix of requests for
a long time, and the server must lose nothing and leak nothing. The server runs with the hash
prefix cache on, n-gram speculation (prompt lookup; it drafts only where a suffix of the text
repeats, so only the repetitive requests carry drafts) and a KV-cache budget small enough that
the scheduler preempts. Each client thread picks, request after request:

    completion_stream  streaming /v1/completions: a shared prefix, greedy or sampled with a seed,
                       stop strings, logprobs, penalties, ignore_eos
    chat_stream        streaming /v1/chat/completions under one long shared system prompt, n 1-2;
                       a quarter of them constrained by a JSON schema (response_format)
    completion_n       non-streaming /v1/completions with n 2-3 and logprobs (parallel sampling)
    cancel             a stream dropped by the client after its first tokens (abort mid-stream)
    malformed          one of a dozen bad requests: must be a 4xx with an OpenAI error body
    pinned             a seeded request (greedy or sampled) whose text alone was recorded first

Every second a sampler thread records the server's RSS, open file descriptors and threads
(/proc/PID) and, from /metrics, the requests running and waiting (queue depth), KV-cache usage
and the counters. Pass (each one printed, and the run exits 1 if any fails):

  - no 5xx, and every valid request complete: [DONE] last, a finish reason per choice, usage;
    with logprobs, as many tokens as usage.completion_tokens; with ignore_eos and no stop,
    exactly max_tokens per choice (no token lost or duplicated); with a JSON schema, a choice
    that stopped on its own parses and follows it
  - every malformed request a 4xx
  - each pinned request's text equals its solo run (seeded greedy and seeded sampled)
  - /metrics: finished sequences (stop + length + abort) moved by exactly the sequences sent;
    preemptions, prefix-cache hits and accepted drafts all happened (the soak exercised them)
  - idle at the end within 10 s (x the slow factor of --machine-speed): nothing running or waiting, KV usage 0 (every block back)
  - RSS and open fds flat after warm-up: the least-squares slope over the samples after the
    warm-up, times the length of that window, within --rss-tolerance-mib and --fd-tolerance;
    fds and threads at the idle end equal their idle count before the traffic
  - SIGTERM at the end: the server exits 0 with no crash or sanitizer report in its log

    bench/soak/run.sh [--duration-s 3600] [--clients 32] [--device cpu|cuda] [--out bench/results/soak_cpu]

With --out it writes OUT.json (figures, checks, provenance), OUT_samples.csv (the per-second
samples), OUT.md and OUT.png (RSS, fds and threads, KV usage, queue depth over time).
"""
import argparse
import csv
import json
import os
import random
import socket
import sys
import threading
import time
from collections import Counter

from liobench import repo_module, results_meta


h = repo_module("tests/server/server_harness.py")

SYSTEM = ("You are a careful assistant for a course on large language model inference. Answer in "
          "one or two short sentences, use plain words, and never invent numbers. When a question "
          "is about memory, say which tensor takes the memory; when it is about speed, say whether "
          "the step is bound by compute or by memory bandwidth.")
SHARED_PREFIX = ("The following is a set of short notes written by students of a course on serving "
                 "language models. Each note answers one question in a few sentences.\n\nNote: ")
SUBJECTS = ["the KV cache", "paged attention", "continuous batching", "speculative decoding",
            "quantization", "tensor parallelism", "the prefix cache", "FlashAttention", "preemption",
            "the sea", "bread", "trains"]
# Repetitive text: the n-gram drafter finds its suffixes earlier in the prompt and drafts them.
REPEAT = "Repeat exactly: the quick brown fox jumps over the lazy dog, the quick brown fox jumps over the lazy dog, the quick"
STOPS = [["."], ["\n\n"], [", "], ["Note:", "\n"]]


def pinned_requests():
    """Seeded requests recorded alone before the traffic and checked under it: greedy ones (two of
    them repetitive, so speculation's drafts are accepted) and seeded sampled ones."""
    out = []
    for k, prompt in enumerate([REPEAT, SHARED_PREFIX + "why a KV cache grows with the batch.",
                                SHARED_PREFIX + "what preemption by recompute costs.",
                                "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,"]):
        out.append(("/v1/completions", {"model": h.SERVED_MODEL, "prompt": prompt, "max_tokens": 24,
                                        "temperature": 0, "seed": k, "ignore_eos": True,
                                        "stream_options": {"include_usage": True}}, False))
    for k, s in enumerate(["the moon", "a city"]):
        out.append(("/v1/chat/completions", {"model": h.SERVED_MODEL, "max_tokens": 20, "temperature": 1.0,
                                             "top_p": 0.9, "seed": 500 + k, "ignore_eos": True,
                                             "messages": [{"role": "system", "content": SYSTEM},
                                                          {"role": "user", "content": f"Tell me about {s}."}],
                                             "stream_options": {"include_usage": True}}, True))
    return out


PINNED = pinned_requests()

# (path, body, what it breaks): each must be answered 4xx before any work.
MALFORMED = [
    ("/v1/completions", b'{"model": "lio-test", "prompt": "hi", "max_tokens": ', "truncated JSON"),
    ("/v1/completions", b'{"model": "lio-test", "prompt": "hi", "max_tokens": -1}', "max_tokens < 1"),
    ("/v1/completions", b'{"model": "lio-test", "prompt": "hi", "n": 0}', "n = 0"),
    ("/v1/completions", b'{"model": "lio-test", "prompt": "hi", "temperature": "hot"}', "temperature a string"),
    ("/v1/completions", b'{"model": "no-such-model", "prompt": "hi"}', "unknown model"),
    ("/v1/completions", b'{"model": "lio-test"}', "no prompt"),
    ("/v1/completions", b'{"model": "lio-test", "prompt": "hi", "stop": [1, 2]}', "stop not strings"),
    ("/v1/completions", b'{"model": "lio-test", "prompt": "hi", "logprobs": 99}', "logprobs too large"),
    ("/v1/completions", ('{"model": "lio-test", "max_tokens": 4, "prompt": "' + "word " * 9000 + '"}').encode(),
     "prompt longer than the context"),
    ("/v1/chat/completions", b'{"model": "lio-test", "messages": []}', "no messages"),
    ("/v1/chat/completions", b'{"model": "lio-test", "messages": [{"role": "robot", "content": "x"}]}', "bad role"),
    ("/v1/chat/completions", b'[1, 2, 3]', "body not an object"),
    ("/v1/chat/completions", b'{"model": "lio-test", "messages": [{"role": "user", "content": "x"}], '
     b'"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "nope"}}}}',
     "a schema that does not compile"),
    ("/v1/completions", b'{"model": "lio-test", "prompt": "hi", "grammar": "root ::= ("}', "a grammar that does not parse"),
]

# chat_stream's structured outputs: a small schema a constrained answer must follow.
TOPIC_SCHEMA = {"type": "object", "properties": {"topic": {"type": "string", "maxLength": 16},
                                                  "score": {"type": "integer", "minimum": 0, "maximum": 10}},
                "required": ["topic", "score"], "additionalProperties": False}


def follows_topic_schema(text):
    try:
        v = json.loads(text)
    except ValueError:
        return False
    return (isinstance(v, dict) and set(v) == {"topic", "score"} and isinstance(v["topic"], str)
            and len(v["topic"]) <= 16 and isinstance(v["score"], int) and 0 <= v["score"] <= 10)


def completion_stream(rng):
    body = {"model": h.SERVED_MODEL, "prompt": SHARED_PREFIX + f"{rng.choice(SUBJECTS)}.",
            "max_tokens": rng.randint(8, 64), "seed": rng.randint(0, 1 << 30),
            "temperature": rng.choice([0.0, 0.7, 1.0]), "stream_options": {"include_usage": True}}
    if rng.random() < 0.5:
        body["logprobs"] = rng.choice([0, 1, 2])
    if rng.random() < 0.4:
        body["stop"] = rng.choice(STOPS)
    else:
        body["ignore_eos"] = rng.random() < 0.7
    if rng.random() < 0.3:
        body.update(presence_penalty=0.5, frequency_penalty=0.3)
    if rng.random() < 0.2:
        body.update(prompt=REPEAT, repetition_penalty=1.0)
    return "/v1/completions", body, True


def chat_stream(rng):
    body = {"model": h.SERVED_MODEL, "max_tokens": rng.randint(8, 32), "n": rng.choice([1, 1, 2]),
            "temperature": 0.8, "seed": rng.randint(0, 1 << 30), "stream_options": {"include_usage": True},
            "messages": [{"role": "system", "content": SYSTEM},
                         {"role": "user", "content": f"What should I know about {rng.choice(SUBJECTS)}?"}]}
    if rng.random() < 0.5:
        body["repetition_penalty"] = 1.2
    if rng.random() < 0.25:  # structured outputs: room for the whole object, and no ignore_eos
        body.update(max_tokens=48, response_format={"type": "json_schema", "json_schema": {
            "name": "topic", "schema": TOPIC_SCHEMA}})
    elif rng.random() < 0.5:
        body["ignore_eos"] = True
    return "/v1/chat/completions", body, True


def completion_n(rng):
    body = {"model": h.SERVED_MODEL, "prompt": SHARED_PREFIX + f"{rng.choice(SUBJECTS)}.",
            "n": rng.choice([2, 3]), "max_tokens": rng.randint(8, 24), "temperature": 0.9, "top_k": 40,
            "seed": rng.randint(0, 1 << 30), "ignore_eos": True, "logprobs": 1}
    return "/v1/completions", body, False


def check_stream(r, path, body):
    """Problems with one streamed response; [] when it is complete and consistent."""
    if r.status != 200:
        return [f"status {r.status}: {r.error}"]
    problems, n, chat = [], body.get("n", 1), path.endswith("chat/completions")
    if not r.done:
        problems.append("no [DONE]")
    if r.after_done:
        problems.append(f"{r.after_done} events after [DONE]")
    reasons = r.finish_reasons()
    if set(reasons) != set(range(n)) or not set(reasons.values()) <= {"stop", "length"}:
        problems.append(f"finish reasons {reasons} for n={n}")
    usage = r.usage()
    if not usage:
        return problems + ["no usage chunk"]
    if body.get("ignore_eos") and "stop" not in body:
        if usage["completion_tokens"] != body["max_tokens"] * n or set(reasons.values()) != {"length"}:
            problems.append(f"ignore_eos: usage {usage}, reasons {reasons} for {n} x {body['max_tokens']}")
    if "response_format" in body:  # an answer that ended on its own follows the schema
        for i, reason in reasons.items():
            if reason == "stop" and not follows_topic_schema(r.text(i, chat=chat)):
                problems.append(f"choice {i} stopped but does not follow the schema: {r.text(i, chat=chat)!r}")
    if body.get("logprobs") is not None and not chat:  # one logprob entry per token, none lost or repeated
        n_tok = sum(len((ch.get("logprobs") or {}).get("tokens") or []) for c in r.chunks for ch in c.get("choices", []))
        if n_tok != usage["completion_tokens"]:
            problems.append(f"{n_tok} streamed tokens with logprobs, usage says {usage['completion_tokens']}")
    return problems


def check_full(status, j, body):
    if status != 200 or not isinstance(j, dict):
        return [f"status {status}: {j}"]
    problems, n = [], body["n"]
    choices = j.get("choices") or []
    if sorted(c.get("index") for c in choices) != list(range(n)):
        problems.append(f"choice indices {[c.get('index') for c in choices]} for n={n}")
    n_tok = sum(len((c.get("logprobs") or {}).get("tokens") or []) for c in choices)
    usage = j.get("usage") or {}
    if n_tok != usage.get("completion_tokens") or n_tok != n * body["max_tokens"]:
        problems.append(f"{n_tok} tokens with logprobs, usage {usage}, want {n} x {body['max_tokens']}")
    if any(c.get("finish_reason") != "length" for c in choices):
        problems.append(f"finish reasons {[c.get('finish_reason') for c in choices]}")
    return problems


def cancel_mid_stream(server, rng):
    """Opens a stream of up to 200 tokens, reads its first two events, drops the socket. Returns
    (HTTP status, events read)."""
    body = {"model": h.SERVED_MODEL, "prompt": SHARED_PREFIX + f"{rng.choice(SUBJECTS)}.", "max_tokens": 200,
            "ignore_eos": True, "temperature": 0.8, "seed": rng.randint(0, 1 << 30)}
    with socket.create_connection(("127.0.0.1", server.port), timeout=120) as s:
        s.sendall(h.raw_stream_request_bytes(server, "/v1/completions", body))
        buf = b""
        while buf.count(b"data:") < 2:
            chunk = s.recv(4096)
            if not chunk:
                break
            buf += chunk
    status = int(buf.split(b" ", 2)[1]) if buf.startswith(b"HTTP/1.1 ") else 0
    return status, buf.count(b"data:")


def fd_targets(pid):
    """What each open fd of pid points at (socket:[inode], a path, anon_inode:...), sorted."""
    out = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            out.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
        except OSError:
            pass
    return sorted(results_meta.local_path_free(t) for t in out)


def settled_fds(pid, quiet_s=1.0, within_s=10.0):
    """Open fds of pid once their count has not changed for quiet_s (a connection the client has
    closed takes the server a moment to close), waiting within_s x the slow factor at most:
    (count, targets)."""
    deadline, last, since = time.monotonic() + within_s * h.Config.slow_factor, -1, time.monotonic()
    while time.monotonic() < deadline:
        n = len(os.listdir(f"/proc/{pid}/fd"))
        if n != last:
            last, since = n, time.monotonic()
        elif time.monotonic() - since >= quiet_s:
            break
        time.sleep(0.05)
    return last, fd_targets(pid)


def proc_sample(pid):
    """(RSS MiB, threads, open fds) of process pid, from /proc."""
    rss_kb, threads = 0, 0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss_kb = int(line.split()[1])
            elif line.startswith("Threads:"):
                threads = int(line.split()[1])
    return rss_kb / 1024.0, threads, len(os.listdir(f"/proc/{pid}/fd"))


COUNTERS = {"preemptions": "lio:num_preemptions_total", "prefix_hits": "lio:prefix_cache_hits_total",
            "accepted_drafts": "lio:spec_decode_num_accepted_tokens_total",
            "generation_tokens": "lio:generation_tokens_total", "finished": "lio:request_success_total",
            "rejected": "lio:request_rejected_total"}


def metric_values(server):
    m = h.metrics(server)
    out = {k: h.metric_sum(m, name) for k, name in COUNTERS.items()}
    out["aborted"] = sum(v for labels, v in m["lio:request_success_total"] if "abort" in labels)
    out["running"] = h.metric_sum(m, "lio:num_requests_running")
    out["waiting"] = h.metric_sum(m, "lio:num_requests_waiting")
    out["kv_usage"] = h.metric_sum(m, "lio:kv_cache_usage_perc")
    return out


def slope_per_s(ts, ys):
    """Least-squares slope of ys over ts (units per second); 0 for fewer than 3 points."""
    if len(ts) < 3:
        return 0.0
    mt, my = sum(ts) / len(ts), sum(ys) / len(ys)
    var = sum((t - mt) ** 2 for t in ts)
    return sum((t - mt) * (y - my) for t, y in zip(ts, ys)) / var if var else 0.0


def plot(samples, warmup_s, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    t = [s["t_s"] / 60 for s in samples]
    fig, ax = plt.subplots(4, 1, figsize=(9, 10), sharex=True)
    ax[0].plot(t, [s["rss_mib"] for s in samples], lw=0.8)
    ax[0].set_ylabel("RSS (MiB)")
    ax[1].plot(t, [s["fds"] for s in samples], lw=0.8, label="open fds")
    ax[1].plot(t, [s["threads"] for s in samples], lw=0.8, label="threads")
    ax[1].legend(loc="upper right")
    ax[2].plot(t, [100 * s["kv_usage"] for s in samples], lw=0.8)
    ax[2].set_ylabel("KV cache used (%)")
    ax[3].plot(t, [s["running"] for s in samples], lw=0.8, label="running")
    ax[3].plot(t, [s["waiting"] for s in samples], lw=0.8, label="waiting (queue depth)")
    ax[3].legend(loc="upper right")
    ax[3].set_xlabel("minutes")
    for a in ax:
        a.axvline(warmup_s / 60, color="grey", ls=":", lw=1)
    ax[0].set_title("lio-server soak: mixed traffic (dotted line: end of warm-up)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--server", required=True, help="lio-server binary")
    ap.add_argument("--model", required=True)
    ap.add_argument("--duration-s", type=float, default=3600)
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--warmup-s", type=float, default=None, help="default: a sixth of the duration, at most 600")
    ap.add_argument("--kv-cache-mib", type=int, default=32,
                    help="small enough to preempt (SmolLM2 in f32: 32 MiB is 45 blocks, 720 tokens)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--rss-tolerance-mib", type=float, default=16.0,
                    help="RSS growth allowed over the post-warm-up window (slope x window)")
    ap.add_argument("--fd-tolerance", type=float, default=4.0, help="open-fd growth allowed likewise")
    ap.add_argument("--log-dir", default=None)
    ap.add_argument("--out", default=None, help="results prefix (OUT.json, OUT.md, OUT_samples.csv, OUT.png)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--machine-speed", default="",
                    help="tests/support/machine_speed.py's record: every wait x its slow factor (ctest's server_soak)")
    args = ap.parse_args()
    warmup_s = args.warmup_s if args.warmup_s is not None else min(600.0, args.duration_s / 6)
    prov = results_meta.provenance()  # at the start: the commit whose server runs, not the one at the end
    h.Config.server_bin, h.Config.model = args.server, args.model
    h.Config.log_dir = args.log_dir or ""
    h.Config.slow_factor = h.machine_speed.slow_factor(args.machine_speed)
    server = h.Server(["--prefix-cache", "hash", "--spec-method", "ngram", "--kv-cache-mib", str(args.kv_cache_mib),
                       "--max-num-seqs", "32", "--max-queue", "1024", "--device", args.device], name="soak")
    server.start()
    pid = server.proc.pid
    checks, figures = [], {}

    def check(ok, what):
        checks.append({"ok": bool(ok), "check": what})
        print(("PASS " if ok else "FAIL ") + what, flush=True)

    try:
        # Solo runs of the pinned requests (nothing else in the engine), then the idle baseline.
        solo = []
        for path, body, chat in PINNED:
            r = h.stream_post(server, path, body)
            p = check_stream(r, path, body)
            if p:
                raise RuntimeError(f"pinned request alone: {p}")
            solo.append(r.text(chat=chat))
        h.wait_idle(server, 10)
        base = metric_values(server)
        idle_fds0, idle_fd_targets0 = settled_fds(pid)
        idle_threads0 = proc_sample(pid)[1]

        lock = threading.Lock()
        tally = {"kinds": Counter(), "status": Counter(), "failures": [], "pinned_mismatch": [],
                 "sequences": 0, "cancelled": 0, "completion_tokens": 0}
        samples, stop_sampling = [], threading.Event()
        t0 = time.monotonic()
        deadline = t0 + args.duration_s

        def fail(kind, what):
            with lock:
                if len(tally["failures"]) < 50:
                    tally["failures"].append(f"{kind}: {what}")
                tally["kinds"][kind + " failed"] += 1

        def sampler():
            while not stop_sampling.is_set():
                try:
                    rss, threads, fds = proc_sample(pid)
                    mv = metric_values(server)
                    with lock:
                        samples.append(dict(t_s=round(time.monotonic() - t0, 2), rss_mib=round(rss, 2), threads=threads,
                                            fds=fds, **{k: mv[k] for k in ("running", "waiting", "kv_usage")},
                                            preemptions=mv["preemptions"] - base["preemptions"],
                                            requests=sum(tally["kinds"].values())))
                except (OSError, AssertionError, ValueError) as e:
                    fail("sampler", f"{type(e).__name__}: {e}")
                stop_sampling.wait(1.0)

        def client(i):
            rng = random.Random(args.seed * 1000 + i)
            while time.monotonic() < deadline:
                kind = rng.choices(["completion_stream", "chat_stream", "completion_n", "cancel", "malformed", "pinned"],
                                   [30, 25, 12, 10, 10, 13])[0]
                try:
                    if kind == "cancel":
                        status, events = cancel_mid_stream(server, rng)
                        with lock:
                            tally["status"][status] += 1
                        if status != 200 or events < 1:
                            fail(kind, f"status {status}, {events} events before the drop")
                        else:
                            with lock:
                                tally["sequences"] += 1
                                tally["cancelled"] += 1
                    elif kind == "malformed":
                        path, raw, what = rng.choice(MALFORMED)
                        status, _, data = h.request("POST", server.port, path, raw, timeout=120)
                        with lock:
                            tally["status"][status] += 1
                        if not 400 <= status < 500 or b'"error"' not in data:
                            fail(kind, f"{what}: status {status} {data[:160]!r}")
                    elif kind == "completion_n":
                        path, body, _ = completion_n(rng)
                        status, j, _ = h.post_json(server, path, body, timeout=600)
                        with lock:
                            tally["status"][status] += 1
                        p = check_full(status, j, body)
                        if p:
                            fail(kind, p)
                        else:
                            with lock:
                                tally["sequences"] += body["n"]
                                tally["completion_tokens"] += j["usage"]["completion_tokens"]
                    else:
                        if kind == "pinned":
                            k = rng.randrange(len(PINNED))
                            path, body, chat = PINNED[k]
                        else:
                            path, body, chat = (completion_stream if kind == "completion_stream" else chat_stream)(rng)
                        r = h.stream_post(server, path, body, timeout=600)
                        with lock:
                            tally["status"][r.status] += 1
                        p = check_stream(r, path, body)
                        if p:
                            fail(kind, p)
                        else:
                            with lock:
                                tally["sequences"] += body.get("n", 1)
                                tally["completion_tokens"] += r.usage()["completion_tokens"]
                            if kind == "pinned" and r.text(chat=chat) != solo[k]:
                                with lock:
                                    tally["pinned_mismatch"].append((k, solo[k], r.text(chat=chat)))
                    with lock:
                        tally["kinds"][kind] += 1
                except Exception as e:  # a dropped or hung connection is a failure, not the end of the soak
                    fail(kind, f"{type(e).__name__}: {e}")

        print(f"soak: {args.clients} clients for {args.duration_s:.0f} s (warm-up {warmup_s:.0f} s), "
              f"KV cache {args.kv_cache_mib} MiB, device {args.device}", flush=True)
        sampler_thread = threading.Thread(target=sampler, daemon=True)
        sampler_thread.start()
        threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(args.clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=args.duration_s + 900)
        hung = sum(t.is_alive() for t in threads)
        wall = time.monotonic() - t0
        idle, took, last = h.wait_idle(server, 10)
        time.sleep(1.5)  # one more sample at idle
        stop_sampling.set()
        sampler_thread.join(timeout=10)
        end = metric_values(server)
        idle_fds1, idle_fd_targets1 = settled_fds(pid)
        rss_end, idle_threads1, _ = proc_sample(pid)

        n_requests = sum(v for k, v in tally["kinds"].items() if not k.endswith("failed"))
        n_5xx = sum(v for s, v in tally["status"].items() if s >= 500)
        d = {k: end[k] - base[k] for k in COUNTERS}
        d["aborted"] = end["aborted"] - base["aborted"]
        # The slopes: from the end of warm-up to the deadline (after it the clients finish their
        # last requests and the connections close, which is the drain, not a trend).
        post = [s for s in samples if warmup_s <= s["t_s"] <= args.duration_s]
        window = (post[-1]["t_s"] - post[0]["t_s"]) if len(post) > 1 else 0.0
        rss_slope = slope_per_s([s["t_s"] for s in post], [s["rss_mib"] for s in post])
        fd_slope = slope_per_s([s["t_s"] for s in post], [s["fds"] for s in post])
        thr_slope = slope_per_s([s["t_s"] for s in post], [s["threads"] for s in post])
        figures = {
            "duration_s": round(wall, 1), "warmup_s": warmup_s, "clients": args.clients,
            "kv_cache_mib": args.kv_cache_mib, "device": args.device, "requests": n_requests,
            "requests_per_kind": {k: v for k, v in sorted(tally["kinds"].items())},
            "status_counts": {str(k): v for k, v in sorted(tally["status"].items())},
            "responses_5xx": n_5xx, "failures": len(tally["failures"]) + hung,
            "pinned_mismatches": len(tally["pinned_mismatch"]),
            "sequences_sent": tally["sequences"], "sequences_cancelled": tally["cancelled"],
            "completion_tokens_received": tally["completion_tokens"],
            "metrics_delta": {k: int(v) for k, v in d.items()},
            "idle_after_s": round(took, 2), "idle_end": last,
            "rss_mib": {"start": samples[0]["rss_mib"] if samples else None,
                        "after_warmup": post[0]["rss_mib"] if post else None, "end": round(rss_end, 2),
                        "max": max(s["rss_mib"] for s in samples) if samples else None},
            "rss_slope_mib_per_hour": round(rss_slope * 3600, 3),
            "rss_growth_over_window_mib": round(rss_slope * window, 3),
            "fd_slope_per_hour": round(fd_slope * 3600, 3), "fd_growth_over_window": round(fd_slope * window, 3),
            "thread_slope_per_hour": round(thr_slope * 3600, 3),
            "post_warmup_window_s": round(window, 1),
            "idle_fds": [idle_fds0, idle_fds1],
            "idle_fd_targets": [idle_fd_targets0, idle_fd_targets1], "idle_threads": [idle_threads0, idle_threads1],
            "rss_tolerance_mib": args.rss_tolerance_mib, "fd_tolerance": args.fd_tolerance,
            "first_failures": tally["failures"][:20],
        }
        print(json.dumps({k: v for k, v in figures.items() if k != "first_failures"}, indent=1), flush=True)
        for f in tally["failures"][:20]:
            print("  failure:", f, flush=True)
        for k, a, b in tally["pinned_mismatch"][:5]:
            print(f"  pinned {k}: alone {a!r} vs under load {b!r}", flush=True)

        check(hung == 0, f"every client thread ended ({hung} hung)")
        check(n_5xx == 0, f"no 5xx response ({n_5xx} of {sum(tally['status'].values())})")
        check(not tally["failures"], f"every request complete and consistent, every malformed one a 4xx "
                                     f"({len(tally['failures'])} failures)")
        check(not tally["pinned_mismatch"] and tally["kinds"]["pinned"] > 0,
              f"each pinned seeded request equals its solo run ({tally['kinds']['pinned']} runs, "
              f"{len(tally['pinned_mismatch'])} differ)")
        check(d["finished"] == tally["sequences"], f"finished sequences on /metrics moved by the sequences sent "
                                                   f"({int(d['finished'])} vs {tally['sequences']})")
        check(d["aborted"] <= tally["cancelled"], f"aborted sequences ({int(d['aborted'])}) at most the "
                                                  f"streams dropped ({tally['cancelled']})")
        check(d["preemptions"] > 0 and d["prefix_hits"] > 0 and d["accepted_drafts"] > 0,
              f"preemption, prefix-cache hits and accepted drafts all happened ({int(d['preemptions'])}, "
              f"{int(d['prefix_hits'])}, {int(d['accepted_drafts'])})")
        check(idle, f"idle within 10 s of the last request, KV cache back to 0 blocks ({took:.2f} s: {last})")
        check(abs(rss_slope * window) <= args.rss_tolerance_mib,
              f"RSS flat after warm-up: {rss_slope * 3600:+.2f} MiB/hour, {rss_slope * window:+.2f} MiB over "
              f"{window:.0f} s (tolerance {args.rss_tolerance_mib} MiB)")
        check(abs(fd_slope * window) <= args.fd_tolerance and idle_fds1 == idle_fds0,
              f"open fds flat: {fd_slope * window:+.2f} over the window (tolerance {args.fd_tolerance}), "
              f"idle {idle_fds0} before and {idle_fds1} after")
        check(idle_threads1 == idle_threads0, f"threads at idle: {idle_threads0} before, {idle_threads1} after")
    finally:
        problems = server.stop()
    check(not problems and server.exit_code == 0,
          f"SIGTERM: exit {server.exit_code}, clean log" + ("" if not problems else f" ({problems[0]})"))
    figures["server_exit_code"] = server.exit_code

    ok = all(c["ok"] for c in checks)
    if args.out:
        write_results(args, prov, figures, checks, samples, warmup_s, ok)
    print("soak: " + ("all checks passed" if ok else "FAILED"), flush=True)
    return 0 if ok else 1


def write_results(args, prov, figures, checks, samples, warmup_s, ok):
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out + ".json", "w") as f:
        json.dump({"provenance": prov, "passed": ok, "figures": figures, "checks": checks}, f, indent=1)
        f.write("\n")
    with open(args.out + "_samples.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(samples[0].keys()) if samples else ["t_s"])
        w.writeheader()
        w.writerows(samples)
    try:
        plot(samples, warmup_s, args.out + ".png")
    except ImportError:
        print("soak: no matplotlib here: no plot (scripts/setup.sh installs it in .venv)", flush=True)
    fg = figures
    md = ["# lio-server soak: mixed traffic, nothing lost, nothing leaked (bench/soak)", ""]
    md += results_meta.provenance_lines(prov)
    md += ["", f"{fg['clients']} clients for {fg['duration_s'] / 60:.1f} minutes on `--device {fg['device']}`, "
           f"hash prefix cache, n-gram speculation, a {fg['kv_cache_mib']} MiB KV cache (preempts); "
           f"samples every second, warm-up {fg['warmup_s'] / 60:.1f} minutes. "
           f"Plot: `{os.path.basename(args.out)}.png`; samples: `{os.path.basename(args.out)}_samples.csv`.", "",
           "| figure | value |", "|---|---:|",
           f"| requests | {fg['requests']:,} |"]
    md += [f"| {k} | {v:,} |" for k, v in fg["requests_per_kind"].items()]
    md += [f"| HTTP status {k} | {v:,} |" for k, v in fg["status_counts"].items()]
    md += [f"| sequences sent (n counted) | {fg['sequences_sent']:,} |",
           f"| of them dropped mid-stream | {fg['sequences_cancelled']:,} |",
           f"| completion tokens received | {fg['completion_tokens_received']:,} |"]
    md += [f"| /metrics {k} (delta) | {v:,} |" for k, v in fg["metrics_delta"].items()]
    md += [f"| RSS start / after warm-up / end / max (MiB) | {fg['rss_mib']['start']} / {fg['rss_mib']['after_warmup']} / "
           f"{fg['rss_mib']['end']} / {fg['rss_mib']['max']} |",
           f"| RSS slope after warm-up (MiB/hour) | {fg['rss_slope_mib_per_hour']:+.2f} |",
           f"| open-fd slope after warm-up (per hour) | {fg['fd_slope_per_hour']:+.2f} |",
           f"| thread slope after warm-up (per hour) | {fg['thread_slope_per_hour']:+.2f} |",
           f"| idle fds before / after | {fg['idle_fds'][0]} / {fg['idle_fds'][1]} |",
           f"| idle threads before / after | {fg['idle_threads'][0]} / {fg['idle_threads'][1]} |",
           f"| back to idle after the last request (s) | {fg['idle_after_s']} |",
           f"| exit code after SIGTERM | {fg.get('server_exit_code')} |", "", "## Checks", ""]
    md += [f"- {'PASS' if c['ok'] else 'FAIL'}: {c['check']}" for c in checks]
    md.append("")
    with open(args.out + ".md", "w") as f:
        f.write("\n".join(md))


if __name__ == "__main__":
    sys.exit(main())
