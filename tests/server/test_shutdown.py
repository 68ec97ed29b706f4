#!/usr/bin/env python3
"""SIGTERM is a graceful shutdown (issue 43, item 4; OpenAiServer::shutdown).

Each test starts its own lio-server and sends it SIGTERM with requests in flight (all six, or
four, in the engine by /metrics, not by a sleep). Every wait is x the harness's slow factor, the
one tests/support/machine_speed.py measured for this build on this machine:
  - drain: four streams and two whole requests of 48 tokens are running when SIGTERM comes, and
    the server's --shutdown-timeout is 60 s x the slow factor: 48 decode steps of six sequences
    take under 2 s in a Release build on an idle 2-core machine (it exits 1.7 s after the
    signal), so the work fits the deadline with the same 30x margin on any build and machine. Within 1 s (x factor) a new request gets 503
    and /health 503 "draining"; every request in flight completes in full ([DONE], finish_reason
    length, 48 tokens each); the server exits 0 and says every request finished.
  - deadline: --shutdown-timeout 1; three streams and one whole request of 4,000 tokens cannot
    finish in time. Each stream ends within (1 s + 4 s) x factor of the signal with an error event
    naming --shutdown-timeout and then [DONE]; the whole request gets a 503 with that error; the
    server exits 0 within (1 s + 6 s) x factor and reports the requests it aborted.
  - idle: SIGTERM with nothing in flight: exit 0 within 2 s x factor.
Run by ctest as `server_shutdown` (label `server`, also under ASan and TSan).
"""
import math
import signal
import sys
import threading
import time

import server_harness as h


def stream_body(i, max_tokens):
    return {"model": h.SERVED_MODEL, "prompt": f"Write a long story number {i} about a lighthouse.",
            "max_tokens": max_tokens, "ignore_eos": True, "temperature": 0.7, "seed": i,
            "stream_options": {"include_usage": True}}


class InFlight:
    """Requests sent from threads; results[i] is a StreamResult (streams) or (status, json)."""

    def __init__(self, server, n_streams, n_whole, max_tokens):
        self.results = [None] * (n_streams + n_whole)
        self.first_event = [threading.Event() for _ in range(n_streams)]
        self.threads = []
        for i in range(n_streams):
            self.threads.append(threading.Thread(target=self._stream, args=(server, i, max_tokens), daemon=True))
        for i in range(n_streams, n_streams + n_whole):
            self.threads.append(threading.Thread(target=self._whole, args=(server, i, max_tokens), daemon=True))
        for t in self.threads:
            t.start()

    def _stream(self, server, i, max_tokens):
        try:
            self.results[i] = h.stream_post(server, "/v1/completions", stream_body(i, max_tokens),
                                            timeout=120 * h.Config.slow_factor, on_event=self.first_event[i].set)
        except Exception as e:  # noqa: BLE001 — recorded, the test asserts on it
            self.results[i] = h.StreamResult()
            self.results[i].error = f"{type(e).__name__}: {e}"
        finally:
            self.first_event[i].set()

    def _whole(self, server, i, max_tokens):
        try:
            body = stream_body(i, max_tokens)
            del body["stream_options"]
            status, j, _ = h.post_json(server, "/v1/completions", body,
                                       timeout=120 * h.Config.slow_factor)
            self.results[i] = (status, j)
        except Exception as e:  # noqa: BLE001
            self.results[i] = (0, f"{type(e).__name__}: {e}")

    def wait_started(self, within_s):
        deadline = time.monotonic() + within_s
        for e in self.first_event:
            e.wait(max(0.0, deadline - time.monotonic()))
        return all(e.is_set() for e in self.first_event)

    def join(self, within_s):
        deadline = time.monotonic() + within_s
        for t in self.threads:
            t.join(max(0.0, deadline - time.monotonic()))
        return not any(t.is_alive() for t in self.threads)


def wait_in_engine(test, server, n):
    """Waits until the engine holds n requests (running + waiting on /metrics): the whole
    (non-streamed) requests send no event that says they arrived."""
    deadline = time.monotonic() + 60 * h.Config.slow_factor
    while True:
        m = h.metrics(server)
        held = h.metric_sum(m, "lio:num_requests_running") + h.metric_sum(m, "lio:num_requests_waiting")
        if held >= n:
            return
        test.assertLess(time.monotonic(), deadline, f"only {held} of {n} requests reached the engine")
        time.sleep(0.02)


def wait_exit(server, within_s):
    try:
        return server.proc.wait(timeout=within_s)
    except Exception:  # noqa: BLE001 — subprocess.TimeoutExpired
        return None


class Shutdown(h.ServerTestCase):
    def start(self, timeout_s, name):
        srv = h.Server(["--shutdown-timeout", str(timeout_s), "--max-num-seqs", "16"], name=name).start()
        self.addCleanup(lambda: srv.proc.poll() is None and (srv.proc.kill(), srv.proc.wait()))
        return srv

    def test_1_drain_finishes_requests_in_flight(self):
        deadline_s = math.ceil(60 * h.Config.slow_factor)
        srv = self.start(deadline_s, "drain")
        work = InFlight(srv, n_streams=4, n_whole=2, max_tokens=48)
        self.assertTrue(work.wait_started(60 * h.Config.slow_factor), "the streams never started")
        wait_in_engine(self, srv, 6)
        t0 = time.monotonic()
        srv.proc.send_signal(signal.SIGTERM)
        refused_at, health = None, None
        # One-token probes: one the server takes before the signal is handled answers after a
        # single step, not after a whole default-length completion that would outlast the window.
        probe = {"model": h.SERVED_MODEL, "prompt": "hi", "max_tokens": 1}
        while time.monotonic() - t0 < 1 * h.Config.slow_factor:
            status, j, _ = h.post_json(srv, "/v1/completions", probe)
            if status == 503:
                refused_at = time.monotonic() - t0
                self.assertIn("shutting down", j["error"]["message"])
                health = h.request("GET", srv.port, "/health")
                break
            time.sleep(0.05)
        self.assertIsNotNone(refused_at, "a new request was still taken 1 s after SIGTERM")
        self.assertEqual((health[0], health[2]), (503, b'{"status":"draining"}'))
        print(f"  new requests refused {refused_at * 1000:.0f} ms after SIGTERM", flush=True)
        self.assertTrue(work.join(deadline_s + 30 * h.Config.slow_factor), "a request in flight never ended")
        code = wait_exit(srv, 30 * h.Config.slow_factor)
        print(f"  exit {code} {time.monotonic() - t0:.2f} s after SIGTERM", flush=True)
        for i, r in enumerate(work.results[:4]):
            self.assertEqual(r.status, 200, f"stream {i}: {r.error}")
            self.assertTrue(r.done and r.after_done == 0, f"stream {i}: no clean [DONE]")
            self.assertEqual(r.finish_reasons(), {0: "length"}, f"stream {i}")
            self.assertEqual((r.usage() or {}).get("completion_tokens"), 48, f"stream {i}: {r.usage()}")
        for status, j in work.results[4:]:
            self.assertEqual(status, 200, j)
            self.assertEqual(j["usage"]["completion_tokens"], 48)
        self.assertEqual(code, 0, srv.log_tail())
        self.assertIn("every request finished", srv.log_tail())

    def test_2_deadline_aborts_the_rest_cleanly(self):
        srv = self.start(1, "deadline")
        work = InFlight(srv, n_streams=3, n_whole=1, max_tokens=4000)
        self.assertTrue(work.wait_started(60 * h.Config.slow_factor), "the streams never started")
        wait_in_engine(self, srv, 4)
        t0 = time.monotonic()
        srv.proc.send_signal(signal.SIGTERM)
        self.assertTrue(work.join((1 + 4) * h.Config.slow_factor), "a request outlived the deadline by 4 s")
        ended = time.monotonic() - t0
        code = wait_exit(srv, (1 + 6) * h.Config.slow_factor)
        print(f"  requests ended {ended:.2f} s, exit {code} {time.monotonic() - t0:.2f} s after SIGTERM "
              f"(--shutdown-timeout 1)", flush=True)
        for i, r in enumerate(work.results[:3]):
            self.assertEqual(r.status, 200, f"stream {i}: {r.error}")
            self.assertTrue(r.done and r.after_done == 0, f"stream {i}: no [DONE] after the error event")
            last = r.chunks[-1] if r.chunks else {}
            self.assertIn("error", last, f"stream {i}: last event {last}")
            self.assertIn("--shutdown-timeout", last["error"]["message"])
        status, j = work.results[3]
        self.assertEqual(status, 503, j)
        self.assertIn("--shutdown-timeout", j["error"]["message"])
        self.assertEqual(code, 0, srv.log_tail())
        self.assertIn("aborted at the deadline", srv.log_tail())

    def test_3_idle_server_exits_at_once(self):
        srv = self.start(20, "idle")
        t0 = time.monotonic()
        srv.proc.send_signal(signal.SIGTERM)
        code = wait_exit(srv, 2 * h.Config.slow_factor)
        self.assertEqual(code, 0, f"exit {code} after {time.monotonic() - t0:.2f} s\n{srv.log_tail()}")


if __name__ == "__main__":
    sys.exit(h.main({}))
