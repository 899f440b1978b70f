"""What one lease renewal costs the API server and PostgreSQL, measured below saturation.

    python -m bench.agents.renew_cost [--nodes 2000] [--seconds 20] [--runs 3] [--idle 10]
                                      [--client raw|httpx] [--label before]

The hollow-node benchmark (:mod:`bench.agents.run`) saturates the machine, so its CPU shares say
where the time goes but not what one renewal costs. Here the same hollow nodes
(:mod:`bench.agents.hollow`, the agent's own requests) renew on the same evenly spread schedule, but
few enough of them (2,000 nodes every 10 s: 200 renewals/s) that nothing queues. No pods are
started and no node status is rewritten during the windows, so every write the servers see is
a lease ``PUT``.

First an idle window (the lease loop not yet started) measures what the API server, its
revisioner child and PostgreSQL burn doing nothing (housekeeping, the watch cache's poll);
then ``--runs`` windows of ``--seconds`` under load. Reported per window and as medians:
renewals/s, p50/p99 latency, and CPU-milliseconds per renewal of the API server, of its
revisioner, of PostgreSQL (postmaster and backends) and of the load generator (this process),
both gross and net of the idle rate, and the load generator's CPU-ms per HTTP request (every
answer counted, conflicts' re-reads included). ``--client httpx`` runs the hollow nodes on
``httpx.AsyncClient`` pools (the load generator before :mod:`bench.agents.http_pool`) for
comparison.
Writes ``bench/results/agents-renew-cost-<stamp>.json``; ``--label`` names the code measured.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import uvloop

from bench.agents.cpu import Meter
from bench.agents.load import Load
from bench.agents.run import ms, start_api
from bench.common import Stack, median, write_result
from bench.scheduler.run import Procs

PARTS = ("api0", "api0_revisioner", "postgres", "loadgen")
SERVER_PARTS = PARTS[:3]


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.agents.renew_cost", description=__doc__)
    p.add_argument("--nodes", type=int, default=2000)
    p.add_argument("--renew-every", type=float, default=10.0)
    p.add_argument("--seconds", type=float, default=20.0, help="length of one window")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--idle", type=float, default=10.0, help="length of the idle window")
    p.add_argument("--settle", type=float, default=5.0, help="seconds of load before window 1")
    p.add_argument("--connections", type=int, default=32)
    p.add_argument("--pool", type=int, default=4, help="connections per httpx client")
    p.add_argument("--client", choices=("raw", "httpx"), default="raw")
    p.add_argument("--label", default="", help="what code is measured (kept in the JSON)")
    return p.parse_args(argv)


def per_renewal(cpu: dict[str, Any], idle: dict[str, float], renewals: int, wall: float
                ) -> dict[str, float]:  # fmt: skip
    """CPU-ms per renewal of each part, gross and with the idle rate taken off."""
    out: dict[str, float] = {}
    n = max(renewals, 1)
    for part in PARTS:
        used = cpu[part]["seconds"]
        out[f"{part}_ms"] = round(1000 * used / n, 3)
        out[f"{part}_net_ms"] = round(1000 * (used - idle[part] * wall) / n, 3)
    out["api_plus_pg_ms"] = round(sum(out[f"{p}_ms"] for p in SERVER_PARTS), 3)
    out["api_plus_pg_net_ms"] = round(sum(out[f"{p}_net_ms"] for p in SERVER_PARTS), 3)
    return out


async def bench(args: argparse.Namespace, stack: Stack, procs: Procs, logdir: Path
                ) -> dict[str, Any]:  # fmt: skip
    url, pid = start_api(stack, procs, logdir)
    load = Load(stack.token, args.nodes, connections=args.connections, pool=args.pool,
                client=args.client, renew_every=args.renew_every,
                node_status_every=1e9)  # fmt: skip
    load.use_servers([url])
    register_s = await load.register()
    print(f"registered {args.nodes} nodes in {register_s:.1f}s", flush=True)
    meter = Meter([pid], stack.pg.pid if stack.pg else None, os.getpid())
    await asyncio.sleep(args.settle)
    meter.mark()
    await asyncio.sleep(args.idle)
    idle_cpu = meter.read()
    idle = {p: idle_cpu[p]["seconds"] / args.idle for p in PARTS}
    print(f"idle cpu %: { {p: round(100 * v, 1) for p, v in idle.items()} }", flush=True)
    load.start()
    runs: list[dict[str, Any]] = []
    try:
        await asyncio.sleep(args.settle)
        for r in range(args.runs):
            t = time.monotonic()
            codes0 = load.codes()
            meter.mark()
            rec = await load.window(args.seconds, [])
            cpu = meter.read()
            wall = time.monotonic() - t
            answered = load.codes()
            answered.subtract(codes0)
            requests = sum(answered.values())
            codes = {k: v for k, v in load.codes().items() if k not in ("200", "201")}
            run = {
                "renewals_per_s": round(rec.renew_ok / args.seconds, 1),
                "renewals_due": rec.fired,
                "loop_lag_max_ms": round(1000 * rec.tick_lag_max, 1),
                "renewals_failed": rec.renew_failed,
                "renewals_missed": rec.missed,
                "renew_p50_ms": ms(rec.renew_latency, 50),
                "renew_p99_ms": ms(rec.renew_latency, 99),
                **per_renewal(cpu, idle, rec.renew_ok, wall),
                "requests": requests,
                "loadgen_ms_per_request": round(
                    1000 * cpu["loadgen"]["seconds"] / max(requests, 1), 3
                ),
                "cpu_pct": {k: v["pct"] for k, v in cpu.items()},
                "http_errors_so_far": codes,
            }
            print(
                f"  run {r}: {run['renewals_per_s']}/s ({rec.fired} due, loop late "
                f"{run['loop_lag_max_ms']} ms) p50 {run['renew_p50_ms']} ms p99 "
                f"{run['renew_p99_ms']} ms; cpu-ms/renewal api {run['api0_ms']} revisioner "
                f"{run['api0_revisioner_ms']} postgres {run['postgres_ms']} loadgen "
                f"{run['loadgen_ms']} ({run['loadgen_ms_per_request']} per request)",
                flush=True,
            )
            runs.append(run)
    finally:
        await load.stop()
    keys = [k for k, v in runs[0].items() if isinstance(v, int | float)]
    return {
        "setup": {"register_s": round(register_s, 1)},
        "idle_cpu_pct": {p: round(100 * v, 1) for p, v in idle.items()},
        "runs": runs,
        "median": {k: median([r[k] for r in runs]) for k in keys},
    }


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    logdir = Path(tempfile.mkdtemp(prefix="qm-bench-renew-"))
    stack = Stack()
    procs = Procs()
    try:
        out = uvloop.run(bench(args, stack, procs, logdir))
    finally:
        procs.stop_all()
        stack.close()
    data = {"benchmark": "agents-renew-cost", "params": vars(args),
            "loadavg_at_end": os.getloadavg(), **out,
            "logs": str(logdir)}  # fmt: skip
    print(f"median: {out['median']}")
    print(f"wrote {write_result('agents-renew-cost', data)}")


if __name__ == "__main__":
    main()
