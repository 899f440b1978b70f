"""PgBouncer's pool statistics as Prometheus metrics on the API servers' ``/metrics`` (ADR 0057).

Requests reach PostgreSQL through PgBouncer; whether its pools keep up (clients waiting for a
server connection, how long the longest has waited, transactions and wait time per database)
is read from its admin console, ``SHOW POOLS`` and ``SHOW STATS``. There is no maintained
exporter to depend on, so each API server exports them itself when
``QM_PGBOUNCER_ADMIN_URL`` names the console (a ``stats_users`` login on the ``pgbouncer``
virtual database); unset, nothing is scraped and no line is added.

:func:`metric_lines` runs on every scrape of ``/metrics``: one short connection, two
statements on the simple query protocol (the console knows no other), a 2-second budget.
:func:`render` turns the rows into exposition lines and does no I/O.

The columns differ between PgBouncer versions, so they are mapped by name: every ``cl_*``
column of ``SHOW POOLS`` is a client-connection state, every ``sv_*`` a server-connection
state, and every ``total_*`` column of ``SHOW STATS`` a counter; the ``avg_*`` columns are
left out (rates of the counters give them). The console's own database is left out too.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Mapping, Sequence
from typing import Any

import psycopg

from app.core.metrics import format_labels, format_value

log = logging.getLogger(__name__)

ADMIN_URL_ENV = "QM_PGBOUNCER_ADMIN_URL"
SCRAPE_TIMEOUT_S = 2.0
ADMIN_DATABASE = "pgbouncer"
PREFIX = "qm_pgbouncer"

Row = Mapping[str, Any]

# SHOW STATS counters kept in seconds or bytes rather than PgBouncer's microseconds.
_STATS: dict[str, tuple[str, float, str]] = {
    "total_xact_count": ("transactions_total", 1.0, "transactions pooled"),
    "total_query_count": ("queries_total", 1.0, "queries pooled"),
    "total_received": ("received_bytes_total", 1.0, "bytes received from clients"),
    "total_sent": ("sent_bytes_total", 1.0, "bytes sent to clients"),
    "total_xact_time": ("transaction_seconds_total", 1e-6, "time spent in transactions"),
    "total_query_time": ("query_seconds_total", 1e-6, "time spent in queries"),
    "total_wait_time": ("client_wait_seconds_total", 1e-6, "time clients waited for a server"),
}


def _number(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _pools(rows: Sequence[Row]) -> list[str]:
    clients: list[str] = []
    servers: list[str] = []
    waits: list[str] = []
    for row in rows:
        if row.get("database") == ADMIN_DATABASE:
            continue
        db, user = str(row.get("database")), str(row.get("user"))
        for column, value in row.items():
            n = _number(value)
            if n is None or column[:3] not in ("cl_", "sv_"):
                continue
            labels = format_labels(("database", "user", "state"), (db, user, column[3:]))
            target = clients if column.startswith("cl_") else servers
            target.append(f"{PREFIX}_pool_{'client' if target is clients else 'server'}"
                          f"_connections{labels} {format_value(n)}")  # fmt: skip
        wait = (_number(row.get("maxwait")) or 0.0) + (_number(row.get("maxwait_us")) or 0.0) / 1e6
        labels = format_labels(("database", "user"), (db, user))
        waits.append(f"{PREFIX}_pool_max_wait_seconds{labels} {format_value(wait)}")
    return [
        f"# HELP {PREFIX}_pool_client_connections Client connections per pool and state.",
        f"# TYPE {PREFIX}_pool_client_connections gauge",
        *clients,
        f"# HELP {PREFIX}_pool_server_connections Server connections per pool and state.",
        f"# TYPE {PREFIX}_pool_server_connections gauge",
        *servers,
        f"# HELP {PREFIX}_pool_max_wait_seconds How long the oldest waiting client has waited.",
        f"# TYPE {PREFIX}_pool_max_wait_seconds gauge",
        *waits,
    ]


def _stats(rows: Sequence[Row]) -> list[str]:
    series: dict[str, list[str]] = {}
    helps: dict[str, str] = {}
    for row in rows:
        if row.get("database") == ADMIN_DATABASE:
            continue
        labels = format_labels(("database",), (str(row.get("database")),))
        for column, value in row.items():
            n = _number(value)
            if n is None or not column.startswith("total_"):
                continue
            name, scale, text = _STATS.get(
                column, (column.removeprefix("total_") + "_total", 1.0, column)
            )
            helps[name] = text
            series.setdefault(name, []).append(f"{PREFIX}_{name}{labels} {format_value(n * scale)}")
    lines: list[str] = []
    for name, samples in series.items():
        lines += [f"# HELP {PREFIX}_{name} PgBouncer SHOW STATS: {helps[name]}.",
                  f"# TYPE {PREFIX}_{name} counter", *samples]  # fmt: skip
    return lines


def render(pools: Sequence[Row], stats: Sequence[Row]) -> list[str]:
    """Exposition lines for one scrape's ``SHOW POOLS`` and ``SHOW STATS`` rows."""
    up = [f"# TYPE {PREFIX}_up gauge", f"{PREFIX}_up 1"]
    return up + _pools(pools) + _stats(stats)


def down() -> list[str]:
    """The lines of a failed scrape: only ``qm_pgbouncer_up 0``."""
    return [f"# TYPE {PREFIX}_up gauge", f"{PREFIX}_up 0"]


async def scrape(admin_url: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``SHOW POOLS`` and ``SHOW STATS`` rows from PgBouncer's admin console."""
    async with await psycopg.AsyncConnection.connect(
        admin_url,
        autocommit=True,
        cursor_factory=psycopg.AsyncClientCursor,  # the simple query protocol
        connect_timeout=int(SCRAPE_TIMEOUT_S),
    ) as conn:
        result = []
        for command in ("SHOW POOLS", "SHOW STATS"):
            cur = await conn.execute(command)
            names = [d.name for d in cur.description or ()]
            result.append([dict(zip(names, r, strict=True)) for r in await cur.fetchall()])
        return result[0], result[1]


async def metric_lines(admin_url: str | None = None) -> list[str]:
    """The PgBouncer lines of ``/metrics``: none without an admin URL, ``up 0`` when the
    console does not answer within the budget."""
    url = admin_url if admin_url is not None else os.environ.get(ADMIN_URL_ENV, "")
    if not url:
        return []
    try:
        pools, stats = await asyncio.wait_for(scrape(url), SCRAPE_TIMEOUT_S)
    except (TimeoutError, OSError, psycopg.Error) as exc:
        log.warning("PgBouncer statistics unavailable: %s", exc)
        return down()
    return render(pools, stats)
