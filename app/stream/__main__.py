"""Run the revisioner: ``python -m app.stream``.

Any number may run; one holds the leadership lock and the others wait as hot standbys. The API
server starts one beside itself unless ``QM_REVISIONER=external`` says it runs elsewhere.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import threading

from app.stream.revisioner import Revisioner


def _die_with_parent() -> None:
    """Linux: end with the API server that started us, even if it was SIGKILLed."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def main() -> None:
    if os.environ.get("QM_DIE_WITH_PARENT") == "1":
        _die_with_parent()
    logging.basicConfig(
        level=os.environ.get("QM_LOG_LEVEL", "warning").upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    url = os.environ.get("QM_STREAM_DATABASE_URL") or os.environ.get("DATABASE_URL")
    if not url:
        raise SystemExit("DATABASE_URL is not set")
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    Revisioner(url, retain_s=float(os.environ.get("QM_HISTORY_SECONDS", "300"))).run(stop)


if __name__ == "__main__":
    main()
