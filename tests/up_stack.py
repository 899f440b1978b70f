"""The whole stack ``make up`` runs (``python -m app.devstack.up``), in a scratch directory of a
test's own: its embedded servers, its state, its ``qm`` config, its log. Imported as
``up_stack`` (``tests/`` is on the path through its conftest)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from app.devstack.supervise import free_port

ROOT = Path(__file__).resolve().parents[1]
# What would point the stack at servers or credentials of the test session, not its own.
NOT_INHERITED = (
    "DATABASE_URL",
    "QM_BROKER_URL",
    "QM_BOOTSTRAP_TOKEN",
    "QM_SECRET_KEYS",
    "KUBECONFIG",
)


class UpStack:
    """``make up`` in ``tmp``: state in ``tmp/state``, config ``tmp/qm.yaml``, log ``tmp/up.log``,
    the API on a free port, the local network named with ``tag`` (beside a developer's own)."""

    def __init__(self, tmp: Path, tag: str) -> None:
        self.tmp = tmp
        self.port = free_port()
        self.state = tmp / "state"
        self.config = tmp / "qm.yaml"
        self.env = {k: v for k, v in os.environ.items() if k not in NOT_INHERITED}
        self.env.update(
            QM_STATE_DIR=str(self.state),
            QM_API_PORT=str(self.port),
            QM_CONFIG=str(self.config),
            QM_NETWORK_TAG=tag,
        )
        self.proc: subprocess.Popen[str] | None = None

    def is_up(self) -> bool:
        """Up enough for the test: it has written the ``qm`` config."""
        return self.config.exists()

    def start(self, timeout: float = 180) -> None:
        """Start it and wait until it is up (``is_up``); fails with its log if it exits."""
        self.tmp.chmod(0o755)  # make up's PostgreSQL may run as another, unprivileged user
        log = open(self.tmp / "up.log", "w")  # noqa: SIM115 - the child's
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "app.devstack.up"],
            cwd=ROOT,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            text=True,
        )
        deadline = time.monotonic() + timeout
        while not self.is_up():
            assert self.proc.poll() is None, self.log()
            assert time.monotonic() < deadline, "make up did not come up"
            time.sleep(0.2)

    def output(self) -> str:
        """All it has printed so far."""
        path = self.tmp / "up.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def log(self) -> str:
        return self.output()[-6000:]

    def stop(self, timeout: float = 90) -> int | None:
        """Ctrl-C, as a developer stops it (killed after ``timeout``); its exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def qm(self, *args: str, stdin: str | None = None) -> str:
        """``qm`` with the config make up wrote; its output (it must succeed)."""
        env = {k: v for k, v in self.env.items() if k not in ("QM_SERVER", "QM_TOKEN")}
        done = subprocess.run([sys.executable, "-m", "app.cli.main", *args], cwd=ROOT, env=env,
                              input=stdin, capture_output=True, text=True, timeout=60)  # fmt: skip
        assert done.returncode == 0, done.stderr
        return done.stdout
