"""Run one discovery replica: ``python -m app.discovery``.

Run several for availability and fan-out: each tails the revision log on its own and numbers
state by the log's revisions, so a subscriber may move between replicas and resume where it
was. Subscribers connect to ``--port``; ``--http-port`` serves ``/healthz``, ``/metrics``,
``/v1/subscribers`` and ``/v1/drained``.
"""

from __future__ import annotations

import argparse
import gc
import os
import resource

import uvloop

from app.discovery.service import Settings, run
from app.process import configure_logging, die_with_parent_if_asked, run_until_stopped
from app.store.db import stream_database_url
from app.store.schema_revision import require_known_schema


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    env = os.environ
    p = argparse.ArgumentParser(prog="python -m app.discovery")
    p.add_argument("--host", default=env.get("QM_DISCOVERY_HOST", "127.0.0.1"))
    p.add_argument("--port", type=int, default=int(env.get("QM_DISCOVERY_PORT", "9470")))
    p.add_argument("--http-host", default=env.get("QM_DISCOVERY_HTTP_HOST", "127.0.0.1"))
    p.add_argument("--http-port", type=int, default=int(env.get("QM_DISCOVERY_HTTP_PORT", "9480")))
    p.add_argument("--log-level", default=env.get("QM_LOG_LEVEL", "warning"))
    return p.parse_args(argv)


def raise_open_files_limit() -> None:
    """One socket per subscriber: take the hard limit on open files (10,000 proxies need
    more than the usual soft 1,024)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def main(argv: list[str] | None = None) -> None:
    die_with_parent_if_asked()
    args = parse_args(argv)
    configure_logging(args.log_level)
    require_known_schema(stream_database_url(), "the discovery replica")
    settings = Settings(
        dsn=stream_database_url(),
        host=args.host,
        port=args.port,
        http_host=args.http_host,
        http_port=args.http_port,
    )
    raise_open_files_limit()
    uvloop.install()
    # The state holds every endpoint of the cluster for as long as the replica runs.
    gc.freeze()
    gc.set_threshold(50_000, 50, 100)
    run_until_stopped(lambda stop: run(settings, stop))


if __name__ == "__main__":
    main()
