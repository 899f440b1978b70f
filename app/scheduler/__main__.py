"""Run the scheduler: ``python -m app.scheduler``.

Run two or more for availability: they elect a leader through a Lease in PostgreSQL and the
others stand by with a warm snapshot. ``--no-leader-elect`` lets several schedulers bind at
once (the commit-time checks keep that safe); it exists for tests and experiments.
"""

from __future__ import annotations

import argparse
import gc
import os

from app.core.priority import PRODUCTION_THRESHOLD
from app.core.scheduling.engine import SCHEDULER_NAMES, Config
from app.process import configure_logging, die_with_parent_if_asked, run_until_stopped
from app.scheduler.service import SchedulerService, Settings
from app.store.db import database_url, stream_database_url
from app.store.schema_revision import require_known_schema


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m app.scheduler")
    p.add_argument("--identity", default=None, help="leader election identity (host-pid)")
    p.add_argument(
        "--leader-elect",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="take part in leader election (default on)",
    )
    p.add_argument("--batch-size", type=int, default=500, help="pods decided per cycle")
    p.add_argument(
        "--percentage-of-nodes-to-score",
        type=int,
        default=None,
        help="share of feasible nodes scored per pod (default adaptive: 500 of 10,000)",
    )
    p.add_argument(
        "--production-threshold",
        type=int,
        default=PRODUCTION_THRESHOLD,
        help="lowest production priority: pods at or above it are never preempted",
    )
    p.add_argument(
        "--scheduler-name",
        action="append",
        default=None,
        help="schedule pods whose spec.schedulerName is this (repeatable; default: "
        "default-scheduler and quaymaster)",
    )
    p.add_argument(
        "--seed",
        type=int,
        default=None,
        help="base seed of the cycles' random choices, to replay decisions (default: random,"
        " logged at info)",
    )
    p.add_argument("--metrics-host", default="127.0.0.1")
    p.add_argument(
        "--metrics-port",
        type=int,
        default=int(os.environ.get("QM_SCHEDULER_METRICS_PORT", "10259")),
        help="port of /metrics and /healthz (0: any free port, -1: none)",
    )
    p.add_argument("--log-level", default=os.environ.get("QM_LOG_LEVEL", "warning"))
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    die_with_parent_if_asked()
    args = parse_args(argv)
    configure_logging(args.log_level)
    require_known_schema(database_url(), "the scheduler")
    settings = Settings(
        database_url=database_url(),
        stream_url=stream_database_url(),
        leader_elect=args.leader_elect,
        batch_size=max(1, args.batch_size),
        config=Config(
            percentage_to_score=args.percentage_of_nodes_to_score,
            threshold=args.production_threshold,
            scheduler_names=frozenset(args.scheduler_name or SCHEDULER_NAMES),
        ),
        metrics_host=args.metrics_host,
        metrics_port=None if args.metrics_port < 0 else args.metrics_port,
        seed=args.seed,
    )
    if args.identity:
        settings.identity = args.identity
    # The snapshot holds hundreds of thousands of long-lived objects: keep the collector from
    # rescanning them on every allocation burst.
    gc.freeze()
    gc.set_threshold(50_000, 50, 100)
    run_until_stopped(lambda stop: SchedulerService(settings).run(stop))


if __name__ == "__main__":
    main()
