"""The scheduler benchmark's measurements: from the tables and the revision log after a drain
(when each pod was bound and seen bound, whether any node is over-allocated), and the raw rate
at which ``bind_many`` commits precomputed decisions. ``run.py`` calls them."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from bench.common import percentile

BATCH_NS = "batch-team"
PROD_NS = "prod-team"
RAW_NS = "raw-bind"
BATCH_SIZE = 500  # the scheduler's default --batch-size
IN_FLIGHT = 2  # the scheduler keeps at most two bind transactions in flight


_FIRST_BINDS = """
WITH l AS (
  SELECT uid, revision, committed_at, (object::jsonb)->'spec'->>'nodeName' AS node,
         lag((object::jsonb)->'spec'->>'nodeName')
           OVER (PARTITION BY uid ORDER BY revision) AS prev
    FROM qm_revision_log WHERE kind = 'Pod')
SELECT p.namespace, p.uid, p.creation_timestamp,
       min(l.committed_at) FILTER (WHERE l.node IS NOT NULL AND l.prev IS NULL),
       count(*) FILTER (WHERE l.node IS NOT NULL AND l.prev IS NULL),
       p.bound_at,
       p.node_name
  FROM pods p LEFT JOIN l ON l.uid = p.uid
 GROUP BY p.uid
"""


@dataclass
class Binds:
    """When pods were bound and seen bound, from the tables and the revision log."""

    bind_counts: dict[int, int]  # binds per pod (transitions to bound in the log) -> pods
    batch_bound_at: list[float]  # seconds after the submission started
    all_bound_at: list[float]  # every pod, sorted
    stream_lag: list[float]
    prod_bound: list[float]  # created -> bound
    prod_log: list[float]  # created -> visible in the log
    unbound: int
    n_prod: int

    @property
    def first(self) -> float:
        return self.all_bound_at[0]

    @property
    def last(self) -> float:
        return self.all_bound_at[-1]

    def per_second(self) -> list[int]:
        """All pods by bind commit time, per second since the first bind."""
        counts = [0] * (int(self.last - self.first) + 1)
        for t in self.all_bound_at:
            counts[int(t - self.first)] += 1
        return counts


def collect_binds(db: psycopg.Connection[Any], epoch: datetime) -> Binds:
    # Bound time is pods.bound_at: set by the bind's own UPDATE (database clock), so
    # created-to-bound excludes the stream's lag; "visible" adds the lag until the bind
    # reached the revision log, which is what a watcher sees.
    firsts = db.execute(_FIRST_BINDS).fetchall()
    b = Binds({}, [], [], [], [], [], 0, sum(1 for r in firsts if r[0] == PROD_NS))
    for ns, _uid, created, logged, transitions, bound_at, node in firsts:
        b.bind_counts[transitions] = b.bind_counts.get(transitions, 0) + 1
        if node is None:
            b.unbound += 1
        if bound_at is None:
            continue
        if logged is not None:
            b.stream_lag.append((logged - bound_at).total_seconds())
        if ns == BATCH_NS:
            b.batch_bound_at.append((bound_at - epoch).total_seconds())
        elif ns == PROD_NS:
            b.prod_bound.append((bound_at - created).total_seconds())
            if logged is not None:
                b.prod_log.append((logged - created).total_seconds())
    b.all_bound_at = sorted((r[5] - epoch).total_seconds() for r in firsts if r[5] is not None)
    return b


def check_placements(db: psycopg.Connection[Any], profile: str) -> dict[str, Any]:
    """What the result's ``verify`` reports besides the bind counts, and the production pods'
    zones."""
    over = db.execute(
        """
        SELECT count(*) FROM nodes n
          JOIN (SELECT node_name, sum(req_cpu_milli) cpu, sum(req_memory_bytes) mem,
                       count(*) pods
                  FROM pods WHERE node_name IS NOT NULL GROUP BY node_name) p
            ON p.node_name = n.name
         WHERE p.cpu > n.alloc_cpu_milli OR p.mem > n.alloc_memory_bytes
            OR p.pods > n.alloc_pods
        """
    ).fetchone()[0]
    alloc_mismatch = db.execute(
        """
        SELECT count(*) FROM nodes n JOIN nodes_allocated a ON a.node_uid = n.uid
          LEFT JOIN (SELECT node_name, sum(req_cpu_milli) cpu, count(*) pods FROM pods
                      WHERE node_name IS NOT NULL GROUP BY node_name) p
            ON p.node_name = n.name
         WHERE a.cpu_milli <> coalesce(p.cpu, 0) OR a.pods <> coalesce(p.pods, 0)
        """
    ).fetchone()[0]
    per_node = db.execute(
        "SELECT min(c), max(c) FROM (SELECT n.name, count(p.uid) c FROM nodes n"
        " LEFT JOIN pods p ON p.node_name = n.name GROUP BY n.name) s"
    ).fetchone()
    zones = dict(db.execute(
        "SELECT n.zone, count(*) FROM pods p JOIN nodes n ON n.name = p.node_name"
        " WHERE p.namespace = %s GROUP BY n.zone ORDER BY 1", (PROD_NS,)
    ).fetchall())  # fmt: skip
    affinity_violations = None
    if profile == "affinity":
        affinity_violations = db.execute(
            """
            SELECT count(*) FROM (
              SELECT node_name, coalesce(labels->>'group', labels->>'app') g, count(*) c
                FROM pods WHERE node_name IS NOT NULL GROUP BY 1, 2 HAVING count(*) > 1) s
            """
        ).fetchone()[0]
    return {
        "over": over,
        "alloc_mismatch": alloc_mismatch,
        "per_node": per_node,
        "zones": zones,
        "affinity_violations": affinity_violations,
    }


def round_robin(db: psycopg.Connection[Any], wanted: int) -> list[tuple[str, str]]:
    """Up to ``wanted`` (node uid, name) decisions: one pod per node per pass over the nodes,
    only where a batch pod still fits."""
    room = [
        [str(r[0]), r[1], int(r[2])]
        for r in db.execute(
            "SELECT n.uid, n.name, least(n.alloc_pods - a.pods,"
            " (n.alloc_cpu_milli - a.cpu_milli) / 100,"
            " (n.alloc_memory_bytes - a.memory_bytes) / (256 * 1048576))"
            " FROM nodes n JOIN nodes_allocated a ON a.node_uid = n.uid ORDER BY n.name"
        ).fetchall()
    ]
    nodes: list[tuple[str, str]] = []
    while len(nodes) < wanted and any(r[2] > 0 for r in room):
        for r in room:
            if r[2] > 0 and len(nodes) < wanted:
                nodes.append((r[0], r[1]))
                r[2] -= 1
    return nodes


# -- the raw bind rate --------------------------------------------------------------------------
async def raw_binds(url: str, pods: list[tuple[str, int, int, int]],
                    nodes: list[tuple[str, str]]) -> dict[str, Any]:  # fmt: skip
    """``bind_many`` over precomputed decisions: batches of 500, two transactions in flight."""
    from datetime import UTC, datetime

    from app.scheduler.binder import Bind, bind_many
    from app.store.db import create_pool

    binds = []
    for i, (uid, row_version, cpu, mem) in enumerate(pods):
        node_uid, node_name = nodes[i]
        binds.append(
            Bind(uid, RAW_NS, f"r{i}", row_version, node_uid, node_name, cpu, mem, 0, True)
        )
    batches = [binds[i : i + BATCH_SIZE] for i in range(0, len(binds), BATCH_SIZE)]
    pool = await create_pool(url, min_size=IN_FLIGHT, max_size=IN_FLIGHT)
    bound = 0
    refused = 0
    seconds: list[float] = []

    async def worker() -> None:
        nonlocal bound, refused
        async with pool.acquire() as conn:
            while batches:
                batch = batches.pop(0)
                t = time.perf_counter()
                result = await bind_many(conn, batch, datetime.now(UTC))
                seconds.append(time.perf_counter() - t)
                bound += len(result.bound)
                refused += len(result.stale) + len(result.no_room)

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(IN_FLIGHT)))
    elapsed = time.perf_counter() - t0
    await pool.close()
    return {
        "binds": bound,
        "refused": refused,
        "seconds": round(elapsed, 3),
        "binds_per_s": round(bound / elapsed, 1),
        "batch_commit_p50_ms": round(percentile(seconds, 50) * 1000, 1),
        "batch_commit_p99_ms": round(percentile(seconds, 99) * 1000, 1),
    }
