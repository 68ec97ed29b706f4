"""Shared harness for the lio-server tests (tests/server/test_*.py).

Each test file starts its own `lio-server` on a free loopback port, waits for GET /health,
runs its unittest cases against it, stops it, and fails if the server died, exited non-zero or
printed a sanitizer report. Everything here talks plain HTTP/1.1 (http.client, raw sockets) so
the bytes on the wire are exactly the ones a test means; the official `openai` client is used
only by test_openai_client.py.

Command line of every test file (CMake passes it; see tests/server/CMakeLists.txt):
    test_X.py --server BIN --model GGUF [--lio BIN] [--machine-speed FILE] [--slow-factor F]
              [--log-dir DIR] [--server-args "ARGS"] [unittest args, e.g. -k test_name -v]
Every wait a test states (server start-up, "back to idle within 1 s", a shutdown deadline) is
written for a Release build on an idle 2-core machine and multiplied by Config.slow_factor: the
factor measured for this build on this machine by tests/support/machine_speed.py (--machine-speed,
the record ctest's fixture `machine_speed` writes first), or --slow-factor F where that is larger
(by hand). A sanitized build or a busy machine thus waits as much longer as its engine steps take.
--server-args adds flags to every server a test starts (e.g. "--device cuda", or
"--prefix-cache radix" where the test does not set --prefix-cache itself).
"""
import argparse
import http.client
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
import machine_speed  # noqa: E402  (tests/support: the calibration record's reader)

SERVED_MODEL = "lio-test"  # --served-model-name of every test server
API_KEY = "sk-lio-test-0123456789"  # --api-key where a test starts the server with one


class Config:
    """What the command line gave; set once by main() before any test runs."""

    server_bin = ""
    model = ""
    lio_bin = ""
    slow_factor = 1.0  # every wait is multiplied by it (>= 1; see the module's docstring)
    log_dir = ""
    server_args = []  # added to every server's command line


# ---- the server process --------------------------------------------------------------------


def free_port():
    """A loopback TCP port nobody listens on right now (the server binds it next)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# Lines a sanitizer or the C++ runtime prints when something went wrong inside the server.
_CRASH_PATTERNS = re.compile(
    r"ERROR: AddressSanitizer|ERROR: LeakSanitizer|runtime error:|terminate called|Segmentation fault"
)


class Server:
    """One lio-server child process on 127.0.0.1:<free port>, stderr/stdout to a log file."""

    def __init__(self, extra_args, api_key=None, name="server"):
        self.extra_args = list(extra_args)
        self.api_key = api_key
        self.name = name
        self.proc = None
        self.port = 0
        self.log_path = ""
        self.exit_code = None

    def start(self):
        """Starts the server and waits for GET /health == 200. Raises RuntimeError with the log
        tail if it exits or does not become healthy in 60 s x slow_factor."""
        log_dir = Config.log_dir or tempfile.mkdtemp(prefix="lio-server-test-")
        os.makedirs(log_dir, exist_ok=True)
        for attempt in range(3):  # another process may grab the free port before the server binds it
            self.port = free_port()
            self.log_path = os.path.join(log_dir, f"{self.name}.{self.port}.log")
            args = [Config.server_bin, "--model", Config.model, "--host", "127.0.0.1", "--port",
                    str(self.port), "--served-model-name", SERVED_MODEL] + self.extra_args + Config.server_args
            if self.api_key:
                args += ["--api-key", self.api_key]
            with open(self.log_path, "wb") as log:
                log.write((" ".join(args) + "\n").encode())
                log.flush()
                self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT,
                                             stdin=subprocess.DEVNULL)
            deadline = time.monotonic() + 60 * Config.slow_factor
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    break
                try:
                    status, _, _ = request("GET", self.port, "/health", timeout=2 * Config.slow_factor)
                    if status == 200:
                        print(f"[{self.name}] up on port {self.port} (log {self.log_path})", flush=True)
                        return self
                except OSError:
                    pass
                time.sleep(0.1)
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
                raise RuntimeError(f"{self.name}: no healthy /health in time\n{self.log_tail()}")
            if "ddress already in use" not in self.log_tail() or attempt == 2:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode} at start-up\n"
                                   f"{self.log_tail()}")
        raise RuntimeError("unreachable")

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self):
        """SIGTERM, then SIGKILL after 20 s x slow_factor. Returns the problems found: the server
        had died before, exited non-zero after SIGTERM, or printed a crash/sanitizer report."""
        problems = []
        if self.proc is None:
            return problems
        if self.proc.poll() is not None:
            problems.append(f"{self.name} had already exited with {self.proc.returncode} before the end")
        else:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20 * Config.slow_factor)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                problems.append(f"{self.name} ignored SIGTERM for 20 s; killed")
            # Exit by SIGTERM itself (-15) is fine: a server need not catch it. Anything else
            # non-zero is a crash or a sanitizer's exit code.
            if self.proc.returncode not in (0, -signal.SIGTERM):
                problems.append(f"{self.name} exited with {self.proc.returncode} after SIGTERM")
        self.exit_code = self.proc.returncode
        tail = self.log_tail(200)
        if _CRASH_PATTERNS.search(tail):
            problems.append(f"{self.name} log reports a crash or sanitizer error")
        if problems:
            problems.append(tail)
        return problems

    def log_tail(self, n_lines=40):
        try:
            with open(self.log_path, "rb") as f:
                lines = f.read().decode("utf-8", "replace").splitlines()
            return "\n".join(lines[-n_lines:])
        except OSError:
            return "(no log)"

    def auth_headers(self):
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}


# ---- plain HTTP --------------------------------------------------------------------------------


def scaled(timeout, default_s):
    """`timeout` as given, or `default_s` x slow_factor when it is None (the default waits below)."""
    return default_s * Config.slow_factor if timeout is None else timeout


def request(method, port, path, body=None, headers=None, timeout=None):
    """One HTTP/1.1 request on a fresh connection. body: bytes, str, or a JSON-able object.
    timeout: the socket's, in seconds (default 60 x slow_factor).
    Returns (status, headers dict with lower-case names, body bytes)."""
    timeout = scaled(timeout, 60)
    if body is not None and not isinstance(body, (bytes, str)):
        body = json.dumps(body)
    if isinstance(body, str):
        body = body.encode()
    h = {"Content-Type": "application/json"} if body is not None else {}
    h.update(headers or {})
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request(method, path, body=body, headers=h)
        resp = conn.getresponse()
        data = resp.read()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, data
    finally:
        conn.close()


def post_json(server, path, body, timeout=None, headers=None):
    """POST with the server's API key (socket timeout: default 120 s x slow_factor); returns
    (status, parsed JSON or None, raw bytes)."""
    timeout = scaled(timeout, 120)
    h = server.auth_headers()
    h.update(headers or {})
    status, _, data = request("POST", server.port, path, body, h, timeout)
    try:
        return status, json.loads(data), data
    except ValueError:
        return status, None, data


def sse_events(resp):
    """Yields the payload of each `data:` line of a text/event-stream response (str), in order,
    as they arrive; `[DONE]` included. Works on an http.client.HTTPResponse."""
    buf = b""
    while True:
        chunk = resp.read1(65536)
        if not chunk:
            break
        buf += chunk.replace(b"\r\n", b"\n")
        while b"\n\n" in buf:
            event, buf = buf.split(b"\n\n", 1)
            for line in event.split(b"\n"):
                if line.startswith(b"data:"):
                    yield line[5:].strip().decode("utf-8")
    for line in buf.split(b"\n"):  # a last event without its blank line
        if line.startswith(b"data:"):
            yield line[5:].strip().decode("utf-8")


class StreamResult:
    """A streamed response, parsed: HTTP status, JSON chunks (in order), whether `[DONE]` came
    last, the error body if the status was not 200."""

    def __init__(self):
        self.status = 0
        self.content_type = ""
        self.chunks = []
        self.done = False
        self.after_done = 0  # events after [DONE]: must be 0
        self.error = None

    def text(self, index=0, chat=False):
        """Concatenated text of choice `index` over all chunks."""
        out = []
        for c in self.chunks:
            for ch in c.get("choices", []):
                if ch.get("index") == index:
                    piece = (ch.get("delta") or {}).get("content") if chat else ch.get("text")
                    out.append(piece or "")
        return "".join(out)

    def finish_reasons(self):
        """{choice index: finish_reason} over all chunks (the last non-null one wins)."""
        out = {}
        for c in self.chunks:
            for ch in c.get("choices", []):
                if ch.get("finish_reason") is not None:
                    out[ch.get("index")] = ch["finish_reason"]
        return out

    def usage(self):
        """The usage object of the last chunk that carries one (None if none does)."""
        for c in reversed(self.chunks):
            if c.get("usage"):
                return c["usage"]
        return None


def stream_post(server, path, body, timeout=None, on_event=None):
    """POSTs a streaming request (adds "stream": true) and reads it to the end; on_event(), if
    given, is called as each SSE event arrives. timeout: the socket's (default 300 s x slow_factor)."""
    timeout = scaled(timeout, 300)
    body = dict(body, stream=True)
    h = {"Content-Type": "application/json", "Accept": "text/event-stream"}
    h.update(server.auth_headers())
    r = StreamResult()
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=timeout)
    try:
        conn.request("POST", path, body=json.dumps(body).encode(), headers=h)
        resp = conn.getresponse()
        r.status = resp.status
        r.content_type = resp.getheader("Content-Type", "")
        if resp.status != 200:
            data = resp.read()
            try:
                r.error = json.loads(data)
            except ValueError:
                r.error = {"raw": data.decode("utf-8", "replace")}
            return r
        for payload in sse_events(resp):
            if on_event is not None:
                on_event()
            if r.done:
                r.after_done += 1
            elif payload == "[DONE]":
                r.done = True
            else:
                r.chunks.append(json.loads(payload))
        return r
    finally:
        conn.close()


def raw_stream_request_bytes(server, path, body):
    """The exact bytes of a streaming POST (for tests that drop the socket themselves)."""
    payload = json.dumps(dict(body, stream=True)).encode()
    head = [f"POST {path} HTTP/1.1", f"Host: 127.0.0.1:{server.port}", "Content-Type: application/json",
            "Accept: text/event-stream", f"Content-Length: {len(payload)}"]
    head += [f"{k}: {v}" for k, v in server.auth_headers().items()]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + payload


# ---- /metrics ------------------------------------------------------------------------------------

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)(\s+\d+)?$")


def parse_metrics(text):
    """Prometheus text exposition -> {metric name: [(labels str, float value), ...]}.
    Raises ValueError on a line that is neither a comment nor a sample."""
    out = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if not m:
            raise ValueError(f"not a Prometheus sample line: {line!r}")
        out.setdefault(m.group(1), []).append((m.group(2) or "", float(m.group(3))))
    return out


def metrics(server):
    """GET /metrics, parsed (see parse_metrics)."""
    status, _, data = request("GET", server.port, "/metrics", headers=server.auth_headers())
    if status != 200:
        raise AssertionError(f"/metrics answered {status}: {data[:200]!r}")
    return parse_metrics(data.decode("utf-8"))


def metric_sum(parsed, name):
    """Sum of every sample of `name` (over its label sets). Raises AssertionError if absent."""
    if name not in parsed:
        raise AssertionError(f"/metrics has no {name} (has: {sorted(parsed)[:60]})")
    return sum(v for _, v in parsed[name])


def wait_idle(server, within_s):
    """Polls /metrics until running == 0, waiting == 0 and KV usage == 0, for at most
    within_s x slow_factor seconds. Returns (idle?, seconds taken, last values)."""
    t0 = time.monotonic()
    deadline = t0 + within_s * Config.slow_factor
    while True:
        m = metrics(server)
        last = {k: metric_sum(m, k) for k in
                ("lio:num_requests_running", "lio:num_requests_waiting", "lio:kv_cache_usage_perc")}
        if all(v == 0 for v in last.values()):
            return True, time.monotonic() - t0, last
        if time.monotonic() > deadline:
            return False, time.monotonic() - t0, last
        time.sleep(0.02)


def run_lio(*args):
    """Runs `lio ARGS... --json` (Config.lio_bin) on the test model; returns the parsed JSON."""
    out = subprocess.run([Config.lio_bin, *args, "--json"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, timeout=300 * Config.slow_factor)
    if out.returncode != 0:
        raise AssertionError(f"lio {' '.join(args)} failed ({out.returncode}): {out.stderr}")
    return json.loads(out.stdout)


# ---- test base class and main ------------------------------------------------------------


class ServerTestCase(unittest.TestCase):
    """Base class: `cls.server` is the module's server (started by main before the tests).
    After each test, the server must still be running."""

    server = None

    def tearDown(self):
        if self.server is not None and not self.server.alive():
            self.fail(f"the server died during {self.id()}\n{self.server.log_tail()}")


def main(servers):
    """Parses the harness flags, starts every server in `servers` ({attribute name: Server}),
    binds them as class attributes of ServerTestCase (the first one also as `server`), runs the
    calling module's tests, stops the servers. Returns the process exit code (0 = pass)."""
    ap = argparse.ArgumentParser(add_help=False)
    ap.add_argument("--server", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--lio", default="")
    ap.add_argument("--machine-speed", default="", help="tests/support/machine_speed.py's record")
    ap.add_argument("--slow-factor", type=float, default=1.0)
    ap.add_argument("--log-dir", default="")
    ap.add_argument("--server-args", default="")
    a, rest = ap.parse_known_args()
    Config.server_bin, Config.model, Config.lio_bin = a.server, a.model, a.lio
    Config.slow_factor = max(a.slow_factor, machine_speed.slow_factor(a.machine_speed))
    Config.log_dir = a.log_dir
    print(f"slow factor {Config.slow_factor:g}: every wait below is its Release, idle-machine value "
          f"x {Config.slow_factor:g} ({a.machine_speed or 'no calibration record'})", flush=True)
    Config.server_args = shlex.split(a.server_args)
    if not os.path.isfile(a.model):
        print(f"SKIP: no model at {a.model} (run scripts/fetch_model.sh)")
        return 77
    if not os.access(a.server, os.X_OK):  # registered only with the target: a build failure
        print(f"FAIL: no server binary at {a.server} (build the lio-server target)")
        return 1
    started = []
    problems = []
    ok = False
    try:
        for attr, srv in servers.items():
            srv.start()
            started.append(srv)
            setattr(ServerTestCase, attr, srv)
            if ServerTestCase.server is None:
                ServerTestCase.server = srv
        prog = unittest.main(module="__main__", argv=[sys.argv[0]] + rest, exit=False, verbosity=2)
        ok = prog.result.wasSuccessful()
    finally:
        for srv in started:
            problems += srv.stop()
    for p in problems:
        print("FAIL:", p)
    return 0 if ok and not problems else 1
