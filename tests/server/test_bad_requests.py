#!/usr/bin/env python3
"""Malformed and unsupported requests to lio-server, as raw HTTP (the exact bytes matter).

Every case must get its 4xx (never a 5xx, never a dropped connection) with OpenAI's error body
{"error": {"message", "type", "param", "code"}}, `param` naming the offending field where the
case has one; after the whole list the server still answers a normal request exactly as before
it. Where OpenAI's own behaviour is ambiguous (missing model, odd content type, ...), a case
lists every answer it accepts; a 200 is then checked to be a real completion.
A second server, with --max-num-seqs 2 --max-queue 2, checks the 503 on a full queue.
Run by ctest as `server_bad_requests` (labels `server`, also in the ASan build).
"""
import http.client
import json
import socket
import sys
import time

import server_harness as h

COMPLETIONS = "/v1/completions"
CHAT = "/v1/chat/completions"
M = h.SERVED_MODEL
USER = [{"role": "user", "content": "hi"}]
FILLER = "The history of the printing press is a story of many small improvements. "  # 14 tokens


def comp(**kw):
    """A valid completions body with `kw` overriding or adding fields (value None deletes)."""
    body = {"model": M, "prompt": "Hello", "max_tokens": 2}
    body.update(kw)
    return {k: v for k, v in body.items() if v is not None}


def chat(**kw):
    body = {"model": M, "messages": USER, "max_tokens": 2}
    body.update(kw)
    return {k: v for k, v in body.items() if v is not None}


def raw(text):
    return text.encode() if isinstance(text, str) else text


class Case:
    """One request and the answers it accepts.
    status: an int or a tuple of accepted statuses. param: None (not checked), "x" (exactly
    x), or "x*" (starts with x: "messages*" accepts "messages[0].role")."""

    def __init__(self, name, body, path=COMPLETIONS, status=400, param=None, method="POST", headers=None):
        self.name, self.body, self.path, self.method = name, body, path, method
        self.status = status if isinstance(status, tuple) else (status,)
        self.param, self.headers = param, headers


def cases(key):
    deep = "[" * 100000 + "]" * 100000
    overlong = FILLER * 700  # ~9800 tokens: past the 8192-token context
    long_fits = FILLER * 550  # ~7700 tokens: fits, but not with 1000 more
    deep_schema = {"type": "string"}
    for _ in range(40):  # past the 32 levels LIO compiles
        deep_schema = {"type": "array", "items": deep_schema}
    auth_bad = {"Authorization": "Bearer sk-wrong"}
    return [
        # -- not JSON, or not a JSON object
        Case("bad json", raw('{"model": "lio-test", "prompt": "hi"')),
        Case("empty body", raw("")),
        Case("json array", raw("[1, 2]")),
        Case("json string", raw('"hello"')),
        Case("json null", raw("null")),
        Case("json number chat", raw("42"), CHAT),
        Case("trailing garbage", raw('{"model": "lio-test", "prompt": "hi"} x')),
        Case("NaN literal", raw('{"model": "lio-test", "prompt": "hi", "temperature": NaN}')),
        Case("deeply nested array", raw(deep)),
        Case("deeply nested prompt", raw('{"model": "lio-test", "prompt": ' + deep + "}"), param=(None, "prompt*")),
        # -- bytes that are not UTF-8, or escapes that are not Unicode
        Case("bad utf-8 in prompt", raw(b'{"model": "lio-test", "prompt": "abc \xff\xfe def", "max_tokens": 2}')),
        Case("overlong utf-8", raw(b'{"model": "lio-test", "prompt": "\xc0\xaf", "max_tokens": 2}')),
        Case("bad utf-8 in chat", raw(b'{"model": "lio-test", "messages": [{"role": "user", "content": "\xed\xa0\x80"}]}'),
             CHAT),
        Case("lone surrogate escape", raw('{"model": "lio-test", "prompt": "\\ud800", "max_tokens": 2}')),
        # -- wrong types
        Case("max_tokens string", comp(max_tokens="ten"), param="max_tokens"),
        Case("max_tokens bool", comp(max_tokens=True), param="max_tokens"),
        Case("max_tokens fraction", comp(max_tokens=10.5), param="max_tokens"),
        Case("max_tokens 2^63", raw('{"model": "lio-test", "prompt": "hi", "max_tokens": 9223372036854775808}'),
             param="max_tokens"),
        Case("temperature string", comp(temperature="hot"), param="temperature"),
        Case("messages string", chat(messages="hello"), CHAT, param="messages"),
        Case("messages item not object", chat(messages=["hi"]), CHAT, param="messages*"),
        Case("prompt number", comp(prompt=42), param="prompt"),
        Case("prompt object", comp(prompt={"text": "hi"}), param="prompt"),
        Case("prompt mixed list", comp(prompt=["hi", 5]), param="prompt*"),
        Case("stop number", comp(stop=5), param="stop"),
        Case("stop list with number", comp(stop=["a", 5]), param="stop*"),
        Case("n string", comp(n="two"), param="n"),
        Case("n fraction", comp(n=2.5), param="n"),
        Case("seed string", comp(seed="abc"), param="seed"),
        Case("stream string", comp(stream="yes"), param="stream"),
        Case("top_k string", comp(top_k="x"), param="top_k"),
        Case("chat logprobs string", chat(logprobs="yes"), CHAT, param="logprobs"),
        Case("model number", comp(model=7), status=(400, 404), param=(None, "model")),
        Case("role number", chat(messages=[{"role": 5, "content": "hi"}]), CHAT, param="messages*"),
        Case("content number", chat(messages=[{"role": "user", "content": 5}]), CHAT, param="messages*"),
        # -- out of range
        Case("max_tokens -1", comp(max_tokens=-1), param="max_tokens"),
        Case("max_tokens 0", chat(max_tokens=0), CHAT, param="max_tokens"),
        Case("max_tokens 1e12", comp(max_tokens=10**12), param=(None, "max_tokens", "prompt")),
        Case("max_completion_tokens -5", chat(max_tokens=None, max_completion_tokens=-5), CHAT,
             param="max_completion_tokens"),
        Case("temperature -1", comp(temperature=-1), param="temperature"),
        Case("temperature 3", comp(temperature=3), param="temperature"),
        Case("temperature inf", raw('{"model": "lio-test", "prompt": "hi", "temperature": 1e400}'),
             param=(None, "temperature")),  # a JSON parser may refuse the overflow itself
        Case("top_p 0", comp(top_p=0), param="top_p"),
        Case("top_p 1.5", comp(top_p=1.5), param="top_p"),
        Case("top_k -5", comp(top_k=-5), param="top_k"),
        Case("min_p 2", comp(min_p=2), param="min_p"),
        Case("n 0", comp(n=0), param="n"),
        Case("n 1000", comp(n=1000), param="n"),
        Case("completions logprobs 99", comp(logprobs=99), param="logprobs"),
        Case("completions logprobs -1", comp(logprobs=-1), param="logprobs"),
        Case("chat top_logprobs 50", chat(logprobs=True, top_logprobs=50), CHAT, param="top_logprobs"),
        Case("chat top_logprobs -1", chat(logprobs=True, top_logprobs=-1), CHAT, param="top_logprobs"),
        Case("presence_penalty 5", comp(presence_penalty=5), param="presence_penalty"),
        Case("frequency_penalty -3", chat(frequency_penalty=-3), CHAT, param="frequency_penalty"),
        Case("repetition_penalty 0", comp(repetition_penalty=0), param="repetition_penalty"),
        Case("token id past vocab", comp(prompt=[1, 2, 999999]), param="prompt*"),
        Case("token id negative", comp(prompt=[-1, 5]), param="prompt*"),
        Case("empty token list", comp(prompt=[]), param="prompt"),
        # -- missing or empty
        Case("missing messages", chat(messages=None), CHAT, param="messages"),
        Case("missing prompt", comp(prompt=None), param="prompt"),
        Case("empty messages", chat(messages=[]), CHAT, param="messages"),
        Case("unknown role", chat(messages=[{"role": "wizard", "content": "hi"}]), CHAT, param="messages*"),
        Case("user message without content", chat(messages=[{"role": "user"}]), CHAT, param="messages*"),
        Case("user content null", chat(messages=[{"role": "user", "content": None}]), CHAT, param="messages*"),
        Case("bad content part type", chat(messages=[{"role": "user", "content": [{"type": "image_url",
                                                                                    "image_url": {"url": "x"}}]}]),
             CHAT, param="messages*"),
        # -- structured outputs: schemas and grammars that do not compile
        Case("json_schema of an unknown type", chat(response_format={"type": "json_schema", "json_schema": {
            "name": "x", "schema": {"type": "no-such-type"}}}), CHAT, param="response_format"),
        Case("json_schema too deep", chat(response_format={"type": "json_schema", "json_schema": {
            "name": "x", "schema": deep_schema}}), CHAT, param="response_format"),
        Case("json_schema too large", chat(response_format={"type": "json_schema", "json_schema": {
            "name": "x", "schema": {"type": "object", "description": "x" * 70000}}}), CHAT,
             param="response_format"),
        Case("grammar that does not parse", comp(grammar="root ::= ("), param="grammar"),
        Case("grammar without root", comp(grammar='start ::= "a"'), param="grammar"),
        Case("grammar with ignore_eos", comp(grammar='root ::= "a"', ignore_eos=True), param="ignore_eos"),
        Case("json_object with ignore_eos", chat(response_format={"type": "json_object"}, ignore_eos=True),
             CHAT, param="ignore_eos"),
        Case("response_format of type xml", chat(response_format={"type": "xml"}), CHAT,
             param="response_format.type"),
        # -- the model and the context
        Case("unknown model", comp(model="gpt-17"), status=404, param=(None, "model")),
        Case("unknown model chat", chat(model="gpt-17"), CHAT, status=404, param=(None, "model")),
        Case("prompt past context", comp(prompt=overlong), param=(None, "prompt", "max_tokens")),
        Case("chat past context", chat(messages=[{"role": "user", "content": overlong}]), CHAT,
             param=(None, "messages", "max_tokens")),
        Case("prompt + max_tokens past context", comp(prompt=long_fits, max_tokens=1000),
             param=(None, "prompt", "max_tokens")),
        Case("stream with bad param", comp(stream=True, temperature=-2), param="temperature"),
        # -- paths, methods, headers
        Case("GET on POST path", None, method="GET", status=(404, 405)),
        Case("GET on chat path", None, CHAT, method="GET", status=(404, 405)),
        Case("DELETE models", None, "/v1/models", method="DELETE", status=(404, 405)),
        Case("unknown path", comp(), "/v1/nope", status=404),
        Case("embeddings", {"model": M, "input": "hi"}, "/v1/embeddings", status=(404, 400, 501)),
        Case("text/plain content type", comp(), headers={"Content-Type": "text/plain"}, status=(200, 400, 415)),
        Case("missing api key", comp(), headers={"Authorization": None}, status=401),
        Case("wrong api key", comp(), headers=auth_bad, status=401),
        Case("api key prefix", comp(), headers={"Authorization": "Bearer " + key[:-1]}, status=401),
        Case("api key longer", comp(), headers={"Authorization": "Bearer " + key + "x"}, status=401),
        Case("basic auth", comp(), headers={"Authorization": "Basic " + key}, status=401),
        Case("models without key", None, "/v1/models", method="GET", headers={"Authorization": None}, status=401),
        Case("chat wrong api key", chat(), CHAT, headers=auth_bad, status=401),
        # -- odd but valid: accepted (OpenAI ignores unknown fields, allows nulls)
        Case("unknown field ignored", comp(frobnicate=1), status=200),
        Case("temperature null", comp() | {"temperature": None}, status=200),
        Case("missing model", comp(model=None), status=(200, 400), param=(None, "model")),
        Case("stream_options without stream", comp(stream_options={"include_usage": True}), status=(200, 400)),
        Case("empty prompt", comp(prompt=""), status=(200, 400), param=(None, "prompt*")),
        Case("text content parts", chat(messages=[{"role": "user", "content": [{"type": "text", "text": "hi"}]}]),
             CHAT, status=(200, 400)),
    ]


def send(server, c):
    headers = server.auth_headers()
    if c.body is not None and not isinstance(c.body, bytes):
        body = json.dumps(c.body).encode()
    else:
        body = c.body
    hdrs = {"Content-Type": "application/json"} if body is not None else {}
    hdrs.update(headers)
    for k, v in (c.headers or {}).items():
        if v is None:
            hdrs.pop(k, None)
        else:
            hdrs[k] = v
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=120)
    try:
        conn.putrequest(c.method, c.path)
        for k, v in hdrs.items():
            conn.putheader(k, v)
        if body is not None:
            conn.putheader("Content-Length", str(len(body)))
        conn.endheaders(body)
        resp = conn.getresponse()
        return resp.status, resp.getheader("Content-Type", ""), resp.read()
    finally:
        conn.close()


class Malformed(h.ServerTestCase):
    @classmethod
    def setUpClass(cls):
        status, cls.baseline, _ = h.post_json(cls.server, COMPLETIONS,
                                              comp(prompt="Once upon a time", max_tokens=16, temperature=0,
                                                   ignore_eos=True))
        assert status == 200, f"baseline request failed: {status} {cls.baseline}"

    def test_each_case_gets_its_4xx_then_a_normal_request_works(self):
        all_cases = cases(self.server.api_key)
        self.assertGreaterEqual(len([c for c in all_cases if 200 not in c.status]), 30)
        for c in all_cases:
            with self.subTest(c.name):
                t0 = time.monotonic()
                try:
                    status, ctype, data = send(self.server, c)
                except (OSError, ConnectionError) as e:
                    self.fail(f"{c.name}: no HTTP answer ({e!r})")
                    continue
                print(f"  {c.name:36s} -> {status} ({(time.monotonic() - t0) * 1000:.0f} ms) {data[:140]!r}")
                self.assertTrue(self.server.alive(), f"{c.name}: the server died\n{self.server.log_tail()}")
                self.assertIn(status, c.status, f"{c.name}: {data[:300]!r}")
                try:
                    j = json.loads(data)
                except ValueError:
                    self.fail(f"{c.name}: body is not JSON: {data[:200]!r}")
                self.assertTrue(ctype.startswith("application/json"), f"{c.name}: Content-Type {ctype!r}")
                if status == 200:
                    self.assertIsInstance(j.get("choices"), list, f"{c.name}: 200 without choices")
                    continue
                self.check_error_body(c, j)
        # Everything above left the server as it was: same greedy answer, nothing running.
        status, again, _ = h.post_json(self.server, COMPLETIONS,
                                       comp(prompt="Once upon a time", max_tokens=16, temperature=0, ignore_eos=True))
        self.assertEqual(status, 200, again)
        self.assertEqual(again["choices"][0]["text"], self.baseline["choices"][0]["text"])
        self.assertEqual(again["usage"]["completion_tokens"], 16)
        idle, _, last = h.wait_idle(self.server, within_s=1.0)
        self.assertTrue(idle, f"requests or KV blocks left behind: {last}")

    def check_error_body(self, c, j):
        err = j.get("error")
        self.assertIsInstance(err, dict, f"{c.name}: no error object: {j}")
        for key in ("message", "type", "param", "code"):
            self.assertIn(key, err, f"{c.name}: error lacks {key}: {err}")
        self.assertIsInstance(err["message"], str)
        self.assertTrue(err["message"], f"{c.name}: empty error message")
        self.assertIsInstance(err["type"], str)
        self.assertTrue(err["type"])
        want = c.param
        if want is None:
            return
        accepted = want if isinstance(want, tuple) else (want,)
        got = err["param"]
        ok = any((a is None and got is None) or
                 (isinstance(a, str) and a.endswith("*") and isinstance(got, str) and got.startswith(a[:-1])) or
                 got == a for a in accepted)
        self.assertTrue(ok, f"{c.name}: error.param {got!r}, expected {accepted}")


class FullQueue(h.ServerTestCase):
    """--max-num-seqs 2 --max-queue 2: two running, two waiting, the fifth gets 503; dropping
    them all (running and waiting) leaves the server idle."""

    def open_stream(self, srv, body):
        s = socket.create_connection(("127.0.0.1", srv.port), timeout=60 * h.Config.slow_factor)
        s.sendall(h.raw_stream_request_bytes(srv, COMPLETIONS, body))
        return s

    def wait_first_event(self, s):
        buf = b""
        while b"data:" not in buf:
            chunk = s.recv(65536)
            if not chunk:
                self.fail(f"stream closed before its first event: {buf[:300]!r}")
            buf += chunk
        self.assertIn(b" 200 ", buf.split(b"\r\n", 1)[0])

    def test_fifth_request_gets_503(self):
        srv = self.queue_server
        long_body = {"model": M, "prompt": "Count to a thousand:", "max_tokens": 4000, "ignore_eos": True}
        socks = []
        try:
            for _ in range(2):
                socks.append(self.open_stream(srv, long_body))
                self.wait_first_event(socks[-1])
            for _ in range(2):
                socks.append(self.open_stream(srv, long_body))
            deadline = time.monotonic() + 5 * h.Config.slow_factor
            while h.metric_sum(h.metrics(srv), "lio:num_requests_waiting") != 2:
                self.assertLess(time.monotonic(), deadline, "two requests never showed as waiting")
                time.sleep(0.02)
            self.assertEqual(h.metric_sum(h.metrics(srv), "lio:num_requests_running"), 2)
            status, j, data = h.post_json(srv, COMPLETIONS, {"model": M, "prompt": "hi", "max_tokens": 2})
            self.assertEqual(status, 503, data[:300])
            self.assertIsInstance(j, dict)
            self.assertIn("message", j.get("error", {}))
        finally:
            for s in socks:
                s.close()
        idle, took, last = h.wait_idle(srv, within_s=3.0)
        self.assertTrue(idle, f"not idle {took:.2f} s after dropping every stream: {last}")
        status, j, _ = h.post_json(srv, COMPLETIONS, {"model": M, "prompt": "hi", "max_tokens": 3, "ignore_eos": True})
        self.assertEqual(status, 200)
        self.assertEqual(j["usage"]["completion_tokens"], 3)


if __name__ == "__main__":
    sys.exit(h.main({"server": h.Server(["--prefix-cache", "none"], api_key=h.API_KEY, name="bad_requests"),
                     "queue_server": h.Server(["--prefix-cache", "none", "--max-num-seqs", "2", "--max-queue", "2"],
                                              name="full_queue")}))
