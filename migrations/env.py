"""Alembic environment: the only way Quaymaster's schema is created or changed.

Connects with ``QM_MIGRATION_DATABASE_URL`` (falling back to ``DATABASE_URL``; a plain
``postgresql://`` URL), since migrations run as the schema's owner and directly, not through
PgBouncer, while the application connects as ``qm_app``. Runs online through psycopg 3, or
emits SQL with ``alembic upgrade head --sql`` for DBAs who review and lint before applying
(``docs/upgrades.md``).

Every migration runs in its own transaction, which starts with ``SET LOCAL lock_timeout`` and
``statement_timeout`` (``migrations/online.py``; the offline SQL carries them too). Online, a
migration that fails on a lock timeout (SQLSTATE 55P03) or is chosen to break a deadlock
(40P01) was rolled back whole, so it is tried again after a growing pause, up to
``QM_MIGRATION_LOCK_RETRIES`` times (default 10): a DDL statement that waits behind a long
transaction gives way to the application's queries, then comes back.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable
from typing import Any

from alembic import context
from sqlalchemy import create_engine, pool
from sqlalchemy.exc import DBAPIError

from migrations import online

URL_ENV = "QM_MIGRATION_DATABASE_URL"
APPLICATION_NAME = "qm-migrate"


class PartlyApplied(SystemExit):
    """A migration failed after committing part of itself: running it again is not safe."""


def _url() -> str:
    url = (
        os.environ.get(URL_ENV)
        or os.environ.get("DATABASE_URL")
        or context.config.get_main_option("sqlalchemy.url")
    )
    if not url:
        raise SystemExit(f"{URL_ENV} (or DATABASE_URL) is not set")
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


def _with_timeouts(fn: Callable[..., Any], module: Any) -> Callable[..., Any]:
    """``fn`` (a migration's upgrade or downgrade) preceded by its transaction's timeouts.

    A migration may set module-level ``lock_timeout`` / ``statement_timeout`` strings to
    override the defaults for itself.
    """

    @functools.wraps(fn)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        online.progress.update(committed=False, revision=module.revision)
        online.set_timeouts(
            getattr(module, "lock_timeout", None), getattr(module, "statement_timeout", None)
        )
        return fn(*args, **kwargs)

    guarded.qm_guarded = True  # type: ignore[attr-defined]
    return guarded


def _guard_every_migration() -> None:
    for script in context.script.walk_revisions():
        module = script.module
        for name in ("upgrade", "downgrade"):
            fn = getattr(module, name)
            if not getattr(fn, "qm_guarded", False):
                setattr(module, name, _with_timeouts(fn, module))


def run_offline() -> None:
    # Named parameters: with the driver's "pyformat" style every % in the SQL would be doubled.
    context.configure(
        url=_url(),
        literal_binds=True,
        target_metadata=None,
        transaction_per_migration=True,
        dialect_opts={"paramstyle": "named"},
    )
    with context.begin_transaction():
        context.run_migrations()


def _run_once(engine: Any) -> None:
    with engine.connect() as connection:
        context.configure(
            connection=connection, target_metadata=None, transaction_per_migration=True
        )
        with context.begin_transaction():
            context.run_migrations()


def run_online() -> None:
    retries = online.retries()
    # The session's own timeouts cover what Alembic runs outside a migration's transaction
    # (reading alembic_version first) and the autocommit blocks.
    options = (
        f"-c lock_timeout={online.lock_timeout()} -c statement_timeout={online.statement_timeout()}"
    )
    engine = create_engine(
        _url(),
        poolclass=pool.NullPool,
        connect_args={"application_name": APPLICATION_NAME, "options": options},
    )
    for attempt in range(retries + 1):
        try:
            _run_once(engine)
            return
        except DBAPIError as exc:
            cause = online.retried_cause(exc)
            if cause is None or attempt == retries:
                raise
            if online.progress["committed"]:
                what = cause.format(online.lock_timeout())
                raise PartlyApplied(
                    f"migration {online.progress.get('revision')} {what} after"
                    " committing its first part (before an autocommit block); it is not run"
                    f" again by itself: see docs/upgrades.md ({exc.orig})"
                ) from exc
            pause = online.pause(attempt)
            print(
                f"migration {cause.format(online.lock_timeout())};"
                f" retrying in {pause:.1f}s ({attempt + 1}/{retries})",
                flush=True,
            )
            time.sleep(pause)


_guard_every_migration()
if context.is_offline_mode():
    run_offline()
else:
    run_online()
