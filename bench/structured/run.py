#!/usr/bin/env python3
"""Structured outputs' cost (chapter 09, section 8): what a JSON-schema constraint costs per step
and end to end, on lio-server and on llama.cpp's llama-server, same model, same prompts, same
machine (COURSE.md, "Performance method").

    .venv/bin/python bench/structured/run.py [--repeats 6] [--no-llama] [--quick]

The workload: chat requests asking for people as JSON ("Describe {name}, who lives in {city},
as JSON."), each with a run-unique tag in the prompt so that no prefix cache carries over,
greedy unless said. Constrained requests send OpenAI's response_format {"type": "json_schema"}
with PERSON_SCHEMA (three required fields: a name, an age in [0, 150], a city from an enum) or
TEAM_SCHEMA (exactly four such people); unconstrained ones send the same messages without it.
Three measurements:

  1. Throughput at fixed work. Requests for four people (TEAM_SCHEMA), every one cut at
     --fixed-tokens output tokens, fewer than the shortest complete answer (so both modes run
     the same number of steps with the same batch, and the only difference is the mask; the
     unconstrained requests send ignore_eos, a constrained one cannot end early; the results
     record the fraction cut, which should be 1): output tok/s = all requests' completion tokens
     / the wall time from the first send to the last answer, at concurrency 1 (--batch1-requests
     requests one after another) and at --slots concurrent requests (--slots requests, every
     slot busy). Each repeat runs every cell once, engines and modes interleaved in A B B A
     order (lio free, lio schema, llama free, llama schema, then the reverse), each run after
     --settle-s idle seconds (both engines' threads spin-wait for a while after a step, and a run
     that starts beside them is slowed: measured first, without the pause, the run after the
     other engine's was up to 10% slower), so drift hits all; a cell is the median over repeats
     with its min-max, and a ratio is the median of per-repeat ratios (a range that holds 1 is a
     tie).
  2. The mask's own cost, from lio-server's /metrics (lio:structured_output_masks_total and
     lio:structured_output_mask_seconds_total) over the constrained runs of measurement 1:
     microseconds per mask and the share of the run's wall time.
  3. Parse rate: --slots requests for one person (PERSON_SCHEMA) answered in full (max_tokens
     --full-tokens), greedy and
     sampled (temperature 0.8, a seed per request), with and without the schema, on each
     engine: the fraction whose reply parses as JSON (json.loads of the whole reply), and the
     fraction that also follows the schema. Once per engine (greedy replies are deterministic).

Both servers get --slots parallel sequences and every core: lio-server --max-num-seqs SLOTS,
llama-server --parallel SLOTS --cont-batching with SLOTS x 1024 context. llama-server turns the
schema into a GBNF grammar (its json-schema-to-grammar) and samples with it; lio-server compiles
it with XGrammar (lio/grammar.h).

Writes bench/results/09_structured_cpu.{json,md} (docs/09_server.md renders its tables from the
JSON). Needs build/bin/lio-server; llama-server from scripts/build_llama_server.sh (or --no-llama).
Nothing here is a test.
"""
import concurrent.futures
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

from liobench import ROOT, flags
from liobench.results_meta import provenance, provenance_lines, write_results
from liobench.stats import is_tie, spread

PERSON_SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 20},
                   "age": {"type": "integer", "minimum": 0, "maximum": 150},
                   "city": {"type": "string", "enum": ["Paris", "London", "Seoul"]}},
    "required": ["name", "age", "city"],
    "additionalProperties": False,
}
# The fixed-work runs' schema: four people, so that the shortest complete answer (about 90
# tokens) is longer than --fixed-tokens and every constrained request runs to the cut.
TEAM_SCHEMA = {
    "type": "object",
    "properties": {"people": {"type": "array", "items": PERSON_SCHEMA, "minItems": 4, "maxItems": 4}},
    "required": ["people"],
    "additionalProperties": False,
}
NAMES = ("Ana", "Bo", "Chen", "Dana", "Eli", "Fatima", "Gus", "Hana", "Ivan", "Jun", "Kofi", "Lena",
         "Mia", "Noah", "Omar", "Pia")
CITIES = ("Paris", "London", "Seoul")
SERVED = "SmolLM2-135M-Instruct"


def follows_schema(v):
    """True if the parsed value `v` holds exactly PERSON_SCHEMA's three fields, each valid."""
    return (isinstance(v, dict) and set(v) == {"name", "age", "city"} and isinstance(v["name"], str)
            and len(v["name"]) <= 20 and isinstance(v["age"], int) and not isinstance(v["age"], bool)
            and 0 <= v["age"] <= 150 and v["city"] in CITIES)


def prompts(n, tag):
    """n user messages asking for one person; `tag` (unique per run) keeps every prompt new to
    the prefix caches."""
    return [f"[{tag}-{i:02d}] Describe {NAMES[i % len(NAMES)]}, who lives in {CITIES[i % 3]}, as JSON."
            for i in range(n)]


def team_prompts(n, tag):
    """n user messages asking for four people (the fixed-work runs)."""
    return [f"[{tag}-{i:02d}] Describe {NAMES[i % len(NAMES)]} and three friends, with their ages and cities, "
            "as JSON." for i in range(n)]


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def http(url, body=None, timeout=600):
    """GET (body None) or POST JSON; returns the response's text. Raises RuntimeError with the
    server's answer on an HTTP error."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.read().decode()
    except urllib.error.HTTPError as e:
        raise RuntimeError(f"{url}: HTTP {e.code}: {e.read().decode()[:300]}") from None


class Server:
    """A server process on a free port, up when constructed (its /health answers 200)."""

    def __init__(self, name, argv, log_dir):
        self.name = name
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.argv = argv + ["--port", str(self.port)]
        self.log = open(os.path.join(log_dir, f"{name}.log"), "w")
        self.proc = subprocess.Popen(self.argv, stdout=self.log, stderr=subprocess.STDOUT)
        for _ in range(1200):
            if self.proc.poll() is not None:
                raise SystemExit(f"{name} exited at start-up; see {self.log.name}")
            try:
                http(self.base + "/health", timeout=2)
                return
            except (OSError, RuntimeError):
                time.sleep(0.25)
        raise SystemExit(f"{name} did not come up in 300 s")

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def chat(server, prompt, schema, max_tokens, temperature=0.0, seed=None, ignore_eos=False):
    """One chat completion, constrained by the JSON schema `schema` unless it is None (and then
    with `ignore_eos`, both servers' extra field, when asked); (reply text, completion tokens,
    finish reason)."""
    body = {"model": SERVED, "messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens,
            "temperature": temperature}
    if ignore_eos and schema is None:
        body["ignore_eos"] = True
    if seed is not None:
        body["seed"] = seed
    if schema:
        body["response_format"] = {"type": "json_schema", "json_schema": {"name": "answer", "schema": schema,
                                                                          "strict": True}}
    r = json.loads(http(server.base + "/v1/chat/completions", body))
    ch = r["choices"][0]
    return ch["message"]["content"] or "", int(r["usage"]["completion_tokens"]), ch["finish_reason"]


def run_batch(server, msgs, schema, max_tokens, concurrency, temperature=0.0, ignore_eos=False):
    """Sends `msgs` with at most `concurrency` in flight; returns wall seconds (first send to
    last answer) and the replies [(text, completion tokens, finish reason)] in order."""
    t0 = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(max_workers=concurrency) as pool:
        futs = [pool.submit(chat, server, m, schema, max_tokens, temperature, i if temperature > 0 else None,
                            ignore_eos) for i, m in enumerate(msgs)]
        replies = [f.result() for f in futs]
    return time.perf_counter() - t0, replies


def metric(server, name):
    """The value of an unlabelled counter in lio-server's /metrics."""
    for line in http(server.base + "/metrics").splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise SystemExit(f"{server.name}: /metrics has no {name}")


def parse_rates(replies):
    """(fraction that parse as JSON, fraction that follow PERSON_SCHEMA, mean completion tokens)."""
    parsed = followed = 0
    for text, _, _ in replies:
        try:
            v = json.loads(text)
        except ValueError:
            continue
        parsed += 1
        followed += follows_schema(v)
    n = len(replies)
    return parsed / n, followed / n, sum(t for _, t, _ in replies) / n


def main():
    ap = flags.parser(__doc__)
    flags.add_bin(ap)
    flags.add_model(ap)
    flags.add_repeats(ap, 6)  # even: A B B A as often as B A A B
    flags.add_out(ap, "09_structured_cpu")
    ap.add_argument("--llama-server", default=os.path.join(ROOT, "build-llama", "bin", "llama-server"))
    ap.add_argument("--no-llama", action="store_true", help="lio-server alone")
    ap.add_argument("--slots", type=int, default=32, help="parallel sequences on both servers")
    ap.add_argument("--batch1-requests", type=int, default=4, help="requests per concurrency-1 run")
    ap.add_argument("--fixed-tokens", type=int, default=64,
                    help="max_tokens of the fixed-work runs (below the shortest complete answer)")
    ap.add_argument("--full-tokens", type=int, default=160, help="max_tokens of the parse-rate runs")
    ap.add_argument("--settle-s", type=float, default=2.0, help="idle seconds before each measured run")
    ap.add_argument("--quick", action="store_true", help="2 repeats, 8 slots (a smoke run; below the rule)")
    a = ap.parse_args()
    if a.quick:
        a.repeats, a.slots, a.batch1_requests = 2, 8, 4
    out_base = a.out or os.path.join(ROOT, "bench", "results", "09_structured_cpu")
    lio_server = os.path.join(a.bin, "lio-server")
    for path, what in ((lio_server, "cmake --build build"), (a.model, "scripts/fetch_model.sh")):
        if not os.path.exists(path):
            raise SystemExit(f"run.py: {path} is missing ({what})")
    llama = not a.no_llama
    if llama and not os.path.exists(a.llama_server):
        raise SystemExit(f"run.py: {a.llama_server} is missing (scripts/build_llama_server.sh, or --no-llama)")
    threads = os.cpu_count()
    lio_argv = [lio_server, "--model", a.model, "--host", "127.0.0.1", "--max-num-seqs", str(a.slots),
                "--served-model-name", SERVED]
    llama_argv = [a.llama_server, "-m", a.model, "--host", "127.0.0.1", "--parallel", str(a.slots), "--cont-batching",
                  "-c", str(a.slots * 1024), "--threads", str(threads), "--alias", SERVED]
    log_dir = tempfile.mkdtemp(prefix="lio-structured-")
    servers = {"lio": Server("lio-server", lio_argv, log_dir)}
    try:
        if llama:
            servers["llama"] = Server("llama-server", llama_argv, log_dir)
        result = measure(a, servers)
    finally:
        for s in servers.values():
            s.stop()
    servers_text = (f"lio-server --max-num-seqs {a.slots}" +
                    (f"; llama-server --parallel {a.slots} --cont-batching -c {a.slots * 1024} --threads {threads} "
                     "(llama.cpp vendored in llama-cpp-python " + llama_cpp_python_pin() + ", CPU build)"
                     if llama else ""))
    result = {"provenance": provenance(), "settings": {
        "repeats": a.repeats, "slots": a.slots, "batch1_requests": a.batch1_requests,
        "fixed_tokens": a.fixed_tokens, "full_tokens": a.full_tokens, "threads": threads, "settle_s": a.settle_s,
        "model": os.path.basename(a.model), "servers": servers_text, "person_schema": PERSON_SCHEMA,
        "team_schema": TEAM_SCHEMA}, **result}
    written = write_results(out_base, result, markdown)
    print(markdown(written))


def llama_cpp_python_pin():
    with open(os.path.join(ROOT, "scripts", "requirements.txt")) as f:
        for line in f:
            if line.startswith("llama-cpp-python=="):
                return line.strip().split("==")[1]
    return "not recorded"


def measure(a, servers):
    engines = list(servers)
    cells = [(1, a.batch1_requests), (a.slots, a.slots)]  # (concurrency, requests per run)
    tps = {(e, c, m): [] for e in engines for c, _ in cells for m in ("free", "schema")}
    cut = {(e, c, m): [] for e in engines for c, _ in cells for m in ("free", "schema")}
    masks = {c: {"masks": 0.0, "seconds": 0.0, "wall_s": 0.0} for c, _ in cells}
    combos = [(e, mode) for e in engines for mode in ("free", "schema")]
    for rep in range(a.repeats):
        for c, n in cells:
            # A B B A: odd repeats run the cells in reverse, so neither mode nor engine always
            # follows the other; each run starts after a.settle_s idle, when the previous
            # server's threads have stopped spinning (OpenMP's and ggml's wait by spinning).
            for e, mode in (combos if rep % 2 == 0 else combos[::-1]):
                time.sleep(a.settle_s)
                tag = f"r{rep}c{c}{e[0]}{mode[0]}"
                s = servers[e]
                if e == "lio" and mode == "schema":
                    m0 = metric(s, "lio:structured_output_masks_total")
                    s0 = metric(s, "lio:structured_output_mask_seconds_total")
                wall, replies = run_batch(s, team_prompts(n, tag), TEAM_SCHEMA if mode == "schema" else None,
                                          a.fixed_tokens, c, ignore_eos=True)
                tokens = sum(t for _, t, _ in replies)
                tps[(e, c, mode)].append(tokens / wall)
                cut[(e, c, mode)].append(sum(1 for _, t, _ in replies if t == a.fixed_tokens) / n)
                if e == "lio" and mode == "schema":
                    masks[c]["masks"] += metric(s, "lio:structured_output_masks_total") - m0
                    masks[c]["seconds"] += metric(s, "lio:structured_output_mask_seconds_total") - s0
                    masks[c]["wall_s"] += wall
                print(f"repeat {rep + 1}/{a.repeats} concurrency {c:2d} {e:5s} {mode:6s}: "
                      f"{tokens / wall:7.1f} tok/s ({tokens} tokens, {wall:.2f} s)", flush=True)
    throughput = []
    for c, n in cells:
        for e in engines:
            free, con = tps[(e, c, "free")], tps[(e, c, "schema")]
            ratio = spread([y / x for x, y in zip(free, con)])
            row = {"engine": e, "concurrency": c, "requests": n, "free_tokens_per_s": spread(free),
                   "schema_tokens_per_s": spread(con), "schema_over_free": ratio,
                   "tie": is_tie(ratio["min"], ratio["max"]),
                   "cut_at_fixed_tokens": min(cut[(e, c, "free")] + cut[(e, c, "schema")])}
            if e == "lio":
                mk = masks[c]
                row["mask_us"] = 1e6 * mk["seconds"] / mk["masks"] if mk["masks"] else None
                row["masks_per_run"] = mk["masks"] / a.repeats
                row["mask_share_of_wall"] = mk["seconds"] / mk["wall_s"] if mk["wall_s"] else None
            throughput.append(row)
    peer = []
    if "llama" in servers:
        for c, _ in cells:
            for mode in ("free", "schema"):
                r = spread([x / y for x, y in zip(tps[("lio", c, mode)], tps[("llama", c, mode)])])
                peer.append({"concurrency": c, "mode": mode, "lio_over_llama": r, "tie": is_tie(r["min"], r["max"])})
    parse = []
    for e in engines:
        for temperature in (0.0, 0.8):
            for mode in ("free", "schema"):
                wall, replies = run_batch(servers[e], prompts(a.slots, f"p{e[0]}{mode[0]}{temperature}"),
                                          PERSON_SCHEMA if mode == "schema" else None, a.full_tokens, a.slots,
                                          temperature)
                parsed, followed, mean_tokens = parse_rates(replies)
                parse.append({"engine": e, "temperature": temperature, "mode": mode, "requests": a.slots,
                              "parse_rate": parsed, "schema_rate": followed, "mean_completion_tokens": mean_tokens,
                              "stopped": sum(1 for _, _, f in replies if f == "stop") / a.slots,
                              "example": replies[0][0][:160]})
                print(f"parse {e:5s} t={temperature} {mode:6s}: parses {parsed:.2f}, follows {followed:.2f}, "
                      f"{mean_tokens:.1f} tokens", flush=True)
    return {"throughput": throughput, "peer": peer, "parse": parse}


def markdown(r):
    s = r["settings"]
    lines = ["# Structured outputs: the cost of a JSON-schema constraint (bench/structured/run.py)", ""]
    lines += provenance_lines(r["provenance"])
    lines += [f"- Model: {s['model']}; servers: {s['servers']}",
              f"- Fixed work: every request cut at {s['fixed_tokens']} output tokens; concurrency 1 runs "
              f"{s['batch1_requests']} requests one after another, concurrency {s['slots']} runs {s['slots']} at once; "
              f"{s['repeats']} repeats, engines and modes interleaved A B B A, {s['settle_s']:g} s idle before each run; "
              "median [min-max]", ""]
    if s["repeats"] < 5:
        lines += [f"**{s['repeats']} repeats: below the 5 the performance method asks for (a smoke run).**", ""]
    lines += ["| engine | concurrency | free tok/s | schema tok/s | schema / free | µs per mask | mask share of wall |",
              "|---|---:|---:|---:|---:|---:|---:|"]
    for t in r["throughput"]:
        ratio = t["schema_over_free"]
        us = "-" if t.get("mask_us") is None else f"{t['mask_us']:.1f}"
        share = "-" if t.get("mask_share_of_wall") is None else f"{100 * t['mask_share_of_wall']:.2f}%"
        lines.append(f"| {t['engine']} | {t['concurrency']} | {cell(t['free_tokens_per_s'])} | "
                     f"{cell(t['schema_tokens_per_s'])} | {ratio['median']:.3f} [{ratio['min']:.3f}-{ratio['max']:.3f}]"
                     f"{' tie' if t['tie'] else ''} | {us} | {share} |")
    if r["peer"]:
        lines += ["", "| concurrency | mode | lio / llama tok/s |", "|---:|---|---:|"]
        for p in r["peer"]:
            x = p["lio_over_llama"]
            lines.append(f"| {p['concurrency']} | {p['mode']} | {x['median']:.2f}x [{x['min']:.2f}-{x['max']:.2f}]"
                         f"{' tie' if p['tie'] else ''} |")
    lines += ["", f"Parse rate: {s['slots']} requests answered in full (max_tokens {s['full_tokens']}), once per engine.",
              "", "| engine | temperature | mode | parses as JSON | follows the schema | stopped | mean tokens |",
              "|---|---:|---|---:|---:|---:|---:|"]
    for p in r["parse"]:
        lines.append(f"| {p['engine']} | {p['temperature']} | {p['mode']} | {p['parse_rate']:.2f} | "
                     f"{p['schema_rate']:.2f} | {p['stopped']:.2f} | {p['mean_completion_tokens']:.1f} |")
    return "\n".join(lines) + "\n"


def cell(x):
    return f"{x['median']:.1f} [{x['min']:.1f}-{x['max']:.1f}]"


if __name__ == "__main__":
    sys.exit(main())
