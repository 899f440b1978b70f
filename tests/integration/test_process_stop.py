"""A threaded process ends on SIGTERM even when its work never looks at the stop event, and a
child started by a parent that is already gone does not stay behind (real processes)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time

import pytest

BLOCKED = textwrap.dedent(
    """
    import sys, threading
    from app.process import stop_on_signals
    stop_on_signals(grace_s=float(sys.argv[1]))
    print("ready", flush=True)
    threading.Event().wait()  # stuck where the stop event is never looked at
    """
)

POLITE = textwrap.dedent(
    """
    from app.process import stop_on_signals
    stop = stop_on_signals(grace_s=30)
    print("ready", flush=True)
    stop.wait()
    """
)


def start(code: str, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", code, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, env=env,
    )  # fmt: skip
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    return proc


def test_a_process_stuck_past_the_grace_is_ended_after_it() -> None:
    proc = start(BLOCKED, "0.5")
    try:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 128 + signal.SIGTERM
        assert proc.stderr is not None
        assert "exiting without finishing" in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()


def test_a_process_that_stops_in_time_exits_cleanly() -> None:
    proc = start(POLITE)
    try:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()


def test_a_child_whose_parent_is_already_gone_ends_at_once() -> None:
    code = "from app.process import die_with_parent_if_asked\ndie_with_parent_if_asked()\n"
    code += "import time\ntime.sleep(60)\n"
    # The parent it names is not its parent: as if that parent had ended before the child
    # asked to be told.
    env = {**os.environ, "QM_DIE_WITH_PARENT": "1", "QM_PARENT_PID": str(os.getpid() + 10**6)}
    proc = subprocess.Popen([sys.executable, "-c", code], env=env)
    try:
        assert proc.wait(timeout=20) == -signal.SIGTERM
    finally:
        if proc.poll() is None:
            proc.kill()


def test_a_connect_to_a_silent_address_gives_up_instead_of_blocking() -> None:
    """The settings the revisioner's threads connect with: both drivers take them, and a
    listener that never answers (the port taken by something that is not PostgreSQL) fails the
    connect instead of blocking it for good. The timeout is shortened to libpq's least."""
    import psycopg
    import psycopg2

    from app.store.db import BOUNDED_WAITS

    waits = {**BOUNDED_WAITS, "connect_timeout": 2}
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        url = f"postgresql://nobody@127.0.0.1:{silent.getsockname()[1]}/nothing"
        for connect, error in ((psycopg.connect, psycopg.OperationalError),
                               (psycopg2.connect, psycopg2.OperationalError)):  # fmt: skip
            t0 = time.monotonic()
            with pytest.raises(error, match="timeout"):
                connect(url, **waits)
            assert time.monotonic() - t0 < 10
