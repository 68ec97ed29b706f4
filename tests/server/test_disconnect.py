#!/usr/bin/env python3
"""Clients that hang up: their requests are aborted and their KV blocks freed at once.

16 streaming requests (max_tokens 4000, ignore_eos) run together; each socket is closed after
its first 3 SSE events; within 1 s (x --slow-factor) /metrics must show
lio:num_requests_running 0, lio:num_requests_waiting 0 and lio:kv_cache_usage_perc 0. Then the
same for running and waiting requests whose client never read a byte, for resets (RST), and a
normal request still works.
The server runs with --prefix-cache none so a freed block counts as free, not as cached.
Run by ctest as `server_disconnect` (labels `server`, also in the ASan build).
"""
import socket
import struct
import sys
import time

import server_harness as h

N_STREAMS = 16
SUBJECTS = ["the sea", "a mountain", "the moon", "a city", "trains", "bread", "rain", "music",
            "a library", "winter", "bees", "a bridge", "clocks", "maps", "salt", "lamps"]


def body(i, max_tokens=4000):
    return {"model": h.SERVED_MODEL, "prompt": f"Write a very long essay about {SUBJECTS[i % len(SUBJECTS)]}.",
            "max_tokens": max_tokens, "ignore_eos": True, "temperature": 0.7, "seed": i}


class Disconnect(h.ServerTestCase):
    def open_stream(self, i):
        s = socket.create_connection(("127.0.0.1", self.server.port), timeout=60 * h.Config.slow_factor)
        s.sendall(h.raw_stream_request_bytes(self.server, "/v1/completions", body(i)))
        return s

    def read_events(self, s, n_events):
        """Reads until n_events SSE `data:` lines have arrived; returns the bytes read."""
        buf = b""
        while buf.count(b"data:") < n_events:
            chunk = s.recv(65536)
            if not chunk:
                self.fail(f"stream ended after {buf.count(b'data:')} events: {buf[-300:]!r}")
            buf += chunk
        return buf

    def assert_idle_within(self, seconds, what):
        idle, took, last = h.wait_idle(self.server, within_s=seconds)
        print(f"  {what}: idle after {took * 1000:.0f} ms", flush=True)
        self.assertTrue(idle, f"{what}: still busy {took:.2f} s later: {last}")

    def test_1_streams_dropped_mid_way(self):
        socks = [self.open_stream(i) for i in range(N_STREAMS)]
        try:
            for s in socks:
                head = self.read_events(s, 3)
                self.assertIn(b" 200 ", head.split(b"\r\n", 1)[0])
            # All 16 are generating (4000 tokens each: none can have finished yet).
            m = h.metrics(self.server)
            self.assertEqual(h.metric_sum(m, "lio:num_requests_running"), N_STREAMS)
            self.assertGreater(h.metric_sum(m, "lio:kv_cache_usage_perc"), 0)
        finally:
            for s in socks:
                s.close()
        self.assert_idle_within(1.0, f"{N_STREAMS} streams dropped after 3 events")

    def test_2_running_and_waiting_dropped_unread(self):
        # 20 requests for 16 slots: 16 run, 4 wait in the queue; the client reads nothing and
        # hangs up on all of them. A waiting request writes nothing, so the server learns of its
        # client only by polling, or once it is scheduled and writes: 2 s.
        socks = [self.open_stream(i) for i in range(N_STREAMS + 4)]
        try:
            deadline = time.monotonic() + 10 * h.Config.slow_factor
            while True:
                m = h.metrics(self.server)
                state = (h.metric_sum(m, "lio:num_requests_running"), h.metric_sum(m, "lio:num_requests_waiting"))
                if state == (N_STREAMS, 4):
                    break
                self.assertLess(time.monotonic(), deadline, f"never saw 16 running + 4 waiting: {state}")
                time.sleep(0.02)
        finally:
            for s in socks:
                s.close()
        self.assert_idle_within(2.0, f"{N_STREAMS} running + 4 waiting dropped unread")

    def test_3_reset_mid_way(self):
        # An abortive close (RST instead of FIN), as a killed client process sends.
        socks = [self.open_stream(i) for i in range(4)]
        for s in socks:
            self.read_events(s, 2)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            s.close()
        self.assert_idle_within(1.0, "4 streams reset mid-way")

    def test_4_normal_request_after(self):
        r = h.stream_post(self.server, "/v1/completions", dict(body(0, max_tokens=12),
                                                               stream_options={"include_usage": True}))
        self.assertEqual(r.status, 200, r.error)
        self.assertTrue(r.done)
        self.assertEqual(r.usage()["completion_tokens"], 12)
        self.assertEqual(r.finish_reasons(), {0: "length"})
        self.assert_idle_within(1.0, "after a normal request")


if __name__ == "__main__":
    sys.exit(h.main({"server": h.Server(["--prefix-cache", "none", "--max-num-seqs", str(N_STREAMS)],
                                        name="disconnect")}))
