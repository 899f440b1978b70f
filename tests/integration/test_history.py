"""The change history against real PostgreSQL (migration 0014, ADR 0052): every write from any
path recorded with its database role and application context; a DBA's manual UPDATE in the
history and the revision stream; the application role unable to alter the history; a row
changed after sealing named by verify; high-churn writes counted, not stored; Secrets' data
never copied; the previous release's qm_audit rows lending their user."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psycopg
import pytest
from psycopg import errors, sql

from app.devstack.postgres import create_database
from app.store import history

ROOT = Path(__file__).resolve().parents[2]


def as_role(url: str, role: str) -> str:
    parts = urlsplit(url)
    return parts._replace(netloc=f"{role}@{parts.hostname}:{parts.port}").geturl()


@pytest.fixture(scope="module")
def db_url(make_database: Callable[[str], str]) -> str:
    return make_database("qm_hist")


@pytest.fixture
def db(db_url: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(db_url, autocommit=True) as conn:
        yield conn


def rows(db: psycopg.Connection[Any], where: str, *params: Any) -> list[dict[str, Any]]:
    cur = db.cursor(row_factory=psycopg.rows.dict_row)
    return cur.execute(
        "SELECT * FROM (SELECT h.*, l.seq, l.hash FROM qm_history AS h"
        " LEFT JOIN qm_history_links AS l ON l.id = h.id AND l.at = h.at) AS r"
        f" WHERE {where} ORDER BY id",
        params,
    ).fetchall()


def name() -> str:
    return f"h-{secrets.token_hex(4)}"


def insert_namespace(db: psycopg.Connection[Any], ns: str) -> None:
    db.execute("INSERT INTO namespaces (uid, name) VALUES (%s, %s)", (uuid.uuid4(), ns))


def test_writes_carry_the_context_and_a_batch_carries_one_per_row(
    db: psycopg.Connection[Any],
) -> None:
    ns, a, b = name(), name(), name()
    insert_namespace(db, ns)
    ctx = {"principal": "alice", "groups": ["team-a", "system:authenticated"],
           "request_id": "req-1", "client": "10.0.0.7", "user_agent": "qm/1.0",
           "reason": "scale for the sale", "verb": "create"}  # fmt: skip
    per_row = {f"{ns}/{b}": {"principal": "system:kube-scheduler", "request_id": "cycle-9"}}
    with db.transaction():
        db.execute("SELECT set_config('qm.context', %s, true)", (json.dumps(ctx),))
        db.execute("SELECT set_config('qm.contexts', %s, true)", (json.dumps(per_row),))
        db.execute(
            "INSERT INTO configmaps (uid, namespace, name, spec) VALUES"
            ' (%s, %s, %s, \'{"data": {"k": "v"}}\'), (%s, %s, %s, \'{}\')',
            (uuid.uuid4(), ns, a, uuid.uuid4(), ns, b),
        )
    first, second = rows(db, "table_name = 'configmaps' AND namespace = %s", ns)
    assert (first["name"], first["op"], first["kind"]) == (a, "insert", "ConfigMap")
    assert first["principal"] == "alice"
    assert first["groups"] == ["team-a", "system:authenticated"]
    assert (first["request_id"], first["client_addr"], first["user_agent"]) == (
        "req-1", "10.0.0.7", "qm/1.0")  # fmt: skip
    assert (first["reason"], first["verb"]) == ("scale for the sale", "create")
    assert first["after"]["spec"] == {"data": {"k": "v"}} and first["before"] is None
    assert first["db_role"] == "postgres" and first["xid"] is not None
    assert (second["principal"], second["request_id"]) == ("system:kube-scheduler", "cycle-9")
    # The setting was transaction-local: the next write carries no application context.
    db.execute("UPDATE configmaps SET labels = '{\"x\": \"1\"}' WHERE namespace = %s AND name = %s",
               (ns, a))  # fmt: skip
    (upd,) = rows(db, "table_name = 'configmaps' AND name = %s AND op = 'update'", a)
    assert upd["principal"] is None
    assert upd["before"]["labels"] == {} and upd["after"]["labels"] == {"x": "1"}
    assert set(upd["after"]) == {"labels", "row_version"}
    db.execute("DELETE FROM configmaps WHERE namespace = %s", (ns,))
    deleted = rows(db, "table_name = 'configmaps' AND namespace = %s AND op = 'delete'", ns)
    assert {r["name"] for r in deleted} == {a, b}
    assert all(r["before"]["uid"] and r["after"] is None for r in deleted)


def test_an_unreadable_context_is_kept_as_the_reason_not_a_failed_write(
    db: psycopg.Connection[Any],
) -> None:
    ns = name()
    with db.transaction():
        db.execute("SELECT set_config('qm.context', 'not json', true)")
        insert_namespace(db, ns)
    (row,) = rows(db, "table_name = 'namespaces' AND name = %s", ns)
    assert row["principal"] is None and row["reason"].startswith("unreadable qm.context")


def test_a_secrets_data_never_reaches_the_history(db: psycopg.Connection[Any]) -> None:
    ns, s = name(), name()
    spec = {"type": "Opaque", "data": "sealed:v1:AAAA", "stringData": {"password": "hunter2"}}
    db.execute(
        "INSERT INTO secrets (uid, namespace, name, spec, annotations) VALUES (%s, %s, %s, %s,"
        ' \'{"kubectl.kubernetes.io/last-applied-configuration": "hunter2"}\')',
        (uuid.uuid4(), ns, s, json.dumps(spec)),
    )
    db.execute(
        "UPDATE secrets SET spec = jsonb_set(spec, '{data}', '\"sealed:v1:BBBB\"')"
        " WHERE namespace = %s AND name = %s",
        (ns, s),
    )
    db.execute("DELETE FROM secrets WHERE namespace = %s AND name = %s", (ns, s))
    found = rows(db, "table_name = 'secrets' AND name = %s", s)
    assert [r["op"] for r in found] == ["insert", "update", "delete"]
    text = json.dumps([[r["before"], r["after"]] for r in found])
    for value in ("AAAA", "BBBB", "hunter2"):
        assert value not in text
    # A change of the data still shows, as a change of its digest.
    assert found[1]["before"]["spec"]["data"] != found[1]["after"]["spec"]["data"]
    assert found[1]["after"]["spec"]["data"].startswith("sha256:")


def test_token_digests_are_never_copied(db: psycopg.Connection[Any]) -> None:
    digest = secrets.token_hex(32)
    db.execute(
        "INSERT INTO qm_tokens (username, token_sha256, name) VALUES ('bob', %s, %s)",
        (digest, name()),
    )
    (row,) = rows(db, "table_name = 'qm_tokens' AND after ->> 'username' = 'bob'")
    assert row["kind"] == "Token" and "token_sha256" not in row["after"]
    assert digest not in json.dumps(row["after"])


def test_a_dba_update_by_another_role_is_in_the_history_and_the_stream(
    db_url: str,
    db: psycopg.Connection[Any],
    revisioner_on: Callable[[str], Any],
) -> None:
    ns, dba = name(), f"qm_test_dba_{secrets.token_hex(3)}"
    db.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(dba)))
    db.execute(sql.SQL("GRANT SELECT, UPDATE ON namespaces TO {}").format(sql.Identifier(dba)))
    db.execute(sql.SQL("GRANT USAGE ON SEQUENCE qm_row_version TO {}").format(sql.Identifier(dba)))
    insert_namespace(db, ns)
    with revisioner_on(db_url):
        with psycopg.connect(as_role(db_url, dba), autocommit=True) as by_hand:
            by_hand.execute("SET application_name = 'psql'")
            by_hand.execute(
                'UPDATE namespaces SET labels = \'{"owner": "dba"}\' WHERE name = %s', (ns,)
            )
        (row,) = rows(db, "table_name = 'namespaces' AND name = %s AND op = 'update'", ns)
        assert (row["db_role"], row["application_name"], row["principal"]) == (dba, "psql", None)
        assert row["after"]["labels"] == {"owner": "dba"}
        deadline = time.monotonic() + 30
        streamed = None
        while streamed is None and time.monotonic() < deadline:
            streamed = db.execute(
                "SELECT object::jsonb -> 'metadata' -> 'labels' FROM qm_revision_log"
                " WHERE kind = 'Namespace' AND name = %s AND op = 'M'",
                (ns,),
            ).fetchone()
            time.sleep(0.1)
        assert streamed is not None and streamed[0] == {"owner": "dba"}
        # The revisioner's leader seals it within about a second.
        while time.monotonic() < deadline:
            (sealed,) = rows(db, "id = %s", row["id"])
            if sealed["seq"] is not None:
                break
            time.sleep(0.1)
        assert sealed["seq"] is not None and len(sealed["hash"]) == 32
    assert history.verify(db) is None
    db.execute(sql.SQL("DROP OWNED BY {0}; DROP ROLE {0}").format(sql.Identifier(dba)))


def test_the_application_role_cannot_alter_the_history(
    db_url: str, db: psycopg.Connection[Any]
) -> None:
    ns = name()
    with psycopg.connect(as_role(db_url, "qm_app"), autocommit=True) as app:
        # It writes state, and the trigger records it on its behalf.
        insert_namespace(app, ns)
        for statement in (
            "UPDATE qm_history SET reason = 'x'",
            "DELETE FROM qm_history",
            "TRUNCATE qm_history",
            "INSERT INTO qm_history (table_name, op) VALUES ('pods', 'insert')",
            "UPDATE qm_history_chain SET last_seq = 0",
            "DELETE FROM qm_history_links",
            "DELETE FROM qm_history_tally",
            "SELECT * FROM qm_history_archive(now())",
        ):
            with pytest.raises(errors.InsufficientPrivilege):
                app.execute(statement)
        part = db.execute("SELECT qm_history_partition(now())").fetchone()
        assert part is not None
        for verb in ("DELETE FROM {}", "SELECT FROM {}"):  # a month only through the parent
            with pytest.raises(errors.InsufficientPrivilege):
                app.execute(sql.SQL(verb).format(sql.Identifier(part[0])))
        # What it may do: read the history (migration 0018, for the history read API), seal,
        # and ask whether the chain holds.
        assert app.execute("SELECT count(*) FROM qm_history").fetchone()
        assert app.execute("SELECT count(*) FROM qm_history_links").fetchone()
        assert history.seal_all(app) >= 1
        assert history.verify(app) is None
    (row,) = rows(db, "table_name = 'namespaces' AND name = %s", ns)
    assert row["db_role"] == "qm_app" and row["seq"] is not None


def test_even_the_owner_cannot_update_delete_or_truncate_the_history(
    db: psycopg.Connection[Any],
) -> None:
    insert_namespace(db, name())
    history.seal_all(db)
    for statement in (
        "UPDATE qm_history SET reason = 'x'",
        "DELETE FROM qm_history",
        "TRUNCATE qm_history",
        "UPDATE qm_history_links SET hash = NULL",
        "DELETE FROM qm_history_links",
        "TRUNCATE qm_history_links",
    ):
        with pytest.raises(errors.InsufficientPrivilege, match="append-only"):
            db.execute(statement)
    # Replica mode silences ordinary triggers; these fire always.
    db.execute("SET session_replication_role = replica")
    try:
        with pytest.raises(errors.InsufficientPrivilege, match="append-only"):
            db.execute("DELETE FROM qm_history")
    finally:
        db.execute("RESET session_replication_role")


def test_a_row_changed_after_sealing_is_named_by_verify(
    db_url: str, db: psycopg.Connection[Any]
) -> None:
    ns = name()
    insert_namespace(db, ns)
    db.execute('UPDATE namespaces SET labels = \'{"a": "1"}\' WHERE name = %s', (ns,))
    history.seal_all(db)
    assert history.verify(db) is None
    target = rows(db, "table_name = 'namespaces' AND name = %s AND op = 'update'", ns)[0]
    with db.transaction():  # the superuser, with the guard switched off
        db.execute("ALTER TABLE qm_history DISABLE TRIGGER qm_history_append_only")
        db.execute(
            "UPDATE qm_history SET principal = 'someone-else' WHERE id = %s", (target["id"],)
        )
        db.execute("ALTER TABLE qm_history ENABLE ALWAYS TRIGGER qm_history_append_only")
    broken = history.verify(db)
    assert broken is not None
    assert (broken.id, broken.seq) == (target["id"], target["seq"])
    assert "changed after it was sealed" in broken.problem
    out = subprocess.run(
        [sys.executable, "-m", "app.cli.main", "audit", "verify", "--url", db_url],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert out.returncode == 1, out.stderr
    assert f"seq {target['seq']} (id {target['id']}" in out.stdout
    # Put it back (as the tamperer could not without the original): the chain holds again.
    with db.transaction():
        db.execute("ALTER TABLE qm_history DISABLE TRIGGER qm_history_append_only")
        db.execute("UPDATE qm_history SET principal = NULL WHERE id = %s", (target["id"],))
        db.execute("ALTER TABLE qm_history ENABLE ALWAYS TRIGGER qm_history_append_only")
    assert history.verify(db) is None


def test_a_row_removed_after_sealing_is_named_by_verify(db: psycopg.Connection[Any]) -> None:
    ns = name()
    insert_namespace(db, ns)
    db.execute('UPDATE namespaces SET labels = \'{"b": "1"}\' WHERE name = %s', (ns,))
    history.seal_all(db)
    first, _ = rows(db, "table_name = 'namespaces' AND name = %s", ns)
    db.execute("CREATE TEMP TABLE saved AS SELECT * FROM qm_history WHERE id = %s", (first["id"],))
    with db.transaction():
        db.execute("ALTER TABLE qm_history DISABLE TRIGGER qm_history_append_only")
        db.execute("DELETE FROM qm_history WHERE id = %s", (first["id"],))
        db.execute("ALTER TABLE qm_history ENABLE ALWAYS TRIGGER qm_history_append_only")
    broken = history.verify(db)
    assert broken is not None and (broken.seq, broken.id) == (first["seq"], first["id"])
    assert "removed after it was sealed" in broken.problem
    # Put the row back as it was, so the chain holds again.
    db.execute("INSERT INTO qm_history SELECT * FROM saved")
    assert history.verify(db) is None
    # A link removed from the chain is a gap.
    db.execute("CREATE TEMP TABLE saved_link AS SELECT * FROM qm_history_links WHERE seq = %s",
               (first["seq"],))  # fmt: skip
    with db.transaction():
        db.execute("ALTER TABLE qm_history_links DISABLE TRIGGER qm_history_links_append_only")
        db.execute("DELETE FROM qm_history_links WHERE seq = %s", (first["seq"],))
        db.execute(
            "ALTER TABLE qm_history_links ENABLE ALWAYS TRIGGER qm_history_links_append_only"
        )
    broken = history.verify(db)
    assert broken is not None and broken.seq == first["seq"] + 1
    assert f"seq {first['seq']} to {first['seq']} are missing" in broken.problem
    db.execute("INSERT INTO qm_history_links SELECT * FROM saved_link")
    assert history.verify(db) is None


def test_a_row_added_behind_the_sealer_is_named_by_verify(db: psycopg.Connection[Any]) -> None:
    insert_namespace(db, name())
    history.seal_all(db)
    # A row slipped in with an xid the sealer has already passed (only a superuser can).
    db.execute(
        "INSERT INTO qm_history (xid, table_name, op, db_role) VALUES ('1', 'pods', 'delete', 'x')"
    )
    stray = db.execute("SELECT max(id) FROM qm_history").fetchone()
    assert stray is not None
    history.seal_all(db)
    broken = history.verify(db)
    assert broken is not None and (broken.seq, broken.id) == (None, stray[0])
    assert "not in the chain" in broken.problem
    with db.transaction():
        db.execute("ALTER TABLE qm_history DISABLE TRIGGER qm_history_append_only")
        db.execute("DELETE FROM qm_history WHERE id = %s", (stray[0],))
        db.execute("ALTER TABLE qm_history ENABLE ALWAYS TRIGGER qm_history_append_only")
    assert history.verify(db) is None


def test_sealing_never_updates_a_history_row(db: psycopg.Connection[Any]) -> None:
    for _ in range(3):
        insert_namespace(db, name())
    db.execute("SELECT pg_stat_force_next_flush()")
    before = db.execute(
        "SELECT coalesce(sum(n_tup_upd), 0) FROM pg_stat_user_tables"
        " WHERE relname ~ '^qm_history_([0-9]{6}|default)$'"
    ).fetchone()
    assert history.seal_all(db) >= 3
    db.execute("SELECT pg_stat_force_next_flush()")
    after = db.execute(
        "SELECT coalesce(sum(n_tup_upd), 0) FROM pg_stat_user_tables"
        " WHERE relname ~ '^qm_history_([0-9]{6}|default)$'"
    ).fetchone()
    assert before == after


def test_lease_renewals_and_status_only_writes_are_counted_not_stored(
    db: psycopg.Connection[Any],
) -> None:
    ns, node, pod = name(), name(), name()
    spec = {"holderIdentity": node, "leaseDurationSeconds": 40, "renewTime": "t0"}
    db.execute(
        "INSERT INTO leases (uid, namespace, name, spec) VALUES (%s, %s, %s, %s)",
        (uuid.uuid4(), ns, node, json.dumps(spec)),
    )
    for i in range(25):
        db.execute(
            "UPDATE leases SET spec = jsonb_set(spec, '{renewTime}', to_jsonb(%s::text))"
            " WHERE namespace = %s AND name = %s",
            (f"t{i + 1}", ns, node),
        )
    db.execute(  # a new holder is a milestone
        'UPDATE leases SET spec = spec || \'{"holderIdentity": "other"}\''
        " WHERE namespace = %s AND name = %s",
        (ns, node),
    )
    db.execute(
        "INSERT INTO pods (uid, namespace, name, spec, status) VALUES"
        " (%s, %s, %s, '{}', '{\"phase\": \"Running\"}')",
        (uuid.uuid4(), ns, pod),
    )
    for i in range(10):  # probe results, restarts counted: phase and readiness unchanged
        db.execute(
            "UPDATE pods SET status = jsonb_set(status, '{probe}', to_jsonb(%s::int))"
            " WHERE namespace = %s AND name = %s",
            (i, ns, pod),
        )
    db.execute(  # the pod turns Succeeded: a milestone
        'UPDATE pods SET status = \'{"phase": "Succeeded"}\' WHERE namespace = %s AND name = %s',
        (ns, pod),
    )
    stored = rows(db, "namespace = %s AND op <> 'summary'", ns)
    assert [(r["table_name"], r["op"]) for r in stored] == [
        ("leases", "insert"), ("leases", "update"), ("pods", "insert"), ("pods", "update")
    ]  # fmt: skip
    assert stored[1]["after"]["holder_identity"] == "other"
    assert stored[3]["after"]["phase"] == "Succeeded"
    tallied = dict(
        db.execute(
            "SELECT table_name, sum(count) FROM qm_history_tally WHERE namespace = %s"
            " GROUP BY table_name",
            (ns,),
        ).fetchall()
    )
    assert tallied == {"leases": 25, "pods": 10}
    # The hour ends (moved back here rather than waited for): sealing folds it.
    db.execute("UPDATE qm_history_tally SET hour = hour - interval '1 hour' WHERE namespace = %s",
               (ns,))  # fmt: skip
    history.seal_all(db)
    summaries = rows(db, "namespace = %s AND op = 'summary'", ns)
    assert {r["table_name"]: r["summary_count"] for r in summaries} == {"leases": 25, "pods": 10}
    assert all(r["seq"] is not None for r in summaries)
    assert db.execute("SELECT count(*) FROM qm_history_tally WHERE namespace = %s",
                      (ns,)).fetchone() == (0,)  # fmt: skip
    assert history.verify(db) is None


def test_events_are_counted_and_api_server_heartbeats_too(db: psycopg.Connection[Any]) -> None:
    ns, server = name(), name()
    for i in range(5):
        db.execute(
            "INSERT INTO events (uid, namespace, name, spec) VALUES (%s, %s, %s, '{}')",
            (uuid.uuid4(), ns, f"e{i}"),
        )
    db.execute("DELETE FROM events WHERE namespace = %s", (ns,))
    db.execute("INSERT INTO qm_api_servers (id) VALUES (%s)", (server,))
    for _ in range(3):
        db.execute("UPDATE qm_api_servers SET renewed_at = now() WHERE id = %s", (server,))
    assert rows(db, "table_name = 'events' AND namespace = %s", ns) == []
    assert [r["op"] for r in rows(db, "table_name = 'qm_api_servers' AND name = %s", server)] == [
        "insert"
    ]
    counts = dict(
        db.execute(
            "SELECT table_name, sum(count) FROM qm_history_tally"
            " WHERE (table_name = 'events' AND namespace = %s) OR table_name = 'qm_api_servers'"
            " GROUP BY table_name",
            (ns,),
        ).fetchall()
    )
    assert counts["events"] == 10 and counts["qm_api_servers"] >= 3


def test_a_truncate_records_every_row_it_removes(db_url: str, db: psycopg.Connection[Any]) -> None:
    before = db.execute("SELECT count(*) FROM priorityclasses").fetchone()
    assert before is not None
    for _ in range(3):
        db.execute("INSERT INTO priorityclasses (uid, name) VALUES (%s, %s)",
                   (uuid.uuid4(), name()))  # fmt: skip
    db.execute("TRUNCATE priorityclasses")
    gone = rows(db, "table_name = 'priorityclasses' AND op = 'delete'")
    assert len(gone) == before[0] + 3
    assert all(r["verb"] == "truncate" and r["before"]["name"] for r in gone)


def test_the_previous_release_writing_qm_audit_lends_its_user(db: psycopg.Connection[Any]) -> None:
    ns, cm = name(), name()
    # The statement the previous release sends: the write and its audit row together.
    db.execute(
        """
WITH ins AS (
  INSERT INTO configmaps (uid, namespace, name) VALUES (%s, %s, %s) RETURNING *
), aud AS (
  INSERT INTO qm_audit (username, groups, verb, kind, namespace, name, uid, after)
  SELECT 'carol', '{dev}', 'create', 'ConfigMap', ins.namespace, ins.name, ins.uid, '{}'
    FROM ins
)
SELECT 1""",
        (uuid.uuid4(), ns, cm),
    )
    (row,) = rows(db, "table_name = 'configmaps' AND name = %s", cm)
    assert (row["principal"], row["groups"], row["verb"]) == ("carol", ["dev"], "create")


def test_legacy_audit_rows_are_copied_into_the_history(pg_server_url: str) -> None:
    url = create_database(pg_server_url, f"qm_hist_legacy_{secrets.token_hex(3)}")
    env = {**os.environ, "DATABASE_URL": url}
    env.pop("QM_MIGRATION_DATABASE_URL", None)

    def alembic(*args: str) -> None:
        subprocess.run(
            [sys.executable, "-m", "alembic", *args],
            cwd=ROOT, env=env, check=True, capture_output=True, timeout=300,
        )  # fmt: skip

    alembic("upgrade", "0013")
    with psycopg.connect(url, autocommit=True) as db:
        for i in range(7):
            db.execute(
                "INSERT INTO qm_audit (at, username, verb, kind, namespace, name, after)"
                " VALUES (now() - make_interval(days => %s), 'dave', %s, 'Pod', 'prod', %s, '{}')",
                (40 * (i % 2), "delete" if i == 6 else "create", f"p{i}"),
            )
    alembic("upgrade", "head")
    with psycopg.connect(url, autocommit=True) as db:
        copied = rows(db, "application_name = 'qm_audit'")
        assert [r["name"] for r in copied] == [f"p{i}" for i in range(7)]
        assert {r["table_name"] for r in copied} == {"pods"}
        assert [r["op"] for r in copied][-2:] == ["insert", "delete"]
        assert all(r["principal"] == "dave" for r in copied)
        # A new write gets an id after the copied ones, and sealing chains all of them.
        insert_namespace(db, "after")
        (new,) = rows(db, "table_name = 'namespaces' AND name = 'after'")
        assert new["id"] > max(r["id"] for r in copied)
        assert history.seal_all(db) >= 8
        assert history.verify(db) is None
    alembic("downgrade", "0013")
    with psycopg.connect(url, autocommit=True) as db:
        assert db.execute("SELECT to_regclass('qm_history')").fetchone() == (None,)
        assert db.execute("SELECT count(*) FROM qm_audit").fetchone() == (7,)


def test_the_api_server_exports_the_sealers_lag(api_server: Any) -> None:
    import httpx

    text = httpx.get(f"{api_server.url}/metrics", timeout=30).text
    for metric in ("qm_history_unsealed_rows", "qm_history_seal_lag_seconds",
                   "qm_history_sealed_seq"):  # fmt: skip
        assert f"\n{metric} " in text


def test_a_batch_of_many_writers_is_recorded_once_per_row_with_each_context(
    db: psycopg.Connection[Any],
) -> None:
    ns, n = name(), 2000
    db.execute(
        "INSERT INTO pods (uid, namespace, name, spec, status) SELECT gen_random_uuid(), %s,"
        " 'p' || i, '{}', '{\"phase\": \"Pending\"}' FROM generate_series(1, %s) AS i",
        (ns, n),
    )
    contexts = {f"{ns}/p{i}": {"principal": "system:kube-scheduler", "request_id": f"c-{i}",
                               "reason": f"scheduled onto node n{i % 7}"}
                for i in range(1, n + 1)}  # fmt: skip
    started = time.monotonic()
    with db.transaction():
        db.execute("SELECT set_config('qm.contexts', %s, true)", (json.dumps(contexts),))
        # Binds (stored) and, in the same statement shape, status-only writes (counted).
        db.execute(
            "UPDATE pods SET spec = jsonb_build_object("
            "  'nodeName', 'n' || mod(substr(name, 2)::int, 7)) WHERE namespace = %s",
            (ns,),
        )
        db.execute(
            "UPDATE pods SET status = status || '{\"probe\": 1}' WHERE namespace = %s", (ns,)
        )
    elapsed = time.monotonic() - started
    binds = rows(db, "table_name = 'pods' AND namespace = %s AND op = 'update'", ns)
    assert len(binds) == n
    by_name = {r["name"]: r for r in binds}
    assert by_name["p10"]["request_id"] == "c-10"
    assert by_name["p10"]["reason"] == "scheduled onto node n3"
    assert by_name["p10"]["after"]["node_name"] == "n3"
    counted = db.execute(
        "SELECT sum(count) FROM qm_history_tally WHERE table_name = 'pods' AND namespace = %s",
        (ns,),
    ).fetchone()
    assert counted == (n,)
    # One parse of the contexts per statement, not one per row.
    assert elapsed < 20, elapsed
