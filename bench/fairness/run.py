"""Fairness benchmark: two API servers on one database; one principal floods creates and
expensive lists at full speed over both while a second team does ordinary reads, writes and
a watch in its own namespace at a modest rate.

    python -m bench.fairness.run [--runs 5] [--seconds 96] [--slice 12] [--team-rate 20]
                                 [--flood-workers 64] [--preload 1000]

A throwaway stack (embedded PostgreSQL migrated with ``alembic upgrade head``, as
:class:`bench.common.Stack` builds it) and two ``python -m app.api`` servers at their default
flow-control settings. The flooder (``bench.fairness.flooder``, its own process) lists a
namespace of ``--preload`` ConfigMaps (a list of 1,000 objects costs 10 seats) and creates
ConfigMaps in another, ignoring ``Retry-After``. The team (``bench.fairness.team``) sends
get, list, create, update and delete in turn to alternating servers, and keeps a watch.

Each of ``--runs`` runs lasts ``--seconds``, cut into ``--slice``-second slices: the team runs
throughout, the flood only in every other slice, so quiet and flooded samples are interleaved
and the machine's other load (it is shared) weighs on both alike. A request is counted in its
slice by the time it was sent, leaving out the first ``--guard`` seconds of each flooded slice
(the flood starting) and the first ``--quiet-guard`` seconds of each quiet one (the flood's
queued requests still being served or refused after it stopped sending: by default the
servers' queue wait limit and a second). Reported per run
and as medians over runs: the team's p50/p99 of all its requests and of its watch's
deliveries, quiet and under flood, and their ratio within the run (target: p99 within 1.5x of
quiet; bar 2x); the flooder's accepted and rejected requests per second of flooding; the most
seats the flooder held and requests it had queued across both servers (sampled from
``/metrics``) against one server's share of its level. Also the in-process cost of admission
per request, and for comparison the round trip a shared counter per request would add (a
``SELECT 1`` on the same PostgreSQL). Writes ``bench/results/fairness-<stamp>.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from app.api.fairness import env_config
from app.core import fairness as core
from bench.common import ROOT, Stack, median, percentile, write_result
from bench.fairness.cluster import API, flow_figures, start_servers, tenant
from bench.fairness.cpu import CpuSampler
from bench.fairness.team import Team

TARGETS = {"p99_ratio": 1.5, "p99_ratio_bar": 2.0}


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.fairness.run", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--seconds", type=float, default=96.0, help="per run")
    p.add_argument("--slice", type=float, default=12.0, help="seconds per quiet or flood slice")
    p.add_argument("--guard", type=float, default=3.0, help="seconds left out of a flood slice")
    p.add_argument("--quiet-guard", type=float, default=None,
                   help="seconds left out of a quiet slice (the queue wait limit + 1)")  # fmt: skip
    p.add_argument("--team-rate", type=float, default=20.0, help="team requests per second")
    p.add_argument("--flood-workers", type=int, default=64)
    p.add_argument("--preload", type=int, default=1000, help="objects in the flooded list")
    return p.parse_args(argv)


def summary(lat: dict[str, list[float]]) -> dict[str, Any]:
    requests = [x for op, xs in lat.items() if op != "watch_event" for x in xs]
    events = lat.get("watch_event", [])
    ms = 1000.0
    return {
        "requests": len(requests),
        "p50_ms": percentile(requests, 50) * ms,
        "p99_ms": percentile(requests, 99) * ms,
        "watch_events": len(events),
        "watch_p50_ms": percentile(events, 50) * ms,
        "watch_p99_ms": percentile(events, 99) * ms,
        "by_op_p99_ms": {op: percentile(xs, 99) * ms for op, xs in sorted(lat.items())},
    }


async def preload(api: httpx.AsyncClient, url: str, admin: str, ns: str, n: int) -> None:
    auth = {"Authorization": f"Bearer {admin}"}
    sem = asyncio.Semaphore(16)

    async def one(i: int) -> None:
        async with sem:
            body = {"metadata": {"name": f"big-{i}"}, "data": {"k": "v" * 200}}
            r = await api.post(f"{url}{API}/namespaces/{ns}/configmaps", headers=auth, json=body)
            assert r.status_code in (201, 409), r.text

    await asyncio.gather(*(one(i) for i in range(n)))


async def sample_seats(
    api: httpx.AsyncClient, urls: list[str], out: list[tuple[float, float]]
) -> None:
    """Every 0.25 s, the seats the flooder holds and its queued requests across all servers."""
    while True:
        figs = await asyncio.gather(*(flow_figures(api, u, "flooder") for u in urls))
        out.append((sum(f["in_use"] for f in figs), sum(f["queued"] for f in figs)))
        await asyncio.sleep(0.25)


def slices(
    start: float, slice_s: float, guard_s: float, quiet_guard_s: float
) -> Callable[[float], str | None]:
    """Label of a request sent at ``t``: even slices quiet, odd ones flooded; the first
    ``guard_s`` of a flooded slice (the flood starting) and ``quiet_guard_s`` of a quiet one
    (the flood's queue draining) left out."""

    def label(t: float) -> str | None:
        k, within = divmod(t - start, slice_s)
        flooded = int(k) % 2 == 1
        if k < 0 or within < (guard_s if flooded else quiet_guard_s):
            return None
        return "flood" if flooded else "quiet"

    return label


async def one_run(
    args: argparse.Namespace, api: httpx.AsyncClient, team: Team, urls: list[str], flood: str,
    cpu: CpuSampler,
) -> dict[str, Any]:  # fmt: skip
    load = os.getloadavg()[0]  # the machine is shared: how busy it was, for the reader
    start = time.monotonic() + 3.0  # the flooder's process and connections are up by then
    flooder = subprocess.Popen(
        [sys.executable, "-m", "bench.fairness.flooder", "--urls", ",".join(urls),
         f"--token={flood}", "--start", repr(start), "--seconds", str(args.seconds),
         "--slice", str(args.slice), "--workers", str(args.flood_workers)],
        cwd=ROOT, stdout=subprocess.PIPE,
    )  # fmt: skip
    seats: list[tuple[float, float]] = []
    label = slices(start, args.slice, args.guard, args.quiet_guard)
    cpu.reset(flooder.pid)
    samplers = [asyncio.ensure_future(sample_seats(api, urls, seats)),
                asyncio.ensure_future(cpu.run(label))]  # fmt: skip
    lat = await team.run(start, args.seconds, args.team_rate, label)
    for sampler in samplers:
        sampler.cancel()
    await asyncio.gather(*samplers, return_exceptions=True)
    out, _ = await asyncio.get_running_loop().run_in_executor(None, flooder.communicate)
    counts = json.loads(out.decode().strip().splitlines()[-1])
    secs = counts.pop("seconds")
    quiet, flooded = summary(lat.get("quiet", {})), summary(lat.get("flood", {}))
    accepted = counts.get("create_accepted", 0) + counts.get("list_accepted", 0)
    rejected = counts.get("create_rejected", 0) + counts.get("list_rejected", 0)
    return {
        "loadavg_1m": [load, os.getloadavg()[0]],
        "quiet": quiet,
        "flood": flooded,
        "team_failures": dict(team.failures),
        "p50_ratio": flooded["p50_ms"] / quiet["p50_ms"],
        "p99_ratio": flooded["p99_ms"] / quiet["p99_ms"],
        "watch_p99_ratio": flooded["watch_p99_ms"] / quiet["watch_p99_ms"],
        "cpu_cores": cpu.cores(),
        "flooder": {
            "counts": counts,
            "flooding_seconds": secs,
            "accepted_per_s": accepted / secs,
            "rejected_per_s": rejected / secs,
            "creates_accepted_per_s": counts.get("create_accepted", 0) / secs,
            "lists_accepted_per_s": counts.get("list_accepted", 0) / secs,
            "max_seats_across_servers": max((x[0] for x in seats), default=0.0),
            "max_queued_across_servers": max((x[1] for x in seats), default=0.0),
        },
    }


def admission_cost_us(n: int = 200_000) -> float:
    """Microseconds of the pure dispatcher per admitted and released request."""
    d = core.Dispatcher(core.seat_limits(400, 2))
    t0 = time.perf_counter()
    for i in range(n):
        d.release(d.offer(core.GLOBAL_DEFAULT, f"u{i % 8}", 1, float(i)), float(i))
    return (time.perf_counter() - t0) / n * 1e6


async def shell_cost_us(n: int = 50_000) -> float:
    """Microseconds of :meth:`FlowControl.seat` (the context manager, no queuing)."""
    from app.api.fairness import FlowControl
    from app.store.tokens import User

    control = FlowControl(400, core.Config(), None)
    user = User("alice", ("system:authenticated",))
    t0 = time.perf_counter()
    for _ in range(n):
        async with control.seat(user, 1):
            pass
    return (time.perf_counter() - t0) / n * 1e6


def api_pids() -> list[int]:
    """The API servers this process started (``python -m app.api``)."""
    return [p.pid for p in psutil.Process().children()
            if "app.api" in p.cmdline()]  # fmt: skip


async def round_trip_us(db_url: str, n: int = 2000) -> float:
    conn = await asyncpg.connect(db_url)
    try:
        t0 = time.perf_counter()
        for _ in range(n):
            await conn.fetchval("SELECT 1")
        return (time.perf_counter() - t0) / n * 1e6
    finally:
        await conn.close()


async def bench(args: argparse.Namespace, stack: Stack, logs: Path) -> dict[str, Any]:
    env = {**os.environ, "DATABASE_URL": stack.url, "QM_STREAM_DATABASE_URL": stack.url,
           "QM_BOOTSTRAP_TOKEN": stack.token, "PYTHONUNBUFFERED": "1"}  # fmt: skip
    env.pop("QM_BROKER_URL", None)
    servers = start_servers(env, stack.token, 2, logs)
    urls = [s.url for s in servers]
    cpu = CpuSampler(api_pids(), stack.pg.pid if stack.pg else None)
    total, config, _ = env_config(env)
    if args.quiet_guard is None:
        args.quiet_guard = config.wait_limit + 1.0
    limits = httpx.Limits(max_connections=100, max_keepalive_connections=100)
    try:
        async with httpx.AsyncClient(timeout=60, limits=limits) as api:
            api.base_url = httpx.URL(urls[0])
            flood = await tenant(stack.url, api, stack.token, "flooder", "flood")
            await tenant(stack.url, api, stack.token, "flooder", "flood-writes")
            token = await tenant(stack.url, api, stack.token, "team-b", "team-b")
            await preload(api, urls[0], stack.token, "flood", args.preload)
            team = Team(api, urls, token, "team-b")
            await team.seed(20)
            runs = []
            for i in range(args.runs):
                runs.append(await one_run(args, api, team, urls, flood, cpu))
                r = runs[-1]
                print(f"run {i + 1}: team p99 quiet {r['quiet']['p99_ms']:.1f} ms, flood "
                      f"{r['flood']['p99_ms']:.1f} ms (x{r['p99_ratio']:.2f}); flooder "
                      f"{r['flooder']['accepted_per_s']:.0f} accepted/s, "
                      f"{r['flooder']['rejected_per_s']:.0f} rejected/s", flush=True)  # fmt: skip
    finally:
        for s in servers:
            s.stop()

    def med(path: list[str]) -> float:
        values = []
        for r in runs:
            v: Any = r
            for k in path:
                v = v[k]
            values.append(float(v))
        return median(values)

    one_server = core.seat_limits(total, 1)[core.GLOBAL_DEFAULT]
    return {
        "runs": runs,
        "median": {
            "quiet_p50_ms": med(["quiet", "p50_ms"]),
            "quiet_p99_ms": med(["quiet", "p99_ms"]),
            "flood_p50_ms": med(["flood", "p50_ms"]),
            "flood_p99_ms": med(["flood", "p99_ms"]),
            "p50_ratio": med(["p50_ratio"]),
            "p99_ratio": med(["p99_ratio"]),
            "watch_quiet_p99_ms": med(["quiet", "watch_p99_ms"]),
            "watch_flood_p99_ms": med(["flood", "watch_p99_ms"]),
            "watch_p99_ratio": med(["watch_p99_ratio"]),
            "flooder_accepted_per_s": med(["flooder", "accepted_per_s"]),
            "flooder_rejected_per_s": med(["flooder", "rejected_per_s"]),
            "flooder_max_seats_across_servers": med(["flooder", "max_seats_across_servers"]),
            "flooder_max_queued_across_servers": med(["flooder", "max_queued_across_servers"]),
            "cpu_cores": {
                which: {g: med(["cpu_cores", which, g]) for g in runs[0]["cpu_cores"][which]}
                for which in runs[0]["cpu_cores"]
            },
        },
        "one_server_share_of_level": one_server,
        "settings": {
            "seats": total,
            "queue_length": config.queue_length,
            "queue_wait_s": config.wait_limit,
            "flow_rate_per_seat": config.rate_per_seat,
            "servers": 2,
            **vars(args),
        },
        "admission_cost_us": {
            "dispatcher": admission_cost_us(),
            "seat_context": await shell_cost_us(),
            "postgres_round_trip_for_comparison": await round_trip_us(stack.url),
        },
    }


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    stack = Stack()
    try:
        result = asyncio.run(bench(args, stack, Path(stack.tmp) / "logs"))
    finally:
        stack.close()
    m = result["median"]
    result["targets"] = TARGETS
    result["target_met"] = m["p99_ratio"] <= TARGETS["p99_ratio"]
    result["bar_met"] = m["p99_ratio"] <= TARGETS["p99_ratio_bar"]
    path = write_result("fairness", result)
    print(json.dumps(m, indent=2))
    print(f"p99 ratio {m['p99_ratio']:.2f} (target {TARGETS['p99_ratio']}, bar "
          f"{TARGETS['p99_ratio_bar']}); flooder held at most "
          f"{m['flooder_max_seats_across_servers']:.0f} seats across both servers, one "
          f"server's share {result['one_server_share_of_level']}; wrote {path}")  # fmt: skip


if __name__ == "__main__":
    main()
