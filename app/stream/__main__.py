"""Run the revisioner: ``python -m app.stream``.

Any number may run; one holds the leadership lock and the others wait as hot standbys. The API
server starts one beside itself unless ``QM_REVISIONER=external`` says it runs elsewhere.
"""

from __future__ import annotations

import logging
import os
import signal
import threading

from app.stream.revisioner import Revisioner


def main() -> None:
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
