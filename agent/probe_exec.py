"""Running one probe for real: exec, HTTP GET or TCP connect, bounded by its timeout.

This is the I/O half of probing; :mod:`agent.probes` decides when to call it and what the
outcome means. Each call returns a :class:`~agent.probes.ProbeResult` and never raises for a
failed probe: a refused connection, a missing binary or a 500 are all just failures, and
overrunning ``timeoutSeconds`` is a timeout (which the state machine counts as a failure).

The process runtime runs exec probes as host subprocesses with the container's environment
and working directory (:class:`ProbeContext`); other runtimes pass their own ``exec_prefix``
(for example ``runc exec <id>``). An exec probe runs in its own process group, and the whole
group is killed on timeout so a probe cannot leave stragglers behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Mapping
from dataclasses import dataclass

import httpx

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


async def run_http_get(action: HttpGetAction, timeout: float, ctx: ProbeContext) -> ProbeResult:
    """Success on a status from 200 to 399; redirects are not followed (a 3xx is success).

    Certificates are not verified (a probe checks the server is up, not who it is) and proxy
    settings from the agent's environment are ignored: the pod is on this machine."""
    headers = {"User-Agent": USER_AGENT, "Accept": "*/*", **dict(action.headers)}
    url = _url(action, ctx)
    try:
        async with (
            asyncio.timeout(timeout),
            httpx.AsyncClient(
                timeout=timeout, verify=False, trust_env=False, follow_redirects=False
            ) as client,
        ):
            response = await client.get(url, headers=headers)
    except (TimeoutError, httpx.TimeoutException):
        return _timeout(timeout)
    except httpx.HTTPError as exc:
        return _result(False, f"GET {url}: {type(exc).__name__}: {exc}")
    ok = 200 <= response.status_code < 400
    return _result(ok, f"HTTP probe returned {response.status_code}")


async def run_tcp(action: TcpAction, timeout: float, ctx: ProbeContext) -> ProbeResult:
    """Success when a TCP connection opens within the timeout; it is closed at once."""
    host = action.host or ctx.host
    try:
        async with asyncio.timeout(timeout):
            _, writer = await asyncio.open_connection(host, action.port)
    except TimeoutError:
        return _timeout(timeout)
    except OSError as exc:
        return _result(False, f"dial {host}:{action.port}: {exc.strerror or exc}")
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return _result(True, "")
