"""Run the revisioner: ``python -m app.stream``.

Any number may run; one holds the leadership lock and the others wait as hot standbys. The API
server starts one beside itself unless ``QM_REVISIONER=external`` says it runs elsewhere.
"""

from __future__ import annotations

import os

from app.process import configure_logging, die_with_parent_if_asked, stop_on_signals
from app.store.schema_revision import require_known_schema
from app.stream.revisioner import Revisioner


def main() -> None:
    die_with_parent_if_asked()
    configure_logging()
    url = os.environ.get("QM_STREAM_DATABASE_URL") or os.environ.get("DATABASE_URL")
    if not url:
        raise SystemExit("DATABASE_URL is not set")
    require_known_schema(url, "the revisioner")
    stop = stop_on_signals()
    Revisioner(url, retain_s=float(os.environ.get("QM_HISTORY_SECONDS", "300"))).run(stop)


if __name__ == "__main__":
    main()
