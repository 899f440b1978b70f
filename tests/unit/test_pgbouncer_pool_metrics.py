"""The PgBouncer pool metrics (``app.api.pool_metrics``) and the dev PgBouncer's configuration
(``app.devstack.pgbouncer``): pure rendering, no server."""

from __future__ import annotations

import asyncio
from decimal import Decimal
from pathlib import Path

from app.api.pool_metrics import down, metric_lines, render
from app.devstack.pgbouncer import STATS_USER, as_user, config_text, userlist_text

POOLS = [
    {"database": "pgbouncer", "user": "pgbouncer", "cl_active": 1, "sv_idle": 0,
     "maxwait": 0, "maxwait_us": 0, "pool_mode": "statement"},
    {"database": "quaymaster", "user": "qm_app", "cl_active": 3, "cl_waiting": 2,
     "sv_active": 4, "sv_idle": 1, "sv_login": 0, "maxwait": 1, "maxwait_us": 250000,
     "pool_mode": "transaction"},
]  # fmt: skip
STATS = [
    {"database": "pgbouncer", "total_xact_count": Decimal(1)},
    {"database": "quaymaster", "total_xact_count": Decimal(16000), "total_query_count": 16000,
     "total_wait_time": Decimal(286144), "total_server_assignment_count": 7,
     "avg_xact_count": 3939},
]  # fmt: skip


def _samples(lines: list[str]) -> dict[str, float]:
    out = {}
    for line in lines:
        if line.startswith("#"):
            continue
        name, value = line.rsplit(" ", 1)
        out[name] = float(value)
    return out


def test_pools_become_gauges_per_pool_and_state() -> None:
    got = _samples(render(POOLS, []))
    pool = 'database="quaymaster",user="qm_app"'
    assert got["qm_pgbouncer_up"] == 1
    assert got[f'qm_pgbouncer_pool_client_connections{{{pool},state="active"}}'] == 3
    assert got[f'qm_pgbouncer_pool_client_connections{{{pool},state="waiting"}}'] == 2
    assert got[f'qm_pgbouncer_pool_server_connections{{{pool},state="active"}}'] == 4
    assert got[f'qm_pgbouncer_pool_server_connections{{{pool},state="idle"}}'] == 1
    assert got[f"qm_pgbouncer_pool_max_wait_seconds{{{pool}}}"] == 1.25
    assert not any('pgbouncer"' in name for name in got), "the admin console is left out"
    assert not any("pool_mode" in name for name in got)


def test_stats_become_counters_in_seconds_and_unknown_totals_are_kept() -> None:
    lines = render([], STATS)
    got = _samples(lines)
    db = '{database="quaymaster"}'
    assert got[f"qm_pgbouncer_transactions_total{db}"] == 16000
    assert got[f"qm_pgbouncer_queries_total{db}"] == 16000
    assert got[f"qm_pgbouncer_client_wait_seconds_total{db}"] == 0.286144
    assert got[f"qm_pgbouncer_server_assignment_count_total{db}"] == 7
    assert not any("avg" in name for name in got)
    assert "# TYPE qm_pgbouncer_transactions_total counter" in lines


def test_every_family_is_declared_once() -> None:
    lines = render(POOLS, STATS)
    types = [line.split()[2] for line in lines if line.startswith("# TYPE")]
    assert len(types) == len(set(types))
    for line in lines:
        if not line.startswith("#"):
            assert line.split("{")[0].split(" ")[0] in types


def test_no_admin_url_means_no_lines_and_a_dead_console_means_down() -> None:
    assert asyncio.run(metric_lines("")) == []
    # Nothing listens on port 1: the scrape fails at once.
    got = asyncio.run(metric_lines("postgresql://qm_stats@127.0.0.1:1/pgbouncer"))
    assert got == down()


def test_config_pools_transactions_on_loopback() -> None:
    text = config_text(6432, 5432, Path("/state/pgbouncer"), 20)
    assert "pool_mode = transaction" in text
    assert "listen_addr = 127.0.0.1" in text
    assert "* = host=127.0.0.1 port=5432" in text
    assert f"stats_users = {STATS_USER}" in text
    assert "auth_file = /state/pgbouncer/userlist.txt" in text


def test_userlist_names_each_user_once_with_the_stats_user() -> None:
    assert userlist_text(("postgres", "qm_app", "postgres")) == (
        f'"postgres" ""\n"qm_app" ""\n"{STATS_USER}" ""\n'
    )


def test_as_user_keeps_host_port_and_database() -> None:
    assert as_user("postgresql://postgres@127.0.0.1:5432/qm?x=1", "qm_app") == (
        "postgresql://qm_app@127.0.0.1:5432/qm?x=1"
    )
    assert as_user("postgresql://127.0.0.1/qm", "qm_app") == "postgresql://qm_app@127.0.0.1/qm"
