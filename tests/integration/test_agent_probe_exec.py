"""Real probes against real things: subprocesses, a local HTTP server and TCP sockets.

Every server and socket is started by the test and stopped at its end; an exec probe that
overruns its timeout must leave no process behind.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from agent.probe_exec import ProbeContext, run_probe
from agent.probes import ExecAction, HttpGetAction, Outcome, TcpAction, parse_probe

CTX = ProbeContext(host="127.0.0.1")


# ---------------------------------------------------------------- exec


async def test_exec_success_and_failure_by_exit_code() -> None:
    ok = await run_probe(ExecAction(("sh", "-c", "echo fine")), 2, CTX)
    assert ok.outcome is Outcome.SUCCESS and ok.message == "fine"
    bad = await run_probe(ExecAction(("sh", "-c", "echo broken >&2; exit 3")), 2, CTX)
    assert bad.outcome is Outcome.FAILURE
    assert bad.message == "exit code 3: broken"


async def test_exec_runs_with_the_containers_env_and_cwd(tmp_path: Path) -> None:
    ctx = ProbeContext(env={"PATH": os.environ["PATH"], "READY_FILE": "up"}, cwd=str(tmp_path))
    probe = ExecAction(("sh", "-c", 'test -f "$READY_FILE"'))
    assert (await run_probe(probe, 2, ctx)).outcome is Outcome.FAILURE
    (tmp_path / "up").write_text("")
    assert (await run_probe(probe, 2, ctx)).outcome is Outcome.SUCCESS


async def test_exec_of_a_missing_binary_is_a_failure() -> None:
    result = await run_probe(ExecAction(("/nonexistent/probe",)), 2, CTX)
    assert result.outcome is Outcome.FAILURE
    assert "cannot run '/nonexistent/probe'" in result.message


def _alive(pid: int) -> bool:
    """Running, as opposed to gone or a zombie waiting for a reaper that is not ours."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


async def test_exec_timeout_kills_the_probe_and_its_children(tmp_path: Path) -> None:
    pidfile = tmp_path / "child"
    script = f"sleep 30 & echo $! > {pidfile}; wait"
    began = time.monotonic()
    result = await run_probe(ExecAction(("sh", "-c", script)), 1, CTX)
    elapsed = time.monotonic() - began
    assert result.outcome is Outcome.TIMEOUT and result.message == "timed out after 1s"
    assert 0.9 <= elapsed < 3
    child = int(pidfile.read_text())
    deadline = time.monotonic() + 2
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not _alive(child), "the probe's background child survived its timeout"


# ---------------------------------------------------------------- HTTP GET


class Handler(BaseHTTPRequestHandler):
    release = threading.Event()

    def do_GET(self) -> None:
        if self.path == "/slow":
            self.release.wait(5)
        code = {"/ok": 200, "/moved": 302, "/fail": 500, "/slow": 200, "/missing": 404}.get(
            self.path.split("?")[0], 200
        )
        if self.path == "/header":
            code = 204 if self.headers.get("X-Probe") == "yes" else 400
        self.send_response(code)
        if code == 302:
            self.send_header("Location", "http://198.51.100.1/elsewhere")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def http_port() -> Iterator[int]:
    Handler.release = threading.Event()
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        Handler.release.set()
        server.shutdown()
        server.server_close()
        thread.join(5)


@pytest.mark.parametrize(
    ("path", "outcome"),
    [
        ("/ok", Outcome.SUCCESS),
        ("/moved", Outcome.SUCCESS),  # 3xx is success and the redirect is not followed
        ("/missing", Outcome.FAILURE),
        ("/fail", Outcome.FAILURE),
        ("/header", Outcome.FAILURE),
    ],
)
async def test_http_get_success_on_200_to_399(http_port: int, path: str, outcome: Outcome) -> None:
    result = await run_probe(HttpGetAction(http_port, path), 2, CTX)
    assert result.outcome is outcome, result.message


async def test_http_get_sends_headers_and_resolves_named_ports(http_port: int) -> None:
    raw = {
        "httpGet": {
            "path": "/header",
            "port": "web",
            "httpHeaders": [{"name": "X-Probe", "value": "yes"}],
        }
    }
    spec = parse_probe("readiness", raw, {"web": http_port})
    result = await run_probe(spec.action, spec.timeout, CTX)
    assert result.outcome is Outcome.SUCCESS and result.message == "HTTP probe returned 204"


async def test_http_get_timeout(http_port: int) -> None:
    began = time.monotonic()
    result = await run_probe(HttpGetAction(http_port, "/slow"), 1, CTX)
    assert result.outcome is Outcome.TIMEOUT
    assert time.monotonic() - began < 2.5


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_http_get_refused_is_a_failure() -> None:
    result = await run_probe(HttpGetAction(_closed_port(), "/"), 1, CTX)
    assert result.outcome is Outcome.FAILURE and "ConnectError" in result.message


# ---------------------------------------------------------------- TCP


async def test_tcp_connects_to_a_listening_socket_and_is_refused_by_a_closed_one() -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        assert (await run_probe(TcpAction(port), 1, CTX)).outcome is Outcome.SUCCESS
    refused = await run_probe(TcpAction(port), 1, CTX)
    assert refused.outcome is Outcome.FAILURE and "dial 127.0.0.1" in refused.message


async def test_tcp_timeout_on_a_full_accept_queue() -> None:
    """A listener that never accepts, with its queue full, drops new connection attempts."""
    server = socket.socket()
    fillers: list[socket.socket] = []
    try:
        server.bind(("127.0.0.1", 0))
        server.listen(0)
        port = server.getsockname()[1]
        for _ in range(4):
            filler = socket.socket()
            filler.setblocking(False)
            fillers.append(filler)
            with contextlib.suppress(BlockingIOError):
                filler.connect(("127.0.0.1", port))
        time.sleep(0.1)
        began = time.monotonic()
        result = await run_probe(TcpAction(port), 1, CTX)
        if result.outcome is Outcome.SUCCESS:
            pytest.skip("this kernel completes connections beyond a full accept queue")
        assert result.outcome is Outcome.TIMEOUT
        assert 0.9 <= time.monotonic() - began < 2.5
    finally:
        for filler in fillers:
            filler.close()
        server.close()
