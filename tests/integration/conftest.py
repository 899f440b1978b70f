"""Fixtures of the integration tests: the controllers' plane, and cgroups for agents."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import capability
import psycopg
import pytest
import redis
from plane import ROOT, Plane

from agent.runtime.cgroups import Cgroups, CgroupsUnavailable
from agent.runtime.cgroups import detect as detect_cgroups


@pytest.fixture
def plane(
    make_database: Any, revisioner_on: Any, stop_all: Any, redis_url: str, through_pgbouncer: Any
) -> Iterator[Plane]:
    url = make_database("qm_ctl")
    # Each test gets its own Redis database index, so queues and markers start empty.
    broker = redis_url.rsplit("/", 1)[0] + f"/{secrets.randbelow(14) + 1}"
    redis.Redis.from_url(broker).flushdb()  # nothing left from an earlier test on this index
    env = {
        **os.environ,
        "DATABASE_URL": url,
        "QM_STREAM_DATABASE_URL": url,
        "QM_BROKER_URL": broker,
        "QM_RESYNC_SECONDS": "2",
        "PYTHONUNBUFFERED": "1",
        **through_pgbouncer(url),  # under QM_TEST_PGBOUNCER=1 (ADR 0057)
    }
    with revisioner_on(url), psycopg.connect(url, autocommit=True) as db:
        p = Plane(url, db, env, [])
        try:
            yield p
        finally:
            stop_all(p.procs)


@pytest.fixture
def cgroups() -> Iterator[Cgroups]:
    """A cgroup parent of the test's own under this process's cgroups, for an agent's pods;
    the test is skipped where the host gives none (fails under ``QM_REQUIRE_CAPABILITIES=1``).
    Removed, and checked gone, afterwards."""
    try:
        found = detect_cgroups(f"qm-test-{secrets.token_hex(4)}", relative_to_self=True)
    except CgroupsUnavailable as exc:
        capability.missing(f"this host gives no writable memory/cpu cgroups: {exc}")
    yield found
    found.remove("")
    assert not any(base.exists() for base in found.bases.values())


@pytest.fixture(scope="module")
def controllers(api_server: Any, stop_all: Any) -> Iterator[None]:
    """A dispatcher and a Celery worker beside the session's API server running the garbage
    collector and the namespace controller only, for the module's tests of what they finish:
    cascades, foreground deletion, namespace deletion. (The workload controllers would act on
    the tests' hand-made trees.)"""
    env = {**os.environ, **api_server.env, "PYTHONUNBUFFERED": "1",
           "QM_CONTROLLERS": "Garbage,Namespace"}  # fmt: skip
    procs = [
        subprocess.Popen([sys.executable, "-m", "workers.dispatch"], cwd=ROOT, env=env),
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "workers.app",
                "worker",
                "--loglevel=WARNING",
                "--concurrency=2",
                "--without-gossip",
                "--without-mingle",
            ],
            cwd=ROOT,
            env=env,
        ),
    ]
    time.sleep(2.0)  # both listening before the first delete
    try:
        assert all(p.poll() is None for p in procs), "the dispatcher or the worker exited"
        yield
    finally:
        stop_all(procs)
