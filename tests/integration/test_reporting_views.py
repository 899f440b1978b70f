"""The reporting views' figures on a seeded cluster, each checked against an independent query
(the allocation triggers' ``nodes_allocated``, plain counts over the tables) or the seed itself.

Read as the database owner here; what a reporting login may see is test_reporting_access.py's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row
from reporting_seed import Seed, seed_cluster


@pytest.fixture(scope="module")
def seeded(make_database: Callable[[str], str]) -> Iterator[tuple[str, Seed]]:
    url = make_database("qm_report")
    yield url, seed_cluster(url)


def rows(url: str, sql: str, *args: Any) -> list[dict[str, Any]]:
    with psycopg.connect(url, row_factory=dict_row) as db:
        return db.execute(sql, args).fetchall()


def test_every_view_and_column_is_described(seeded: tuple[str, Seed]) -> None:
    url, _ = seeded
    views = rows(
        url,
        "SELECT c.relname, obj_description(c.oid, 'pg_class') AS doc,"
        " c.reloptions FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE n.nspname = 'reporting' AND c.relkind = 'v'",
    )
    assert len(views) >= 12
    for view in views:
        assert view["doc"], view["relname"]
        assert "security_invoker=true" in view["reloptions"], view["relname"]
    bare = rows(
        url,
        "SELECT c.relname, a.attname FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid"
        " JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'reporting'"
        " AND c.relkind IN ('v', 'r') AND a.attnum > 0 AND NOT a.attisdropped"
        " AND col_description(c.oid, a.attnum) IS NULL",
    )
    assert bare == []


def test_allocation_matches_the_allocation_triggers(seeded: tuple[str, Seed]) -> None:
    url, _ = seeded
    by_node = rows(
        url,
        "SELECT node_name, sum(pods) AS pods, sum(cpu_milli) AS cpu, sum(memory_bytes) AS mem"
        " FROM reporting.allocation GROUP BY 1 ORDER BY 1",
    )
    kept = rows(
        url,
        "SELECT n.name AS node_name, a.pods, a.cpu_milli AS cpu, a.memory_bytes AS mem"
        " FROM nodes_allocated a JOIN nodes n ON n.uid = a.node_uid WHERE a.pods > 0 ORDER BY 1",
    )
    assert by_node == kept
    # And against the seed: a1 + a2 on n1 (a4 finished, a5 evicted); b1 + b3 on n2.
    team = {
        (r["team"], r["zone"], r["node_name"]): (r["pods"], r["cpu_milli"])
        for r in rows(url, "SELECT * FROM reporting.allocation")
    }
    assert team == {("alpha", "z1", "n1"): (2, 750), ("team-b", "z2", "n2"): (2, 1200)}


def test_node_capacity(seeded: tuple[str, Seed]) -> None:
    url, _ = seeded
    got = {r["node"]: r for r in rows(url, "SELECT * FROM reporting.node_capacity")}
    assert got["n1"]["alloc_cpu_milli"] == 4000 and got["n1"]["requested_cpu_milli"] == 750
    assert float(got["n1"]["cpu_fraction"]) == 0.1875
    assert got["n1"]["unschedulable"] is True  # cordoned by the drain
    assert got["n2"]["ready"] is False and got["n2"]["pods"] == 2
    kept = rows(
        url,
        "SELECT n.name, a.pods, a.cpu_milli, a.memory_bytes FROM nodes_allocated a"
        " JOIN nodes n ON n.uid = a.node_uid",
    )
    for k in kept:
        node = got[k["name"]]
        assert (node["pods"], node["requested_cpu_milli"], node["requested_memory_bytes"]) == (
            k["pods"],
            k["cpu_milli"],
            k["memory_bytes"],
        )


def test_pending_pods_by_reason(seeded: tuple[str, Seed]) -> None:
    url, _ = seeded
    pending = {
        r["name"]: r["reason"] for r in rows(url, "SELECT name, reason FROM reporting.pending_pods")
    }
    assert pending == {"a3": "Unschedulable", "b2": "NotYetScheduled", "b3": "WaitingForNode"}
    counted = rows(
        url,
        "SELECT namespace, count(*) AS pods FROM pods WHERE phase = 'Pending'"
        " AND deletion_timestamp IS NULL GROUP BY 1 ORDER BY 1",
    )
    summed = rows(
        url,
        "SELECT namespace, sum(pods) AS pods FROM reporting.pending_pods_by_reason"
        " GROUP BY 1 ORDER BY 1",
    )
    assert summed == counted
    (a3,) = rows(url, "SELECT * FROM reporting.pending_pods_by_reason WHERE namespace = 'team-a'")
    assert a3["reason"] == "Unschedulable" and a3["under_1m"] == 1
    assert a3["oldest_seconds"] >= 0


def test_workloads_desired_against_actual(seeded: tuple[str, Seed]) -> None:
    url, seed = seeded
    got = {(r["kind"], r["name"]): r for r in rows(url, "SELECT * FROM reporting.workloads")}
    web = got["Deployment", "web"]
    assert (web["desired"], web["current"], web["ready"], web["live_pods"]) == (3, 2, 2, 2)
    assert web["converged"] is False
    (owned,) = rows(
        url,
        "SELECT count(*) AS n FROM pods WHERE owner_references @> %s::jsonb"
        " AND deletion_timestamp IS NULL AND phase NOT IN ('Succeeded', 'Failed')",
        f'[{{"uid": "{seed.uids["web-1"]}"}}]',
    )
    assert got["ReplicaSet", "web-1"]["live_pods"] == owned["n"] == 2
    job = got["Job", "batch"]
    assert (job["desired"], job["succeeded"], job["live_pods"]) == (3, 1, 1)  # the DBA's 3


def test_rollout_history_and_changes(seeded: tuple[str, Seed]) -> None:
    url, _ = seeded
    history = rows(
        url,
        "SELECT revision, replicaset, current, changed_by, reason FROM reporting.rollout_history"
        " WHERE deployment = 'web' ORDER BY revision",
    )
    assert history == [
        {"revision": 1, "replicaset": "web-1", "current": False, "changed_by": "carol",
         "reason": "first release"},
        {"revision": 2, "replicaset": "web-2", "current": True, "changed_by": "alice",
         "reason": "roll out web:2"},
    ]  # fmt: skip
    changes = rows(
        url,
        "SELECT change, principal, reason FROM reporting.rollout_changes"
        " WHERE deployment = 'web' ORDER BY at",
    )
    assert [(c["change"], c["principal"]) for c in changes] == [
        ("created", "carol"),
        ("template", "alice"),
    ]


def test_evictions_and_who_drained(seeded: tuple[str, Seed]) -> None:
    url, seed = seeded
    (ev,) = rows(url, "SELECT * FROM reporting.evictions")
    assert ev["pod"] == "a5" and str(ev["pod_uid"]) == seed.uids["a5"] and ev["node"] == "n1"
    assert ev["cause"] == "EvictionByEvictionAPI"
    assert (ev["principal"], ev["reason"], ev["request_id"]) == (
        "bob",
        "kernel upgrade on n1",
        "req-drain",
    )
    (cordon,) = rows(
        url,
        "SELECT principal, reason, changed_fields FROM reporting.changes"
        " WHERE kind = 'Node' AND name = 'n1' AND op = 'update'",
    )
    assert cordon["principal"] == "bob" and "unschedulable" in cordon["changed_fields"]


def test_node_failures(seeded: tuple[str, Seed]) -> None:
    url, _ = seeded
    (failure,) = rows(url, "SELECT * FROM reporting.node_failures")
    assert failure["node"] == "n2" and failure["ready_status"] == "Unknown"
    assert failure["condition_reason"] == "NodeStatusUnknown"
    assert failure["recovered_at"] is None
    assert failure["principal"] == "system:controller:node-lifecycle"


def test_quota_usage_and_budget_blocks(seeded: tuple[str, Seed]) -> None:
    url, _ = seeded
    quota = {r["resource"]: r for r in rows(url, "SELECT * FROM reporting.quota_usage")}
    assert float(quota["requests.cpu"]["used_fraction"]) == 0.375
    assert float(quota["pods"]["used_amount"]) == 3
    (pdb,) = rows(url, "SELECT * FROM reporting.disruption_budget_blocks")
    assert pdb["blocking"] is True and pdb["refused_evictions"] == 3
    assert pdb["last_message"] == "Cannot evict pod as it would violate the budget"


def test_a_dba_update_shows_its_role_and_no_principal(seeded: tuple[str, Seed]) -> None:
    url, _ = seeded
    (change,) = rows(
        url,
        "SELECT principal, db_role, changed_fields, before->'spec'->'completions' AS was"
        " FROM reporting.changes WHERE kind = 'Job' AND op = 'update'",
    )
    assert change["principal"] is None and change["db_role"] == "postgres"
    assert change["was"] == 2 and "spec" in change["changed_fields"]


def test_who_drained_which_node_and_why(seeded: tuple[str, Seed]) -> None:
    url, _ = seeded
    (drain,) = rows(url, "SELECT * FROM reporting.drains")
    assert (drain["node"], drain["request_id"], drain["principal"], drain["reason"]) == (
        "n1",
        "req-drain",
        "bob",
        "kernel upgrade on n1",
    )
    assert drain["cordoned"] is True and drain["pods_evicted"] == 1
