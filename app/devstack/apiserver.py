"""Run the API server as a child process on a loopback port, for tests and benchmarks.

Integration and end-to-end tests talk to a real ``python -m app.api`` over HTTP,
and some of them restart it mid-test (to check that clients and watches
survive). This module owns that process: start it, wait until ``/healthz``
answers, stop it by pid, restart it on the same port, and show its output when
it fails to come up.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from app.devstack.pki import ClusterPki
from app.devstack.supervise import LOOPBACK, die_with_parent, stop_process, wait_http_ok

HEALTH_PATH = "/healthz"


class ApiServer:
    """One ``python -m app.api`` process bound to ``127.0.0.1:port``.

    ``env`` must carry what the API reads (``DATABASE_URL``,
    ``QM_BOOTSTRAP_TOKEN``, ...); its output is appended to ``log_path``. With ``pki`` it
    serves HTTPS with the cluster's API server certificate and :attr:`url` is ``https``.
    """

    def __init__(
        self,
        port: int,
        token: str,
        env: dict[str, str],
        log_path: Path,
        cwd: Path | None = None,
        pki: ClusterPki | None = None,
    ) -> None:
        self.pki = pki
        self.port = port
        self.token = token
        self.env = dict(env)
        self.log_path = log_path
        self.cwd = cwd
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"{'https' if self.pki else 'http'}://{LOOPBACK}:{self.port}"

    @property
    def ca_file(self) -> str | None:
        """The CA file a client trusts to reach this server (``None``: plain HTTP)."""
        return str(self.pki.ca) if self.pki else None

    @property
    def pid(self) -> int | None:
        """The server's pid while it runs, else ``None``."""
        if self._proc is None or self._proc.poll() is not None:
            return None
        return self._proc.pid

    def start(self, timeout: float = 30.0) -> None:
        """Start the server and wait until ``GET /healthz`` answers 200.

        Raises :class:`RuntimeError` carrying the server's output if it exits or
        is not healthy within ``timeout`` seconds.
        """
        if self.pid is not None:
            return
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        argv = [sys.executable, "-m", "app.api", "--host", LOOPBACK, "--port", str(self.port)]
        if self.pki is not None:
            cert, key = self.pki.apiserver.cert, self.pki.apiserver.key
            argv += ["--tls-cert-file", str(cert), "--tls-key-file", str(key)]
        with self.log_path.open("ab") as log:
            self._proc = subprocess.Popen(
                argv,
                env=self.env,
                cwd=self.cwd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=die_with_parent(),
            )
        try:
            wait_http_ok(self.url + HEALTH_PATH, timeout, self._proc, self.ca_file)
        except (RuntimeError, TimeoutError) as exc:
            self.stop()
            with self.log_path.open("rb") as log:
                log.seek(offset)
                output = log.read().decode(errors="replace")
            raise RuntimeError(
                f"API server did not start: {exc}\n--- output of {' '.join(argv)} ---\n{output}"
            ) from None

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the server (SIGTERM, then SIGKILL after ``timeout``) and reap it."""
        if self._proc is not None:
            stop_process(self._proc, timeout)
            self._proc = None

    def restart(self, timeout: float = 30.0) -> None:
        """Stop the server and start it again on the same port, waiting until healthy."""
        self.stop()
        self.start(timeout)
