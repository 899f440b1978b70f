"""Who may read what through the reporting schema: team logins see their namespaces only, no
reporting role reads a Secret's value (nor the legacy audit trail), and row-level security
leaves the application's role and a DBA's role as they were."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from reporting_seed import SECRET_VALUE, Roles, seed_cluster

from app.devstack.postgres import create_database

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def cluster(make_database: Callable[[str], str]) -> Iterator[tuple[str, dict[str, str]]]:
    url = make_database("qm_report_acl")
    seed_cluster(url)
    roles = Roles(url)
    made = {
        "team_a": roles.make("rep_team_a", "LOGIN IN ROLE qm_reporting", "team-a"),
        "auditor": roles.make("rep_auditor", "LOGIN IN ROLE qm_reporting", "*"),
        "group": roles.make("rep_team_b", "NOLOGIN IN ROLE qm_reporting", "team-b"),
        "nobody": roles.make("rep_nobody", "LOGIN IN ROLE qm_reporting"),
        "dba": roles.make("dba", "LOGIN"),
    }
    made["member"] = roles.make("rep_member", f"LOGIN IN ROLE {made['group']}")
    with psycopg.connect(url, autocommit=True) as db:
        dba = sql.Identifier(made["dba"])
        db.execute(sql.SQL("GRANT SELECT, UPDATE ON pods TO {}").format(dba))
        db.execute(sql.SQL("GRANT USAGE ON SEQUENCE qm_row_version TO {}").format(dba))
    try:
        yield url, made
    finally:
        roles.drop()


def as_role(url: str, role: str) -> psycopg.Connection:
    return psycopg.connect(url, user=role, autocommit=True)


def namespaces(db: psycopg.Connection, relation: str, column: str = "namespace") -> set[str]:
    return {r[0] for r in db.execute(f"SELECT DISTINCT {column} FROM {relation}")}


NAMESPACED_VIEWS = (
    "workloads", "pending_pods", "pending_pods_by_reason", "allocation", "rollout_history",
    "rollout_changes", "evictions", "quota_usage", "disruption_budget_blocks", "changes",
    "role_bindings", "service_ips",
)  # fmt: skip


def test_a_team_login_sees_only_its_namespaces(cluster: tuple[str, dict[str, str]]) -> None:
    url, roles = cluster
    with as_role(url, roles["team_a"]) as db:
        for view in NAMESPACED_VIEWS:
            assert namespaces(db, f"reporting.{view}") <= {"team-a"}, view
        assert namespaces(db, "reporting.allocation") == {"team-a"}
        assert namespaces(db, "reporting.changes") == {"team-a"}
        # Straight from the tables, the same rows and no more.
        assert namespaces(db, "pods") == {"team-a"}
        assert namespaces(db, "qm_history") == {"team-a"}
        assert namespaces(db, "namespaces", "name") == {"team-a"}
        # Nodes are shared: zones and capacity, with this team's requests only.
        (n2,) = db.execute("SELECT pods FROM reporting.node_capacity WHERE node = 'n2'").fetchall()
        assert n2 == (0,)
        assert db.execute("SELECT count(*) FROM reporting.node_failures").fetchone() == (0,)
        # Its pods evicted by a drain, without the node's cordon (cluster-scoped history).
        drains = db.execute("SELECT node, cordoned, pods_evicted FROM reporting.drains").fetchall()
        assert drains == [("n1", False, 1)]


def test_a_group_role_grants_its_members(cluster: tuple[str, dict[str, str]]) -> None:
    url, roles = cluster
    with as_role(url, roles["member"]) as db:
        assert namespaces(db, "reporting.allocation") == {"team-b"}
        assert namespaces(db, "reporting.changes") == {"team-b"}
        (own,) = db.execute("SELECT namespace FROM reporting.namespace_access").fetchall()
        assert own == ("team-b",)  # its own grants, not the other roles'


def test_unmapped_roles_see_nothing(cluster: tuple[str, dict[str, str]]) -> None:
    url, roles = cluster
    with as_role(url, roles["nobody"]) as db:
        assert db.execute("SELECT count(*) FROM reporting.changes").fetchone() == (0,)
        assert db.execute("SELECT count(*) FROM pods").fetchone() == (0,)
    with as_role(url, roles["team_a"]) as db:
        db.execute("SET ROLE qm_reporting")  # no way around the mapping
        assert db.execute("SELECT count(*) FROM reporting.workloads").fetchone() == (0,)


def test_the_auditor_sees_every_namespace_and_cluster_changes(
    cluster: tuple[str, dict[str, str]],
) -> None:
    url, roles = cluster
    with as_role(url, roles["auditor"]) as db:
        assert namespaces(db, "reporting.changes") >= {"", "team-a", "team-b"}
        assert db.execute("SELECT count(*) FROM reporting.node_failures").fetchone() == (1,)


def test_reporting_reads_no_table_whole_and_writes_nothing(
    cluster: tuple[str, dict[str, str]],
) -> None:
    url, roles = cluster
    with psycopg.connect(url) as db:
        whole = db.execute(
            "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p', 'v')"
            " AND has_table_privilege('qm_reporting', c.oid, 'SELECT')"
        ).fetchall()
        assert whole == []
    denied = (
        "SELECT spec FROM pods", "SELECT annotations FROM pods", "SELECT uid FROM secrets",
        "SELECT count(*) FROM qm_audit", "SELECT count(*) FROM qm_revision_log",
        "SELECT count(*) FROM qm_tokens", "SELECT count(*) FROM qm_history_default",
        "INSERT INTO reporting.namespace_access VALUES (current_user, '*')",
        "UPDATE pods SET status = '{}'",
    )  # fmt: skip
    with as_role(url, roles["auditor"]) as db:
        for statement in denied:
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                db.execute(statement)


def readable_text(url: str, role: str) -> str:
    """Everything ``role`` can read: every reporting view's rows and every granted column."""
    with psycopg.connect(url) as db:
        columns = db.execute(
            "SELECT c.relname, a.attname FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid"
            " JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'public'"
            " AND a.attnum > 0 AND NOT a.attisdropped"
            " AND has_column_privilege('qm_reporting', c.oid, a.attnum, 'SELECT')"
        ).fetchall()
        views = db.execute(
            "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = 'reporting' AND c.relkind IN ('v', 'r')"
        ).fetchall()
    assert len(columns) > 50 and len(views) >= 13
    out: list[str] = []
    with as_role(url, role) as db:
        for table, column in columns:
            q = sql.SQL("SELECT string_agg({}::text, ' ') FROM {}").format(
                sql.Identifier(column), sql.Identifier(table)
            )
            out.append(str(db.execute(q).fetchone()))
        for (view,) in views:
            q = sql.SQL("SELECT string_agg(t::text, ' ') FROM reporting.{} t").format(
                sql.Identifier(view)
            )
            out.append(str(db.execute(q).fetchone()))
    return "\n".join(out)


def test_no_secret_value_is_readable(cluster: tuple[str, dict[str, str]]) -> None:
    url, roles = cluster
    with psycopg.connect(url) as db:  # it is there, for the owner
        assert db.execute(
            "SELECT count(*) FROM secrets WHERE spec::text LIKE %s", (f"%{SECRET_VALUE}%",)
        ).fetchone() == (1,)
    text = readable_text(url, roles["auditor"])
    assert "db-password" in text  # the Secret's change is visible...
    assert SECRET_VALUE not in text  # ...its value is not


def test_legacy_audit_rows_keep_no_secret_value_after_the_upgrade(
    pg_server_url: str, cluster: tuple[str, dict[str, str]]
) -> None:
    """A Secret written by the previous release (with its qm_audit row) before the upgrade."""
    _, roles = cluster
    url = create_database(pg_server_url, f"qm_report_legacy_{secrets.token_hex(3)}")
    migrate(url, "0013")
    value = "legacy-" + secrets.token_hex(6)
    applied = json.dumps({"kind": "Secret", "stringData": {"token": value}})
    row = {
        "namespace": "team-a", "name": "api-token",
        "annotations": {"kubectl.kubernetes.io/last-applied-configuration": applied},
    }  # fmt: skip
    with psycopg.connect(url) as db:
        uid = uuid.uuid4()
        db.execute(
            "INSERT INTO secrets (uid, namespace, name, annotations, spec) VALUES"
            " (%s, 'team-a', 'api-token', %s, %s)",
            (uid, json.dumps(row["annotations"]), json.dumps({"stringData": {"token": value}})),
        )
        db.execute(  # what the previous release's audit kept: the row less its spec
            "INSERT INTO qm_audit (username, verb, kind, namespace, name, uid, after)"
            " VALUES ('alice', 'create', 'Secret', 'team-a', 'api-token', %s, %s)",
            (uid, json.dumps({**row, "uid": str(uid)})),
        )
    migrate(url, "head")
    auditor = roles["auditor"]
    with psycopg.connect(url, autocommit=True) as db:
        db.execute(
            "INSERT INTO reporting.namespace_access (role_name, namespace) VALUES (%s, '*')",
            (auditor,),
        )
        copied = db.execute(
            "SELECT count(*) FROM qm_history WHERE table_name = 'secrets' AND name = 'api-token'"
        ).fetchone()
        assert copied == (1,)  # the upgrade copied the legacy row into the history
    try:
        assert value not in readable_text(url, auditor)
    finally:
        with psycopg.connect(url, autocommit=True) as db:
            db.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(auditor)))


def migrate(url: str, target: str) -> None:
    subprocess.run(
        [sys.executable, "-m", "alembic", "upgrade", target],
        cwd=REPO_ROOT, check=True, capture_output=True, timeout=300,
        env={**os.environ, "DATABASE_URL": url, "QM_MIGRATION_DATABASE_URL": url},
    )  # fmt: skip


def test_the_app_and_a_dba_see_and_write_every_row(cluster: tuple[str, dict[str, str]]) -> None:
    url, roles = cluster
    with psycopg.connect(url, autocommit=True) as db:
        (total,) = db.execute("SELECT count(*) FROM pods").fetchone()  # type: ignore[misc]
        db.execute("SET ROLE qm_app")
        assert db.execute("SELECT count(*) FROM pods").fetchone() == (total,)
        plan = "\n".join(
            r[0] for r in db.execute("EXPLAIN SELECT * FROM pods WHERE namespace = 'team-b'")
        )
        assert "namespace_access" not in plan and "SubPlan" not in plan and "InitPlan" not in plan
        db.execute("RESET ROLE")
    with as_role(url, roles["dba"]) as db:
        assert db.execute("SELECT count(*) FROM pods").fetchone() == (total,)
        done = db.execute("UPDATE pods SET status = status WHERE namespace = 'team-b'")
        assert done.rowcount == 3


def test_access_grants_are_in_the_history(cluster: tuple[str, dict[str, str]]) -> None:
    url, roles = cluster
    with as_role(url, roles["auditor"]) as db:
        granted = db.execute(
            "SELECT namespace, db_role FROM reporting.changes"
            " WHERE table_name = 'namespace_access' AND op = 'insert' AND name = %s",
            (roles["team_a"],),
        ).fetchall()
    assert granted == [("team-a", "postgres")]
