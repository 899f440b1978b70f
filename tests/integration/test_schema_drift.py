"""``qm db check`` on a database built by the migrations, before and after a DBA alters it by
hand: the schema the code describes (``app/store/schema.py``, ``schema_objects.py``) is what
``alembic upgrade head`` makes, and each hand-made change is named."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from typing import Any

import psycopg

from app.devstack.postgres import create_database
from app.store import drift
from app.store.schema_objects import REVISION

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def qm_db_check(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL",)}
    return subprocess.run([sys.executable, "-m", "app.cli.main", "db", "check", "--url", url,
                           *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120, check=False)  # fmt: skip


def test_a_database_at_head_matches_the_code(make_database: Any) -> None:
    url = make_database("qm_drift_clean")
    done = qm_db_check(url)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "the schema matches the code" in done.stdout
    assert drift.check(url) == []


HAND_MADE = """
ALTER TABLE pods ADD COLUMN cost_centre text;
DROP INDEX pods_phase;
CREATE OR REPLACE FUNCTION qm_int(v text) RETURNS integer LANGUAGE sql IMMUTABLE AS $$
  SELECT CASE WHEN v ~ '^-?[0-9]{1,18}$' THEN v::integer END
$$;
DROP TRIGGER roles_stamp ON roles;
ALTER TABLE nodes ALTER COLUMN name DROP NOT NULL;
ALTER TABLE leases ALTER COLUMN generation SET DEFAULT 5;
CREATE VIEW pods_by_hand AS SELECT name FROM pods;
CREATE POLICY only_mine ON configmaps USING (namespace = current_user);
GRANT SELECT ON secrets TO qm_reporting;
GRANT EXECUTE ON FUNCTION qm_history_seal(integer) TO PUBLIC;
REVOKE INSERT ON pods FROM qm_app;
CREATE INDEX nodes_by_hand ON nodes (name);
"""


def test_changes_made_by_hand_are_named(make_database: Any) -> None:
    url = make_database("qm_drift_hand")
    with psycopg.connect(url, autocommit=True) as db:
        db.execute(HAND_MADE)
    done = qm_db_check(url)
    assert done.returncode == 1, done.stdout + done.stderr
    found = done.stdout.splitlines()
    assert found == sorted(set(found), key=found.index)  # each said once
    expected = [
        "column pods.cost_centre is in the database but not in the code",
        "index pods_phase on pods is missing from the database",
        "function qm_int(v text) differs from the code's definition",
        "trigger roles_stamp on roles is missing from the database",
        "column nodes.name: nullable is True in the database, False in the code",
        "column leases.generation: default is 5 in the database, 1 in the code",
        "view pods_by_hand is in the database but not in the code",
        "policy only_mine on configmaps is in the database but not in the code",
        "grant secrets to qm_reporting: SELECT is in the database but not in the code",
        "grant qm_history_seal(integer) to PUBLIC: EXECUTE is in the database but not in the code",
        "grant pods to qm_app: INSERT is missing from the database",
        "index nodes_by_hand on nodes is in the database but not in the code",
    ]
    for line in expected:
        assert line in found, f"{line!r} not in:\n{done.stdout}"


def test_a_replaced_index_and_a_generated_column_are_named(make_database: Any) -> None:
    url = make_database("qm_drift_defs")
    with psycopg.connect(url, autocommit=True) as db:
        db.execute("DROP INDEX nodes_zone; CREATE INDEX nodes_zone ON nodes (zone, name)")
        db.execute("ALTER TABLE secrets DROP COLUMN secret_type;"
                   " ALTER TABLE secrets ADD COLUMN secret_type text"
                   " GENERATED ALWAYS AS (spec->>'kind') STORED")  # fmt: skip
        db.execute("ALTER PUBLICATION qm_stream DROP TABLE events")
    lines = drift.check(url)
    assert "index nodes_zone differs from the code's definition" in lines
    assert any(line.startswith("generated column secrets.secret_type computes") for line in lines)
    assert "publication qm_stream: events is missing from the database" in lines


def test_json_output_names_both_revisions(make_database: Any) -> None:
    url = make_database("qm_drift_json")
    with psycopg.connect(url, autocommit=True) as db:
        db.execute("ALTER TABLE pods ADD COLUMN cost_centre text")
    done = qm_db_check(url, "-o", "json")
    assert done.returncode == 1
    doc = json.loads(done.stdout)
    assert doc["revision"] == doc["codeRevision"]
    assert doc["drift"] == ["column pods.cost_centre is in the database but not in the code"]


def test_a_database_behind_the_code_is_told_apart(pg_server_url: str) -> None:
    """At 0013 (the previous release) the check names both revisions and what is missing."""
    url = create_database(pg_server_url, f"qm_drift_old_{secrets.token_hex(3)}")
    subprocess.run([sys.executable, "-m", "alembic", "upgrade", "0013"], cwd=ROOT, check=True,
                   env={**os.environ, "DATABASE_URL": url, "QM_MIGRATION_DATABASE_URL": url},
                   capture_output=True, timeout=300)  # fmt: skip
    done = qm_db_check(url)
    assert done.returncode == 1
    lines = done.stdout.splitlines()
    assert lines[0] == f"note: the database is at revision 0013, the code describes {REVISION}"
    assert "table qm_history is missing from the database" in lines
