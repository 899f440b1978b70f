"""Fixtures of the end-to-end tests that drive the session's API server.

Fixtures:
    workers -> None: a Celery worker and the dispatcher running the controllers beside it.
    qm_env -> dict[str, str]: the environment ``qm`` runs in against it.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def workers(
    api_server: Any, pg_url: str, redis_url: str, stop_all: Any, through_pgbouncer: Any
) -> Iterator[None]:
    """A Celery worker and the dispatcher on the session's database, with a broker database of
    the test's own (resyncing every 2 s), stopped after the test (through PgBouncer under
    ``QM_TEST_PGBOUNCER=1``)."""
    broker = redis_url.rsplit("/", 1)[0] + f"/{secrets.randbelow(14) + 1}"
    env = {**os.environ, "DATABASE_URL": pg_url, "QM_STREAM_DATABASE_URL": pg_url,
           "QM_BROKER_URL": broker, "QM_RESYNC_SECONDS": "2", "PYTHONUNBUFFERED": "1",
           **through_pgbouncer(pg_url)}  # fmt: skip
    procs = [
        subprocess.Popen([sys.executable, "-m", "celery", "-A", "workers.app", "worker",
                          "--loglevel=WARNING", "--concurrency=2", "--without-gossip",
                          "--without-mingle"], cwd=ROOT, env=env),
        subprocess.Popen([sys.executable, "-m", "workers.dispatch"], cwd=ROOT, env=env),
    ]  # fmt: skip
    try:
        yield
    finally:
        stop_all(procs)


@pytest.fixture
def qm_env(api_server: Any, tmp_path: Path) -> dict[str, str]:
    """``qm``'s environment: the session's API server and its token, an empty config file of
    the test's own."""
    config = tmp_path / "config.yaml"
    config.write_text("")
    return {**os.environ, "QM_CONFIG": str(config), "QM_SERVER": api_server.url,
            "QM_TOKEN": api_server.token}  # fmt: skip
