#!/usr/bin/env python3
"""64 concurrent streaming clients, loopback only, for a bounded amount of work.

Each client thread sends streaming requests back to back (completions and chat alternating,
max_tokens 4..16 with ignore_eos, stream_options.include_usage): at least MIN_REQUESTS_PER_CLIENT
each, and more until the time is up. The work, not the clock, makes it a load test: a slow
machine or build sends the same 128 requests and takes longer, a fast one sends more. Every
response must be complete: HTTP 200, SSE, `[DONE]` last, finish_reason "length" for its
choice, usage.completion_tokens == max_tokens, no chunk after [DONE]. Seeded requests repeated
under load must give the text they gave alone (COURSE.md: a seeded request gives the same
tokens at any load). At the end: nothing running or waiting, KV usage 0 (no leaked block), and
the token and request counters of /metrics moved by exactly what the clients received.
The server runs with --max-num-seqs 32, so half of the clients wait in the queue at times, and
the hash prefix cache on (the chat template's shared prefix hits it).
Run by ctest as `server_load` (label `server`). --duration-s sets the time (default 20).
"""
import random
import sys
import threading
import time

import server_harness as h

N_CLIENTS = 64
MIN_REQUESTS_PER_CLIENT = 2
SUBJECTS = ["the sea", "a mountain", "the moon", "a city", "trains", "bread", "rain", "music"]


def request_for(rng, i):
    """(path, body) of a random request; chat for odd i."""
    max_tokens = rng.randint(4, 16)
    subject = rng.choice(SUBJECTS)
    common = {"model": h.SERVED_MODEL, "max_tokens": max_tokens, "ignore_eos": True, "temperature": 0.8,
              "seed": rng.randint(0, 1 << 30), "stream_options": {"include_usage": True}}
    if i % 2:
        return "/v1/chat/completions", dict(common, messages=[{"role": "user", "content": f"Tell me about {subject}."}])
    return "/v1/completions", dict(common, prompt=f"A short note about {subject}:")


# Seeded requests whose text alone is recorded first, then compared under load.
PINNED = [("/v1/completions", {"model": h.SERVED_MODEL, "prompt": f"A story about {s}:", "max_tokens": 12,
                               "ignore_eos": True, "temperature": 1.0, "seed": 100 + k,
                               "stream_options": {"include_usage": True}})
          for k, s in enumerate(SUBJECTS[:4])]


def check_response(r, path, body):
    """Problems with one streamed response (empty list = complete and right)."""
    if r.status != 200:
        return [f"status {r.status}: {r.error}"]
    problems = []
    if not r.content_type.startswith("text/event-stream"):
        problems.append(f"Content-Type {r.content_type!r}")
    if not r.done:
        problems.append("no [DONE]")
    if r.after_done:
        problems.append(f"{r.after_done} events after [DONE]")
    if r.finish_reasons() != {0: "length"}:
        problems.append(f"finish_reasons {r.finish_reasons()}")
    usage = r.usage()
    if not usage or usage.get("completion_tokens") != body["max_tokens"]:
        problems.append(f"usage {usage} for max_tokens {body['max_tokens']}")
    n_text_chunks = sum(1 for c in r.chunks for ch in c.get("choices", [])
                        if (ch.get("text") or (ch.get("delta") or {}).get("content")))
    if not 1 <= n_text_chunks <= body["max_tokens"]:
        problems.append(f"{n_text_chunks} text chunks for {body['max_tokens']} tokens")
    if len({c.get("id") for c in r.chunks}) != 1:
        problems.append("chunks of one stream carry different ids")
    return problems


class Load(h.ServerTestCase):
    duration_s = 20.0

    def test_64_streaming_clients(self):
        pinned_alone = []
        for path, body in PINNED:
            r = h.stream_post(self.server, path, body)
            self.assertEqual(check_response(r, path, body), [])
            pinned_alone.append(r.text())
        before = h.metrics(self.server)

        lock = threading.Lock()
        stats = {"requests": 0, "tokens": 0, "prompt_tokens": 0, "errors": [], "pinned_mismatch": []}
        deadline = time.monotonic() + self.duration_s

        def client(i):
            rng = random.Random(i)
            n = 0
            while n < MIN_REQUESTS_PER_CLIENT or time.monotonic() < deadline:
                pinned = i % 8 == 0 and n % 3 == 2
                if pinned:
                    k = (i // 8 + n) % len(PINNED)
                    path, body = PINNED[k]
                else:
                    path, body = request_for(rng, i + n)
                try:
                    r = h.stream_post(self.server, path, body, timeout=120 * h.Config.slow_factor)
                    problems = check_response(r, path, body)
                except Exception as e:  # a dropped or hung connection is an error, not a crash of the test
                    r, problems = None, [f"{type(e).__name__}: {e}"]
                with lock:
                    stats["requests"] += 1
                    if problems:
                        stats["errors"].append((i, path, problems))
                    else:
                        stats["tokens"] += r.usage()["completion_tokens"]
                        stats["prompt_tokens"] += r.usage()["prompt_tokens"]
                        if pinned and r.text() != pinned_alone[k]:
                            stats["pinned_mismatch"].append((k, pinned_alone[k], r.text()))
                n += 1

        t0 = time.monotonic()
        threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(N_CLIENTS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=self.duration_s + 300 * h.Config.slow_factor)
        wall = time.monotonic() - t0
        self.assertFalse(any(t.is_alive() for t in threads), "a client thread hung")
        print(f"  {stats['requests']} requests, {stats['tokens']} tokens in {wall:.1f} s "
              f"({stats['requests'] / wall:.1f} req/s, {stats['tokens'] / wall:.0f} tok/s), "
              f"{len(stats['errors'])} errors", flush=True)
        for e in stats["errors"][:10]:
            print("  error:", e)
        self.assertEqual(stats["errors"], [])
        self.assertEqual(stats["pinned_mismatch"], [], "a seeded request changed its text under load")

        idle, took, last = h.wait_idle(self.server, within_s=2.0)
        self.assertTrue(idle, f"not idle {took:.2f} s after the load: {last} (leaked blocks?)")
        after = h.metrics(self.server)

        def delta(name):
            return h.metric_sum(after, name) - h.metric_sum(before, name)
        self.assertEqual(delta("lio:generation_tokens_total"), stats["tokens"])
        self.assertEqual(delta("lio:prompt_tokens_total"), stats["prompt_tokens"])
        self.assertEqual(delta("lio:request_success_total"), stats["requests"])
        self.assertEqual(delta("lio:e2e_request_latency_seconds_count"), stats["requests"])
        self.assertGreater(delta("lio:prefix_cache_hits_total"), 0, "the shared chat prefix never hit the cache")


if __name__ == "__main__":
    if "--duration-s" in sys.argv:
        k = sys.argv.index("--duration-s")
        Load.duration_s = float(sys.argv[k + 1])
        del sys.argv[k:k + 2]
    sys.exit(h.main({"server": h.Server(["--prefix-cache", "hash", "--max-num-seqs", "32", "--max-queue", "256"],
                                        name="load")}))
