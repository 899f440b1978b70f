"""pytest-alembic's checks on the real migrations and a real PostgreSQL: one head, upgrade
from an empty database, every downgrade runs, the result matches the schema the code
describes (no model drift), and each downgrade undoes exactly what its upgrade did.

pytest-alembic is used as a library (its collector does not load under this pytest): its
``runner`` drives ``migrations/env.py``, which connects through ``QM_MIGRATION_DATABASE_URL``
/ ``DATABASE_URL``, so the fixture points both at a fresh, empty database.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pytest_alembic import Config, runner
from pytest_alembic.runner import MigrationContext
from pytest_alembic.tests import default
from sqlalchemy import create_engine
from sqlalchemy.pool import NullPool

from app.devstack.postgres import create_database
from app.store import drift

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def empty_url(pg_server_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    url = create_database(pg_server_url, f"qm_suite_{secrets.token_hex(3)}")
    for var in ("DATABASE_URL", "QM_MIGRATION_DATABASE_URL"):
        monkeypatch.setenv(var, url)
    return url


@pytest.fixture
def alembic_runner(empty_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[MigrationContext]:
    monkeypatch.chdir(ROOT)  # alembic.ini's prepend_sys_path is relative
    engine = create_engine(drift.engine_url(empty_url), poolclass=NullPool)
    config = Config(config_options={"file": str(ROOT / "alembic.ini"),
                                    "script_location": str(ROOT / "migrations")})  # fmt: skip
    with runner(config=config, engine=engine) as alembic:
        yield alembic
    engine.dispose()


def test_single_head_revision(alembic_runner: MigrationContext) -> None:
    default.test_single_head_revision(alembic_runner)


def test_upgrade_from_empty(alembic_runner: MigrationContext) -> None:
    default.test_upgrade(alembic_runner)


def test_up_down_consistency(alembic_runner: MigrationContext) -> None:
    default.test_up_down_consistency(alembic_runner)


def test_model_definitions_match_ddl(alembic_runner: MigrationContext, empty_url: str) -> None:
    default.test_upgrade(alembic_runner)
    assert drift.check(empty_url) == []


def _snapshot(url: str) -> dict[str, Any]:
    engine = create_engine(drift.engine_url(url), poolclass=NullPool)
    try:
        with engine.connect() as conn:
            return drift.snapshot(conn)
    finally:
        engine.dispose()


def _differences(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    out = []
    for key in sorted(before.keys() | after.keys()):
        a, b = before.get(key), after.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            out += [f"{key} {k}" for k in sorted(a.keys() ^ b.keys())]
            out += [f"{key} {k} changed" for k in sorted(a.keys() & b.keys()) if a[k] != b[k]]
        elif a != b:
            gone = [r for r in a or [] if r not in (b or [])]
            new = [r for r in b or [] if r not in (a or [])]
            out.append(f"{key}: lost {gone[:5]}, gained {new[:5]}")
    return out


def test_each_downgrade_undoes_its_upgrade(
    alembic_runner: MigrationContext, empty_url: str
) -> None:
    """Walk down from head: after ``downgrade -1`` then ``upgrade +1`` the schema is what it was
    (tables, columns, defaults, comments, functions, triggers, views, policies, grants,
    indexes, the publication and the roles)."""
    revisions = alembic_runner.history.revisions  # base first, "heads" last
    steps = [r for r in revisions if r not in ("base", "heads")]
    alembic_runner.migrate_up_to("heads")
    failures = []
    for revision in reversed(steps):
        before = _snapshot(empty_url)
        alembic_runner.migrate_down_one()
        alembic_runner.migrate_up_one()
        diff = _differences(before, _snapshot(empty_url))
        if diff:
            failures.append(f"{revision}: " + "; ".join(diff))
        alembic_runner.migrate_down_one()
    assert not failures, "\n".join(failures)
