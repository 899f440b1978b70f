"""Running one probe for real: exec, HTTP GET or TCP connect, bounded by its timeout.

This is the I/O half of probing; :mod:`agent.probes` decides when to call it and what the
outcome means. Each call returns a :class:`~agent.probes.ProbeResult` and never raises for a
failed probe: a refused connection, a missing binary or a 500 are all just failures, and
overrunning ``timeoutSeconds`` is a timeout (which the state machine counts as a failure).

The process runtime runs exec probes as host subprocesses with the container's environment
and working directory (:class:`ProbeContext`); other runtimes pass their own ``exec_prefix``
(for example ``runc exec <id>``). An exec probe runs in its own process group, and the whole
group is killed on timeout so a probe cannot leave stragglers behind.

HTTP and TCP probes connect from the pod's network namespace (``ProbeContext.sockets``, an
:class:`agent.netns.NamespaceSockets`; host mode when the pods share the host's network,
ADR 0039). The HTTP GET is written here over asyncio streams on that socket: one request,
``Connection: close``, and only the status line is read.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field

from agent.netns import NamespaceSockets
from agent.probes import (
    Action,
    ExecAction,
    HttpGetAction,
    Outcome,
    ProbeResult,
    TcpAction,
)

OUTPUT_LIMIT = 10 * 1024  # bytes of probe output kept for the message, as Kubernetes does
USER_AGENT = "quaymaster-probe/1.0"


@dataclass(frozen=True)
class ProbeContext:
    """Where a container's probes run: its address, environment and working directory."""

    host: str = "127.0.0.1"
    env: Mapping[str, str] | None = None
    cwd: str | None = None
    exec_prefix: tuple[str, ...] = ()
    sockets: NamespaceSockets = field(default_factory=lambda: NamespaceSockets(None))


def _result(ok: bool, message: str) -> ProbeResult:
    return ProbeResult(Outcome.SUCCESS if ok else Outcome.FAILURE, message)


def _timeout(timeout: float) -> ProbeResult:
    return ProbeResult(Outcome.TIMEOUT, f"timed out after {timeout:g}s")


async def run_probe(action: Action, timeout: float, ctx: ProbeContext) -> ProbeResult:
    """Run ``action`` once; the result arrives within about ``timeout`` seconds."""
    if isinstance(action, ExecAction):
        return await run_exec(action, timeout, ctx)
    if isinstance(action, HttpGetAction):
        return await run_http_get(action, timeout, ctx)
    return await run_tcp(action, timeout, ctx)


def _kill_group(proc: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


async def run_exec(action: ExecAction, timeout: float, ctx: ProbeContext) -> ProbeResult:
    """Success when the command exits 0; its (truncated) output becomes the message."""
    argv = [*ctx.exec_prefix, *action.command]
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env=dict(ctx.env) if ctx.env is not None else None,
            cwd=ctx.cwd,
            start_new_session=True,  # its own process group, killed whole on timeout
        )
    except OSError as exc:
        return _result(False, f"cannot run {argv[0]!r}: {exc.strerror or exc}")
    try:
        async with asyncio.timeout(timeout):
            out, _ = await proc.communicate()
    except TimeoutError:
        _kill_group(proc)
        await proc.wait()
        return _timeout(timeout)
    except asyncio.CancelledError:
        _kill_group(proc)
        await proc.wait()
        raise
    _kill_group(proc)  # anything the probe left running in its group
    text = out[:OUTPUT_LIMIT].decode(errors="replace").strip()
    if proc.returncode == 0:
        return _result(True, text)
    return _result(False, f"exit code {proc.returncode}: {text}".rstrip(": "))


def _url(action: HttpGetAction, ctx: ProbeContext) -> str:
    host = action.host or ctx.host
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"  # an IPv6 literal
    return f"{action.scheme.lower()}://{host}:{action.port}{action.path}"


class _BadResponse(Exception):
    """The server's answer does not start with an HTTP status line."""


class _ConnectFailed(Exception):
    """No connection to the probed address (refused, unreachable, not resolved)."""


def _request(action: HttpGetAction, host: str) -> bytes:
    """The GET request: default headers, the probe's own over them (by name, any case)."""
    authority = f"[{host}]" if ":" in host else host
    headers = {
        "host": ("Host", f"{authority}:{action.port}"),
        "user-agent": ("User-Agent", USER_AGENT),
        "accept": ("Accept", "*/*"),
    }
    for name, value in action.headers:
        headers[name.lower()] = (name, value)
    headers["connection"] = ("Connection", "close")
    path = action.path if action.path.startswith("/") else "/" + action.path
    lines = [f"GET {path} HTTP/1.1"]
    lines += [f"{n}: {v}" for n, v in headers.values() if "\r" not in v + n and "\n" not in v + n]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1", errors="replace")


async def _address(host: str, port: int) -> str:
    """An IP literal for ``host`` (names are resolved by the agent's own resolver)."""
    try:
        socket.inet_pton(socket.AF_INET6 if ":" in host else socket.AF_INET, host)
        return host
    except OSError:
        infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
        return str(infos[0][4][0])


def _insecure_tls() -> ssl.SSLContext:
    """Certificates are not verified: a probe checks the server is up, not who it is."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


async def _http_status(action: HttpGetAction, host: str, ctx: ProbeContext) -> int:
    try:
        sock = await ctx.sockets.connect(await _address(host, action.port), action.port)
    except OSError as exc:
        raise _ConnectFailed(exc.strerror or str(exc)) from exc
    tls = _insecure_tls() if action.scheme.lower() == "https" else None
    try:
        if tls is None:
            reader, writer = await asyncio.open_connection(sock=sock)
        else:
            reader, writer = await asyncio.open_connection(sock=sock, ssl=tls, server_hostname=host)
    except BaseException:
        sock.close()
        raise
    try:
        writer.write(_request(action, host))
        await writer.drain()
        line = await reader.readline()
    finally:
        writer.close()
        with contextlib.suppress(OSError, ssl.SSLError):
            await writer.wait_closed()
    parts = line.split(None, 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/") or not parts[1].isdigit():
        raise _BadResponse(f"malformed status line {line[:80]!r}")
    return int(parts[1])


async def run_http_get(action: HttpGetAction, timeout: float, ctx: ProbeContext) -> ProbeResult:
    """Success on a status from 200 to 399; redirects are not followed (a 3xx is success).

    Certificates are not verified and no proxy is used: the pod is on this machine, and the
    connection starts in the pod's network namespace."""
    url = _url(action, ctx)
    try:
        async with asyncio.timeout(timeout):
            code = await _http_status(action, action.host or ctx.host, ctx)
    except TimeoutError:
        return _timeout(timeout)
    except _ConnectFailed as exc:
        return _result(False, f"GET {url}: ConnectError: {exc}")
    except (OSError, ssl.SSLError, _BadResponse) as exc:
        return _result(False, f"GET {url}: {type(exc).__name__}: {exc}")
    return _result(200 <= code < 400, f"HTTP probe returned {code}")


async def run_tcp(action: TcpAction, timeout: float, ctx: ProbeContext) -> ProbeResult:
    """Success when a TCP connection opens within the timeout; it is closed at once."""
    host = action.host or ctx.host
    try:
        async with asyncio.timeout(timeout):
            sock = await ctx.sockets.connect(await _address(host, action.port), action.port)
    except TimeoutError:
        return _timeout(timeout)
    except OSError as exc:
        return _result(False, f"dial {host}:{action.port}: {exc.strerror or exc}")
    sock.close()
    return _result(True, "")
