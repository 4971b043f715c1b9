"""Fixtures for the `tensorpar serve` tests: start the server binary on a free loopback port, wait
for /health, share it across the session, and show its log when a test fails.

Environment (tests/serve/run_python_tests.sh sets the first two):
  TENSORPAR_BIN            the tensorpar binary (default <repo>/build/bin/tensorpar)
  TP_MODEL                 the GGUF model (default: tools/fetch_model.sh --quiet)
  TP_SERVE_START_TIMEOUT   seconds to wait for /health 200 after start (default 120)
  TP_REQUEST_TIMEOUT       seconds for one HTTP request (default 300)
  TP_SERVE_CTX             --ctx of the servers the tests start (default 1024)
  TP_SERVE_ARGS            extra arguments for every server (split on whitespace)
"""
import http.client
import json
import os
import signal
import socket
import subprocess
import tempfile
import time
import urllib.parse

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
START_TIMEOUT = float(os.environ.get("TP_SERVE_START_TIMEOUT", "120"))
REQUEST_TIMEOUT = float(os.environ.get("TP_REQUEST_TIMEOUT", "300"))
CTX = int(os.environ.get("TP_SERVE_CTX", "1024"))
EXTRA_ARGS = os.environ.get("TP_SERVE_ARGS", "").split()

_live_servers = []  # every Server not yet stopped: their logs go into failure reports


def _binary():
    b = os.environ.get("TENSORPAR_BIN") or os.path.join(REPO, "build", "bin", "tensorpar")
    if not os.access(b, os.X_OK):
        pytest.fail(f"tensorpar binary not found or not executable: {b} (set TENSORPAR_BIN)")
    return b


def _model():
    m = os.environ.get("TP_MODEL")
    if not m:
        m = subprocess.run(["bash", os.path.join(REPO, "tools", "fetch_model.sh"), "--quiet"],
                           check=True, capture_output=True, text=True).stdout.strip()
        os.environ["TP_MODEL"] = m
    if not os.path.isfile(m):
        pytest.fail(f"model not found: {m}")
    return m


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_request(base, method, path, body=None, headers=None, timeout=None):
    """One raw HTTP request: (status, headers with lower-case names, body bytes). `body` is bytes
    (sent as is) or an object (sent as JSON)."""
    u = urllib.parse.urlsplit(base)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout or REQUEST_TIMEOUT)
    try:
        data = body if body is None or isinstance(body, bytes) else json.dumps(body).encode()
        hdrs = {"Content-Type": "application/json"} if data is not None else {}
        hdrs.update(headers or {})
        conn.request(method, path, body=data, headers=hdrs)
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        conn.close()


class Server:
    """One `tensorpar serve` process on 127.0.0.1:<free port>; its stdout+stderr go to a log file."""

    def __init__(self, tp=2, args=(), name=None):
        self.tp = tp
        self.args = list(args)
        self.name = name or f"tp{tp}" + ("" if not args else " " + " ".join(self.args))
        self.proc = None
        for attempt in range(3):  # the free port may be taken between probe and bind: try another
            self.port = free_port()
            self.url = f"http://127.0.0.1:{self.port}"
            fd, self.log_path = tempfile.mkstemp(prefix=f"tp-serve-tp{tp}-", suffix=".log")
            os.close(fd)
            self.cmd = [_binary(), "serve", "--model", _model(), "--tp", str(tp), "--host", "127.0.0.1",
                        "--port", str(self.port), "--ctx", str(CTX), *EXTRA_ARGS, *self.args]
            with open(self.log_path, "wb") as log:
                self.proc = subprocess.Popen(self.cmd, stdout=log, stderr=subprocess.STDOUT,
                                             stdin=subprocess.DEVNULL)
            _live_servers.append(self)
            if self._wait_ready():
                return
            tail = self.log_tail()
            if not any(w in tail.lower() for w in ("in use", "bind")) or attempt == 2:
                break
            _live_servers.remove(self)
        self.kill()
        pytest.fail(f"server `{' '.join(self.cmd)}` did not become ready: {self._why}\n"
                    f"--- its log ---\n{self.log_tail()}")

    def _wait_ready(self):
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self._why = f"exited with {self.proc.returncode}"
                return False
            try:
                status, _, _ = http_request(self.url, "GET", "/health", timeout=5)
                if status == 200:
                    return True
            except OSError:
                pass
            time.sleep(0.25)
        self._why = f"/health not 200 within {START_TIMEOUT:.0f} s (TP_SERVE_START_TIMEOUT)"
        return False

    def log_tail(self, chars=6000):
        try:
            with open(self.log_path, "rb") as f:
                data = f.read()
        except OSError:
            return "(no log)"
        return data[-chars:].decode("utf-8", "replace")

    def request(self, method, path, body=None, headers=None, timeout=None):
        return http_request(self.url, method, path, body, headers, timeout)

    def client(self, api_key="unused", **kw):
        import openai
        return openai.OpenAI(base_url=self.url + "/v1", api_key=api_key, max_retries=0,
                             timeout=kw.pop("timeout", REQUEST_TIMEOUT), **kw)

    def model_name(self, headers=None):
        status, _, body = self.request("GET", "/v1/models", headers=headers)
        assert status == 200, f"GET /v1/models: {status} {body[:500]!r}"
        return json.loads(body)["data"][0]["id"]

    def metrics(self):
        """GET /metrics parsed: {'name{labels}': value} plus {'name': sum over label sets}."""
        status, _, body = self.request("GET", "/metrics")
        assert status == 200, f"GET /metrics: {status}"
        return parse_prometheus(body.decode())

    def stop(self, sig=signal.SIGTERM, timeout=60):
        """Sends `sig` and waits; kills it after `timeout` s. Returns the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        if self in _live_servers:
            _live_servers.remove(self)
        return self.proc.returncode

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if self in _live_servers:
            _live_servers.remove(self)


def parse_prometheus(text):
    out = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        try:
            key, value = line.rsplit(None, 1)
            v = float(value)
        except ValueError:
            continue
        out[key] = v
        name = key.split("{", 1)[0]
        if "{" in key:
            out[name] = out.get(name, 0.0) + v
    return out


class ServerPool:
    """Servers shared by the whole session, one per (tp, args)."""

    def __init__(self):
        self.servers = {}

    def get(self, tp=2, args=()):
        key = (tp, tuple(args))
        s = self.servers.get(key)
        if s is None or s.proc.poll() is not None:
            s = self.servers[key] = Server(tp, args)
        return s

    def close(self):
        for s in self.servers.values():
            s.stop(timeout=30)


@pytest.fixture(scope="session")
def pool():
    p = ServerPool()
    yield p
    p.close()


@pytest.fixture(scope="session")
def server(pool):
    """The main server: the default model at --tp 2."""
    return pool.get(tp=2)


@pytest.fixture(params=[2, 1], ids=["tp2", "tp1"])
def any_tp_server(pool, request):
    """The basic tests run at --tp 2 and --tp 1."""
    return pool.get(tp=request.param)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.failed:
        for s in list(_live_servers):
            rep.sections.append((f"server {s.name} (port {s.port}) log tail", s.log_tail(4000)))
