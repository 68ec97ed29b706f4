#!/usr/bin/env python3
"""Limits and slow clients (issue 43, item 4).

One server with --max-request-bytes 4096 --max-model-len 256 --max-input-tokens 100
--http-threads 16:
  - a body over 4,096 bytes is a 413, a prompt over 100 tokens (completions or chat) a 400
    naming `prompt` / `messages`, prompt + max_tokens over 256 a 400 naming `max_tokens`, each
    with an OpenAI error body that names the flag, and none reaches the engine (/metrics' prompt
    tokens and finished requests do not move); /v1/models reports max_model_len 256; a request
    within the limits is served
  - bad values of the flags stop lio-server at start-up with a message naming the flag
  - slowloris: 8 clients send their headers one byte a second for 6 s while 5 normal requests
    run: those are served as fast as without the slow clients (within 3x + 1 s of the baseline),
    and the slow ones hold no engine resource (running, waiting and KV usage 0 throughout)
  - a client that stops sending half-way through its headers is disconnected by the server
    (cpp-httplib's 5 s read timeout) rather than holding its HTTP thread for ever
Run by ctest as `server_limits` (label `server`; Release build only).
"""
import socket
import subprocess
import sys
import threading
import time

import server_harness as h

LIMIT_ARGS = ["--max-request-bytes", "4096", "--max-model-len", "256", "--max-input-tokens", "100",
              "--http-threads", "16"]


def completion(prompt, **kw):
    return dict({"model": h.SERVED_MODEL, "prompt": prompt, "max_tokens": 8, "temperature": 0}, **kw)


class Limits(h.ServerTestCase):
    def engine_counters(self):
        m = h.metrics(self.server)
        return (h.metric_sum(m, "lio:prompt_tokens_total"), h.metric_sum(m, "lio:request_success_total"))

    def assert_error(self, status, j, want_status, param, flag):
        self.assertEqual(status, want_status, j)
        self.assertIsInstance(j, dict)
        self.assertIn("error", j)
        if param is not None:
            self.assertEqual(j["error"].get("param"), param, j)
        self.assertIn(flag, j["error"]["message"])

    def test_1_limits_answer_4xx_before_any_work(self):
        before = self.engine_counters()
        status, j, _ = h.post_json(self.server, "/v1/completions", completion("x" * 5000))
        self.assert_error(status, j, 413, None, "--max-request-bytes")
        status, j, _ = h.post_json(self.server, "/v1/completions", completion("word " * 150))
        self.assert_error(status, j, 400, "prompt", "--max-input-tokens")
        status, j, _ = h.post_json(self.server, "/v1/chat/completions",
                                   {"model": h.SERVED_MODEL, "messages": [{"role": "user", "content": "word " * 150}]})
        self.assert_error(status, j, 400, "messages", "--max-input-tokens")
        status, j, _ = h.post_json(self.server, "/v1/completions", completion("word " * 50, max_tokens=220))
        self.assert_error(status, j, 400, "max_tokens", "256")
        self.assertEqual(self.engine_counters(), before, "a refused request reached the engine")
        status, j, _ = h.post_json(self.server, "/v1/completions", completion("word " * 50, max_tokens=16))
        self.assertEqual(status, 200, j)
        status, _, data = h.request("GET", self.server.port, "/v1/models")
        self.assertIn(b'"max_model_len":256', data.replace(b" ", b""))

    def test_2_bad_flag_values_stop_the_server_at_start(self):
        for flag, value, words in [("--max-model-len", "100000", "--max-model-len must be in [1, 8192]"),
                                   ("--max-input-tokens", "8192", "--max-input-tokens must be in [1, 8191]"),
                                   ("--max-request-bytes", "0", "--max-request-bytes must be >= 1"),
                                   ("--shutdown-timeout", "-1", "--shutdown-timeout must be >= 0")]:
            out = subprocess.run([h.Config.server_bin, "--model", h.Config.model, "--port", "0", flag, value],
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                 timeout=120 * h.Config.slow_factor)
            self.assertNotEqual(out.returncode, 0, f"{flag} {value} was accepted")
            self.assertIn(words, out.stdout, f"{flag} {value}")

    def test_3_slowloris_holds_no_engine_resource_and_stops_no_one(self):
        def timed_request(i):
            t = time.monotonic()
            status, j, _ = h.post_json(self.server, "/v1/completions",
                                       completion(f"Item {i}: the quick brown fox", max_tokens=16, ignore_eos=True))
            self.assertEqual(status, 200, j)
            return time.monotonic() - t

        baseline = sorted(timed_request(i) for i in range(5))[2]
        head = (f"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1:{self.server.port}\r\n"
                "Content-Type: application/json\r\nX-Padding: " + "a" * 64).encode()
        stop = threading.Event()
        errors = []

        def slow_client():
            try:
                with socket.create_connection(("127.0.0.1", self.server.port), timeout=30) as s:
                    for b in head:
                        if stop.is_set():
                            return
                        s.sendall(bytes([b]))
                        stop.wait(1.0)
            except OSError as e:
                errors.append(e)

        slow = [threading.Thread(target=slow_client, daemon=True) for _ in range(8)]
        for t in slow:
            t.start()
        try:
            time.sleep(1.5)
            during, busy = [], []
            for i in range(5):
                during.append(timed_request(100 + i))
                idle, took, last = h.wait_idle(self.server, within_s=1.0)  # the slow ones hold nothing
                if not idle:
                    busy.append(last)
            time.sleep(max(0.0, 6.0 - 1.5 - sum(during)))
            print(f"  median request {baseline * 1000:.0f} ms alone, {sorted(during)[2] * 1000:.0f} ms beside 8 "
                  f"slowloris clients", flush=True)
            self.assertEqual(busy, [], "the slow clients held engine resources")
            self.assertLess(sorted(during)[2], 3 * baseline + 1.0 * h.Config.slow_factor)
            self.assertTrue(all(t.is_alive() for t in slow), f"a slow client ended early: {errors}")
        finally:
            stop.set()
            for t in slow:
                t.join(timeout=5)

    def test_4_a_stalled_client_is_disconnected(self):
        with socket.create_connection(("127.0.0.1", self.server.port), timeout=30 * h.Config.slow_factor) as s:
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Le")
            t = time.monotonic()
            data = s.recv(4096)  # blocks until the server gives up on us
            took = time.monotonic() - t
        print(f"  a stalled client was dropped after {took:.1f} s", flush=True)
        self.assertLess(took, 15 * h.Config.slow_factor)
        self.assertTrue(data == b"" or data.startswith(b"HTTP/1.1 4"), data[:100])


if __name__ == "__main__":
    sys.exit(h.main({"server": h.Server(LIMIT_ARGS, name="limits")}))
