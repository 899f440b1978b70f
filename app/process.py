"""How a Quaymaster process starts and stops: one place for what every entry point does.

Every long-running ``main()`` (``python -m app.api``, ``app.scheduler``, ``app.stream``,
``workers.manager``, ``workers.dispatch`` and the node agent) logs at ``QM_LOG_LEVEL`` in one
format, turns SIGTERM and SIGINT into a stop event its work watches, and, when the API server
started it beside itself (``QM_DIE_WITH_PARENT=1``), ends with that parent even if the parent
was SIGKILLed. Keeping it here means a change to how processes stop (a new signal, a grace
period) is made once, not in six copies that drift.

It imports nothing of the control plane, so the agent, which may import only ``app.core`` and
this kind of process plumbing (see the import-linter contracts), can use it too.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import signal
import threading
from collections.abc import Awaitable, Callable, Mapping

# Returns when the event is set or the seconds have passed, whichever comes first: what a
# periodic loop waits on between rounds, injected so tests can drive the loop on a fake clock.
Wait = Callable[[asyncio.Event, float], Awaitable[None]]
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
_PR_SET_PDEATHSIG = 1
# How long a threaded process may take to stop after SIGTERM before it is ended regardless.
STOP_GRACE_S = 15.0


def configure_logging(level: str | None = None, *, default: str = "warning") -> None:
    """Log at ``level``, else ``QM_LOG_LEVEL``, else ``default``."""
    chosen = level or os.environ.get("QM_LOG_LEVEL") or default
    logging.basicConfig(level=chosen.upper(), format=LOG_FORMAT)


def die_with_parent_if_asked(environ: Mapping[str, str] = os.environ) -> None:
    """Linux: with ``QM_DIE_WITH_PARENT=1``, get SIGTERM when the process that started this
    one ends, however it ends (a SIGKILLed API server must not leave its revisioner behind).
    A parent that ended before this process asked is caught too: ``QM_PARENT_PID`` names it,
    and a process already handed to another parent ends at once."""
    if environ.get("QM_DIE_WITH_PARENT") != "1":
        return
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    expected = environ.get("QM_PARENT_PID", "")
    if expected.isdigit() and os.getppid() != int(expected):
        os.kill(os.getpid(), signal.SIGTERM)


def stop_on_signals(grace_s: float | None = STOP_GRACE_S) -> threading.Event:
    """An event set by SIGTERM or SIGINT, for a process whose work runs in threads.

    The work is trusted to notice the event, but a thread blocked where it does not look (a
    call into a database that went away, a full queue) must not keep the process alive: the
    first signal also arms a timer that ends the process ``grace_s`` seconds later if it is
    still running (``None``: never)."""
    stop = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        if stop.is_set():
            return
        stop.set()
        if grace_s is None:
            return
        timer = threading.Timer(grace_s, _give_up, (signum, grace_s))
        timer.daemon = True
        timer.start()

    for sig in STOP_SIGNALS:
        signal.signal(sig, on_signal)
    return stop


def _give_up(signum: int, grace_s: float) -> None:
    logging.getLogger(__name__).error(
        "still running %.0f s after %s; exiting without finishing", grace_s,
        signal.Signals(signum).name,
    )  # fmt: skip
    os._exit(128 + signum)


async def wait_or_stop(stop: asyncio.Event, seconds: float) -> None:
    """The real :data:`Wait`: the event loop's clock."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)


def run_until_stopped(
    main: Callable[[asyncio.Event], Awaitable[None]], *, grace: float | None = None
) -> None:
    """Run ``main(stop)`` on a new event loop, ``stop`` being set by SIGTERM or SIGINT.

    With ``grace`` None, ``main`` is trusted to return once ``stop`` is set (it has clean-up
    to do: release a lease, stop pods). With a number, ``main`` is cancelled that many
    seconds after the stop if it has not returned by then, for work that blocks on a stream
    and has nothing to put away."""

    async def go() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in STOP_SIGNALS:
            loop.add_signal_handler(sig, stop.set)
        task = asyncio.ensure_future(main(stop))
        if grace is None:
            await task
            return
        stopped = asyncio.ensure_future(stop.wait())
        await asyncio.wait((task, stopped), return_when=asyncio.FIRST_COMPLETED)
        stopped.cancel()
        if not task.done():
            await asyncio.wait((task,), timeout=grace)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    asyncio.run(go())
