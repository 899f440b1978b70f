"""The discovery benchmark's measurements, each against a running replica and its subscribers.

* ``latency``: single-endpoint readiness changes, spaced apart; from each UPDATE's commit
  returning to each subscriber applying the delta that carries it; and the bytes of those
  one-endpoint deltas as received.
* ``rate_step``: endpoint changes written at a fixed rate (several endpoints per transaction,
  across slices) for a window; whether every subscriber keeps up (sampled lag, and the time
  after the last commit until all hold it), subscriber-deltas/s counted by the subscribers and
  by discovery's ``qm_discovery_subscriber_deltas_total``, and discovery's CPU.
* ``restart``: SIGTERM the replica, optionally change an endpoint while it is down, start it
  again; time from the new process's start and from its ``/healthz`` until every subscriber
  (dialling again every 100-300 ms with the version it holds) holds the new replica's version,
  and whether that came as snapshots or deltas.

Called by ``bench.discovery.run``.
"""

from __future__ import annotations

import asyncio
import random
import time
from typing import Any

import psycopg

from bench.common import median, percentile
from bench.discovery.dataset import Dataset
from bench.discovery.harness import Replica, Workers
from bench.scheduler.run import cpu_seconds

DELTAS = "qm_discovery_subscriber_deltas_total"


def ms(values: list[float], p: float) -> float:
    return round(percentile(values, p) * 1000, 1)


def sizes(counter: dict[int, int]) -> dict[str, Any]:
    flat = sorted(counter.elements()) if hasattr(counter, "elements") else []
    if not flat:
        return {"count": 0}
    return {"count": len(flat), "min": flat[0], "p50": percentile(flat, 50), "max": flat[-1]}


async def latency(ds: Dataset, db: psycopg.AsyncConnection[Any], workers: Workers,
                  subscribers: int, rng: random.Random, changes: int,
                  spacing: tuple[float, float]) -> dict[str, Any]:  # fmt: skip
    before = await workers.stats()
    await workers.all("record", on=True)
    commits: dict[int, float] = {}
    for _ in range(changes):
        seq, sql, params = ds.change(rng)
        await db.execute(sql, params)
        commits[seq] = time.monotonic()
        await asyncio.sleep(rng.uniform(*spacing))
    done = await workers.all("wait_seq", seq=max(commits), timeout=60)
    records = [r for part in await workers.all("record", on=False) for r in part["lat"]]
    after = await workers.stats()
    lat = [t - commits[s] for s, t in records if s in commits]
    one = after["one_sizes"] - before["one_sizes"]
    return {
        "changes": changes,
        "subscribers": subscribers,
        "all_current": all(d["ok"] for d in done),
        "observations": len(lat),
        "expected": changes * subscribers,
        "p50_ms": ms(lat, 50),
        "p99_ms": ms(lat, 99),
        "max_ms": round(max(lat, default=float("nan")) * 1000, 1),
        "per_change_p99_ms": [
            ms([t - commits[s] for s, t in records if s == q], 99) for q in sorted(commits)
        ],
        "one_endpoint_delta_bytes": sizes(one),
        "nacks": after["nacks"] - before["nacks"],
        "snapshots": after["snapshots"] - before["snapshots"],
    }


async def rate_step(ds: Dataset, db: psycopg.AsyncConnection[Any], workers: Workers,
                    replica: Replica, rng: random.Random, rate: float, seconds: float,
                    slices: int, per_slice: int, max_lag: float) -> dict[str, Any]:  # fmt: skip
    """``rate`` endpoint changes/s for ``seconds``, ``slices`` x ``per_slice`` per transaction."""
    per_txn = slices * per_slice
    txns = max(1, round(rate / per_txn * seconds))
    interval = seconds / txns
    commits: dict[int, float] = {}
    samples: list[float] = []
    stop = asyncio.Event()

    async def sampler() -> None:
        while not stop.is_set():
            for part in await workers.all("minseq"):
                nxt = commits.get(part["min_seq"] + 1)
                samples.append(max(0.0, part["t"] - nxt) if nxt is not None else 0.0)
            await asyncio.sleep(0.25)

    pids = [w.proc.pid for w in workers.workers]
    s0, m0, c0 = await workers.stats(), await replica.metrics(), replica.cpu()
    w0 = sum(cpu_seconds(pid) for pid in pids)
    t0 = time.monotonic()
    sampling = asyncio.ensure_future(sampler())
    for i in range(txns):
        delay = t0 + i * interval - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        seq, sql, params = ds.change(rng, slices, per_slice)
        await db.execute(sql, params)
        commits[seq] = time.monotonic()
    t_written = time.monotonic()
    done = await workers.all("wait_seq", seq=max(commits), timeout=60)
    t_end = max(d["t"] for d in done)
    stop.set()
    await sampling
    s1, m1, c1 = await workers.stats(), await replica.metrics(), replica.cpu()
    w1 = sum(cpu_seconds(pid) for pid in pids)
    replica.sample()
    window = t_end - t0
    drain = t_end - commits[max(commits)]
    sub_deltas = s1["endpoint_changes"] - s0["endpoint_changes"]
    disc_deltas = m1.get(DELTAS, 0) - m0.get(DELTAS, 0)
    achieved = txns * per_txn / (t_written - t0)
    lag_max = max([*samples, drain])
    return {
        "target_endpoint_changes_per_s": rate,
        "written_endpoint_changes_per_s": round(achieved, 1),
        "transactions": txns,
        "endpoints_per_transaction": per_txn,
        "window_s": round(window, 2),
        "drain_after_last_commit_s": round(drain, 3),
        "lag_max_s": round(lag_max, 3),
        "lag_p50_s": round(median(samples), 3),
        "subscriber_deltas_per_s": round(sub_deltas / window, 1),
        "discovery_counted_deltas_per_s": round(disc_deltas / window, 1),
        "subscriber_deltas_received": sub_deltas,
        "discovery_deltas_counted": disc_deltas,
        "delta_messages_per_s": round((s1["deltas"] - s0["deltas"]) / window, 1),
        "steps": m1.get("qm_discovery_steps_total", 0) - m0.get("qm_discovery_steps_total", 0),
        "catch_ups": m1.get("qm_discovery_catch_ups_total", 0)
        - m0.get("qm_discovery_catch_ups_total", 0),
        "snapshots": s1["snapshots"] - s0["snapshots"],
        "nacks": s1["nacks"] - s0["nacks"],
        "mib_received_per_s": round((s1["bytes"] - s0["bytes"]) / window / 2**20, 2),
        "discovery_cpu_s": round(c1 - c0, 2),
        "discovery_cpu_pct": round(100 * (c1 - c0) / window, 1),
        "subscriber_processes_cpu_pct": round(100 * (w1 - w0) / window, 1),
        "subscriber_deltas_per_discovery_cpu_s": round(disc_deltas / max(c1 - c0, 0.01)),
        "kept_up": all(d["ok"] for d in done) and lag_max <= max_lag and achieved >= 0.9 * rate,
        "writer_limited": achieved < 0.9 * rate,
    }


async def restart(ds: Dataset, db: psycopg.AsyncConnection[Any], workers: Workers,
                  replica: Replica, rng: random.Random, change_while_down: bool
                  ) -> dict[str, Any]:  # fmt: skip
    m_old = await replica.metrics()
    await workers.all("arm")
    replica.stop()
    if change_while_down:
        _, sql, params = ds.change(rng)
        await db.execute(sql, params)
    replica.start()
    await replica.healthy(120)
    m = await replica.metrics()
    version = int(m["qm_discovery_version"])
    parts = await workers.all("current", version=version, timeout=300)
    m = await replica.metrics()
    replica.sample()
    times = [t for p in parts for t in p["t"]]
    kinds: dict[str, int] = {}
    frame: dict[int, int] = {}
    attempts: dict[int, int] = {}
    for p in parts:
        for k, v in p["kinds"].items():
            kinds[k] = kinds.get(k, 0) + v
        for k, v in p["sizes"].items():
            frame[int(k)] = frame.get(int(k), 0) + v
        for k, v in p["attempts"].items():
            attempts[int(k)] = attempts.get(int(k), 0) + v
    from_start = [t - replica.started_at for t in times]
    return {
        "change_while_down": change_while_down,
        "old_version": int(m_old["qm_discovery_version"]),
        "new_version": version,
        "all_current": all(p["ok"] for p in parts),
        "missing": sum(p["missing"] for p in parts),
        "healthz_after_start_s": round(replica.healthy_at - replica.started_at, 3),
        "all_current_after_start_s": round(max(from_start), 3),
        "all_current_after_healthz_s": round(max(times) - replica.healthy_at, 3),
        "current_after_start_p50_s": round(median(from_start), 3),
        "current_after_start_p99_s": round(percentile(from_start, 99), 3),
        "brought_by": kinds,
        "frame_bytes": {"min": min(frame), "max": max(frame)} if frame else {},
        "snapshots_sent": m.get("qm_discovery_snapshots_total", 0),
        "catch_ups_sent": m.get("qm_discovery_catch_ups_total", 0),
        "dial_attempts": dict(sorted(attempts.items())),
    }
