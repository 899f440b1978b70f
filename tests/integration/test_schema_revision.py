"""Components check the schema revision at start and refuse one they must not run on."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys

import psycopg
import pytest

from app.core.schema_compat import CODE_REVISION
from app.devstack.postgres import create_database
from app.store.schema_revision import SchemaMismatch, read_revision, require_known_schema
from tests.conftest import REPO_ROOT


def test_head_reads_its_revision_and_what_it_serves(pg_url):
    with psycopg.connect(pg_url, autocommit=True) as conn:
        revision, oldest = read_revision(conn)
    assert revision == CODE_REVISION
    assert oldest is not None
    assert require_known_schema(pg_url, "test") == CODE_REVISION


def test_newer_schema_is_accepted_only_when_it_serves_this_code(pg_url):
    with psycopg.connect(pg_url) as conn:
        conn.execute("UPDATE alembic_version SET version_num = '9999'")
        conn.execute(
            "INSERT INTO qm_schema_compat (schema_revision, oldest_code_revision)"
            " VALUES ('9999', %s)",
            (CODE_REVISION,),
        )
        assert read_revision(conn) == ("9999", CODE_REVISION)
        conn.execute("UPDATE qm_schema_compat SET oldest_code_revision = '9999'")
        assert read_revision(conn) == ("9999", "9999")
        conn.rollback()


def _scratch_db(pg_server_url: str, version: str) -> str:
    """A database holding only ``alembic_version`` at ``version``: what the check reads first."""
    url = create_database(pg_server_url, f"qm_rev_{secrets.token_hex(4)}")
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE alembic_version (version_num varchar(32) PRIMARY KEY)")
        conn.execute("INSERT INTO alembic_version VALUES (%s)", (version,))
    return url


@pytest.mark.parametrize(
    ("module", "component"),
    [
        (["app.api", "--port", "1"], "the API server"),
        (["app.stream"], "the revisioner"),
        (["app.scheduler", "--metrics-port", "-1"], "the scheduler"),
        (["workers.manager"], "the controller manager"),
        (["workers.dispatch"], "the dispatcher"),
        (["app.discovery", "--port", "1", "--http-port", "1"], "the discovery replica"),
    ],
)
def test_components_refuse_an_unknown_schema_naming_both_revisions(
    pg_server_url, module, component
):
    url = _scratch_db(pg_server_url, "9999")
    env = {**os.environ, "DATABASE_URL": url, "QM_STREAM_DATABASE_URL": url}
    result = subprocess.run(
        [sys.executable, "-m", *module],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode != 0
    assert f"{component} refuses to start" in result.stderr
    assert "9999" in result.stderr and CODE_REVISION in result.stderr


def test_an_older_schema_is_refused(pg_server_url):
    url = _scratch_db(pg_server_url, "0013")
    with pytest.raises(SchemaMismatch, match=f"0013, older than revision {CODE_REVISION}"):
        require_known_schema(url, "test")


def test_the_application_role_reads_the_revision_but_cannot_change_it(app_role_url):
    assert require_known_schema(app_role_url, "test") == CODE_REVISION
    with psycopg.connect(app_role_url) as conn, pytest.raises(psycopg.errors.InsufficientPrivilege):
        conn.execute("UPDATE qm_schema_compat SET oldest_code_revision = '9999'")
