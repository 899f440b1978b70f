"""Small process-supervision helpers shared by the dev stack and the test fixtures.

The dev stack (``make up``) and the pytest fixtures both start servers as child
processes on loopback ports and must stop exactly those processes again, by pid,
however the run ends. This module keeps that logic in one place: picking a free
port, telling whether a pid is really still running (a zombie is not), stopping a
pid politely and then forcefully, waiting for an HTTP health endpoint, and
arranging for a child to die with its parent when the parent is killed.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import signal
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx

LOOPBACK = "127.0.0.1"


def free_port(host: str = LOOPBACK) -> int:
    """Return a TCP port on ``host`` that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def port_is_free(port: int, host: str = LOOPBACK) -> bool:
    """Tell whether ``host:port`` can be bound (nothing is listening on it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


def sticky_port(record: Path, host: str = LOOPBACK) -> int:
    """Reuse the port remembered in ``record`` when it is still free, else pick a new one.

    Keeping the same port across restarts of the dev stack keeps URLs that a
    developer copied (into psql, a browser, a shell) valid.
    """
    try:
        previous = int(record.read_text().strip())
    except (OSError, ValueError):
        previous = 0
    port = previous if previous and port_is_free(previous, host) else free_port(host)
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_text(f"{port}\n")
    return port


def pid_alive(pid: int) -> bool:
    """Tell whether ``pid`` names a running process.

    A zombie (exited but not yet reaped, which happens to daemonised servers
    whose new parent does not reap) counts as gone.
    """
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    # The state field follows the parenthesised command name, which may hold spaces.
    state = stat.rsplit(")", 1)[-1].split()[0]
    return state not in ("Z", "X")


def wait_pid_gone(pid: int, timeout: float) -> bool:
    """Wait up to ``timeout`` seconds for ``pid`` to exit; return whether it did."""
    deadline = time.monotonic() + timeout
    while pid_alive(pid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


def stop_pid(pid: int, timeout: float = 10.0, sig: signal.Signals = signal.SIGTERM) -> None:
    """Send ``sig`` to ``pid``, wait up to ``timeout`` seconds, then SIGKILL it."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)
    if wait_pid_gone(pid, timeout):
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    wait_pid_gone(pid, 5.0)


def stop_process(proc: subprocess.Popen[bytes], timeout: float = 10.0) -> int | None:
    """Stop a child started with :class:`subprocess.Popen` and reap it; return its exit code."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            proc.wait(5.0)
    return proc.returncode


def _load_prctl() -> Callable[..., int] | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc = ctypes.CDLL(name, use_errno=True)
    except OSError:
        return None
    prctl: Callable[..., int] = libc.prctl
    return prctl


_PR_SET_PDEATHSIG = 1
_prctl = _load_prctl()


def die_with_parent() -> Callable[[], None]:
    """Return a ``preexec_fn`` that makes the child get SIGTERM when this process dies.

    A safety net for the case where the supervising process is killed with
    SIGKILL and gets no chance to stop its children. The kernel clears the
    setting when a child changes its user id, so it only helps children that
    run as the same user as the parent. It is a no-op when called off the main
    thread.
    """
    parent = os.getpid()
    # The kernel ties the signal to the thread that forks, not to the process:
    # arm it only when forking from the main thread, which lives as long as we do.
    armed = _prctl is not None and threading.current_thread() is threading.main_thread()

    def preexec() -> None:
        if not armed:
            return
        if _prctl is not None:
            _prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
        # The parent may already have died between fork and prctl.
        if os.getppid() != parent:
            os.kill(os.getpid(), signal.SIGTERM)

    return preexec


def wait_http_ok(
    url: str,
    timeout: float,
    proc: subprocess.Popen[bytes] | None = None,
    ca_file: str | None = None,
) -> None:
    """Poll ``url`` until it answers 200, or raise :class:`TimeoutError`.

    If ``proc`` is given and exits meanwhile, raise :class:`RuntimeError` at once
    instead of waiting out the timeout. An ``https`` URL's certificate is checked against
    ``ca_file`` when given (else the system's authorities).
    """
    deadline = time.monotonic() + timeout
    last = "no answer yet"
    verify: ssl.SSLContext | bool = ssl.create_default_context(cafile=ca_file) if ca_file else True
    with httpx.Client(timeout=2.0, verify=verify) as client:
        while True:
            if proc is not None and proc.poll() is not None:
                raise RuntimeError(
                    f"process exited with code {proc.returncode} before {url} was up"
                )
            try:
                response = client.get(url)
                if response.status_code == 200:
                    return
                last = f"HTTP {response.status_code}"
            except httpx.HTTPError as exc:
                last = f"{type(exc).__name__}: {exc}"
            if time.monotonic() >= deadline:
                raise TimeoutError(f"{url} did not answer 200 within {timeout:.0f}s ({last})")
            time.sleep(0.1)


def tail(path: Path, lines: int = 60) -> str:
    """Return the last ``lines`` lines of a log file, or a note that it is missing."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return f"(no log at {path})"
    return "\n".join(text.splitlines()[-lines:])


class Supervisor:
    """Children started in order, watched together, and stopped in reverse order.

    Each child gets its own session, so a Ctrl-C at the terminal reaches only the
    supervising process, which then stops the children in a known order.
    """

    def __init__(self) -> None:
        self.children: list[tuple[str, subprocess.Popen[bytes]]] = []

    def start(
        self, name: str, argv: list[str], env: dict[str, str], cwd: Path
    ) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(
            argv,
            env=env,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=die_with_parent(),
        )
        self.children.append((name, proc))
        return proc

    def exited(self) -> tuple[str, int] | None:
        """Return the name and exit code of a child that has exited, if any."""
        for name, proc in self.children:
            code = proc.poll()
            if code is not None:
                return name, code
        return None

    def stop_all(self, timeout: float = 10.0) -> None:
        """SIGTERM every child, newest first; SIGKILL whichever outlives ``timeout``."""
        for _, proc in reversed(self.children):
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for _, proc in reversed(self.children):
            stop_process(proc, max(0.1, deadline - time.monotonic()))
        self.children.clear()
