"""The entry points' shared start and stop (``app.process``): SIGTERM and SIGINT set the stop
event, work that cleans up is awaited to the end, work that does not is cancelled after its
grace, and logging follows ``QM_LOG_LEVEL``."""

from __future__ import annotations

import asyncio
import logging
import os
import signal

import pytest

from app.process import configure_logging, run_until_stopped, stop_on_signals


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_signal_sets_the_event_and_the_clean_up_runs(sig: signal.Signals) -> None:
    seen: list[str] = []

    async def work(stop: asyncio.Event) -> None:
        os.kill(os.getpid(), sig)
        await stop.wait()
        await asyncio.sleep(0)  # clean-up that yields still runs to the end
        seen.append("cleaned up")

    run_until_stopped(work)
    assert seen == ["cleaned up"]


def test_work_that_ignores_the_stop_is_cancelled_after_its_grace() -> None:
    seen: list[str] = []

    async def blocked(stop: asyncio.Event) -> None:
        os.kill(os.getpid(), signal.SIGTERM)
        try:
            await asyncio.Event().wait()  # a stream that never yields
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise

    run_until_stopped(blocked, grace=0)
    assert seen == ["cancelled"]


def test_work_that_fails_before_any_stop_fails_the_process() -> None:
    async def broken(stop: asyncio.Event) -> None:
        raise RuntimeError("no database")

    with pytest.raises(RuntimeError, match="no database"):
        run_until_stopped(broken, grace=0)


def test_a_threaded_process_gets_an_event_the_signal_sets() -> None:
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        stop = stop_on_signals(grace_s=None)
        assert not stop.is_set()
        os.kill(os.getpid(), signal.SIGTERM)  # handled on the main thread before kill returns
        assert stop.is_set()
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)


@pytest.mark.parametrize(
    ("level", "env", "default", "expected"),
    [
        ("debug", "error", "warning", logging.DEBUG),
        (None, "error", "warning", logging.ERROR),
        (None, None, "info", logging.INFO),
    ],
)
def test_the_level_comes_from_the_flag_then_the_environment_then_the_default(
    monkeypatch: pytest.MonkeyPatch, level: str | None, env: str | None, default: str, expected: int
) -> None:
    root = logging.getLogger()
    handlers, was = root.handlers[:], root.level
    root.handlers = []  # basicConfig configures only a root logger without handlers
    if env is None:
        monkeypatch.delenv("QM_LOG_LEVEL", raising=False)
    else:
        monkeypatch.setenv("QM_LOG_LEVEL", env)
    try:
        configure_logging(level, default=default)
        assert root.level == expected
    finally:
        root.handlers, root.level = handlers, was
