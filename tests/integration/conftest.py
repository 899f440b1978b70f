"""Fixtures of the controllers' integration tests."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
import redis
from plane import Plane


@pytest.fixture
def plane(make_database: Any, revisioner_on: Any, stop_all: Any, redis_url: str) -> Iterator[Plane]:
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
    }
    with revisioner_on(url), psycopg.connect(url, autocommit=True) as db:
        p = Plane(url, db, env, [])
        try:
            yield p
        finally:
            stop_all(p.procs)
