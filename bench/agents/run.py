"""Hollow-node benchmark: 10,000 simulated agents' lease renewals, node status and pod status
writes against real API server processes and PostgreSQL on this machine.

    python -m bench.agents.run [--nodes 10000] [--seconds 60] [--runs 3] [--servers 1,2]
                               [--status-rate 60] [--renew-every 10] [--client raw|httpx]
                               [--usage-every 10] [--usage-pods 10] [--profile]

One throwaway stack (embedded PostgreSQL migrated with ``alembic upgrade head``, as
:class:`bench.common.Stack` builds it; no PgBouncer, which that stack does not use; an embedded
Redis for the usage store) and API server processes started here (``python -m app.api``, each
with its revisioner child: one holds the lock, the others wait). Setup, not timed: every hollow
node registers through the API (``GET``/``POST`` node, ``GET``/``PUT`` status, ``POST``
lease). From then on every node renews its lease every 10 s spread evenly (1,000 renewals/s at
10,000 nodes), rewrites its full status every 5 minutes (33/s) and reports the usage of
``--usage-pods`` pods every ``--usage-every`` seconds (1,000 reports/s; 0 turns them off),
until the end. For each server count (1, then 2: node ``i`` talks to server ``i % n``) the
benchmark runs ``--runs`` windows of ``--seconds``; before each window it waits ``--settle``
seconds; during it, it starts that window's pods (created bound to hollow nodes before the
lease loop started, not timed) at ``--status-rate / 2`` per second on the ``sim`` runtime (two
status writes each).

Reported per window and as medians: renewals/s achieved against the target, renewals late by
more than 1 s or missed (the previous one still in flight), renewal latency p50/p99/max,
status write and usage report latency p50/p99, CPU-seconds and % of a core of each API server
process, of its revisioner child, of PostgreSQL (postmaster and every backend), of Redis and of
this load generator,
the load generator's CPU-ms per request, and answers by HTTP status. ``--profile`` adds one extra
window with py-spy sampling the (first) API server. The hollow nodes talk through
:class:`bench.agents.http_pool.HttpPool` on uvloop; ``--client httpx`` puts them back on
``httpx.AsyncClient`` (the load generator measured before) for comparison.

Writes ``bench/results/agents-<stamp>.json`` whatever happens: every finished window is kept,
and a run stopped by Ctrl-C or by an error records where and why in ``"error"``.
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

import httpx
import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from app.core import collector
from app.devstack.redis import EmbeddedRedis
from bench.agents import profile
from bench.agents.cpu import Meter
from bench.agents.load import Load, Recorder
from bench.common import Stack, free_port, machine, median, percentile, write_result
from bench.scheduler.run import Procs


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.agents.run", description=__doc__)
    p.add_argument("--nodes", type=int, default=10_000)
    p.add_argument("--seconds", type=float, default=60.0, help="length of one window")
    p.add_argument("--runs", type=int, default=3, help="windows per server count")
    p.add_argument("--servers", default="1,2", help="API server counts to measure")
    p.add_argument("--status-rate", type=float, default=60.0, help="pod status writes/s")
    p.add_argument("--renew-every", type=float, default=10.0)
    p.add_argument("--node-status-every", type=float, default=300.0)
    p.add_argument(
        "--usage-every",
        type=float,
        default=10.0,
        help="seconds between a node's usage reports (0: none)",
    )
    p.add_argument("--usage-pods", type=int, default=10, help="pods in each usage report")
    p.add_argument("--connections", type=int, default=32, help="keep-alive per server")
    p.add_argument("--pool", type=int, default=4, help="connections per httpx client")
    p.add_argument("--client", choices=("raw", "httpx"), default="raw")
    p.add_argument("--settle", type=float, default=10.0, help="seconds between pods and window")
    p.add_argument("--profile", action="store_true", help="py-spy one extra window")
    p.add_argument("--py-spy", default=None, help="path of py-spy (default: from PATH)")
    return p.parse_args(argv)


def start_api(stack: Stack, procs: Procs, logdir: Path, redis_url: str = "") -> tuple[str, int]:
    """An API server on a free port; ``redis_url`` is the usage store (none: reports 503)."""
    port = free_port()
    env = {"DATABASE_URL": stack.url, "QM_BOOTSTRAP_TOKEN": stack.token, "QM_API_PORT": str(port)}
    if redis_url:
        env["QM_USAGE_REDIS_URL"] = redis_url
    proc = procs.start(["-m", "app.api", "--port", str(port)], env, logdir / f"api-{port}.log")
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the API server exited; see {logdir}/api-{port}.log")
        try:
            if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                return url, proc.pid
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError("the API server did not become ready")


def ms(values: list[float], p: float) -> float:
    return round(percentile(values, p) * 1000, 1)


def summarize(rec: Recorder, args: argparse.Namespace, cpu: dict[str, Any],
              codes: dict[str, int]) -> dict[str, Any]:  # fmt: skip
    target = args.nodes / args.renew_every
    due = target * args.seconds
    rate = rec.renew_ok / args.seconds
    requests = sum(v for k, v in codes.items() if k.isdigit())  # every answer the servers gave
    return {
        "renewals_per_s": round(rate, 1),
        "renewals_target_per_s": round(target, 1),
        "renewals_due": rec.fired,
        "loop_lag_max_ms": round(1000 * rec.tick_lag_max, 1),
        "renewals_ok": rec.renew_ok,
        "renewals_failed": rec.renew_failed,
        "renewals_late_over_1s": rec.late,
        "renewals_missed": rec.missed,
        # sustained: 99% of the renewals due in the window done, 99% of those on time
        "sustained": rec.renew_ok >= 0.99 * due and rec.late <= 0.01 * max(rec.renew_ok, 1),
        "renew_p50_ms": ms(rec.renew_latency, 50),
        "renew_p99_ms": ms(rec.renew_latency, 99),
        "renew_max_ms": round(max(rec.renew_latency, default=float("nan")) * 1000, 1),
        "pod_status_writes_per_s": round(len(rec.status_latency) / args.seconds, 1),
        "pod_status_p50_ms": ms(rec.status_latency, 50),
        "pod_status_p99_ms": ms(rec.status_latency, 99),
        "pods_started": rec.pods_started,
        "pods_ready": rec.pods_ready,
        "node_status_writes_per_s": round(len(rec.node_status_latency) / args.seconds, 1),
        "node_status_p50_ms": ms(rec.node_status_latency, 50),
        "node_status_p99_ms": ms(rec.node_status_latency, 99),
        "node_status_failed": rec.node_status_failed,
        "usage_reports_per_s": round(len(rec.usage_latency) / args.seconds, 1),
        "usage_p50_ms": ms(rec.usage_latency, 50),
        "usage_p99_ms": ms(rec.usage_latency, 99),
        "usage_failed": rec.usage_failed,
        "failures": dict(rec.failures),
        "http_errors": {k: v for k, v in codes.items() if k not in ("200", "201")},
        "requests_per_s": round(requests / args.seconds, 1),
        "loadgen_ms_per_request": round(1000 * cpu["loadgen"]["seconds"] / max(requests, 1), 3),
        "cpu": cpu,
    }


def medians(runs: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in runs[0].items():
        if isinstance(value, bool):
            out[key] = sum(r[key] for r in runs) >= (len(runs) + 1) // 2
        elif isinstance(value, int | float):
            out[key] = median([r[key] for r in runs])
    out["cpu_pct"] = {k: median([r["cpu"][k]["pct"] for r in runs]) for k in runs[0]["cpu"]}
    return out


async def measured_window(load: Load, meter: Meter, args: argparse.Namespace, tag: str,
                          pods: list[dict[str, Any]], spy: tuple[str, int, Path] | None = None
                          ) -> dict[str, Any]:  # fmt: skip
    await asyncio.sleep(args.settle)
    codes0 = load.codes()
    sampler = profile.record(spy[0], spy[1], args.seconds, spy[2]) if spy else None
    meter.mark()
    rec = await load.window(args.seconds, pods)
    cpu = meter.read()
    if sampler is not None:
        await asyncio.to_thread(sampler.wait, 60)
    codes = load.codes()
    codes.subtract(codes0)
    out = summarize(rec, args, cpu, {k: v for k, v in codes.items() if v})
    print(f"  {tag}: {out['renewals_per_s']}/s renewals (p99 {out['renew_p99_ms']} ms, late "
          f"{out['renewals_late_over_1s']}, missed {out['renewals_missed']}); pod status "
          f"{out['pod_status_writes_per_s']}/s; usage {out['usage_reports_per_s']}/s (p99 "
          f"{out['usage_p99_ms']} ms); cpu % "
          f"{ {k: v['pct'] for k, v in cpu.items()} }", flush=True)  # fmt: skip
    return out


async def bench(args: argparse.Namespace, stack: Stack, procs: Procs, logdir: Path,
                out: dict[str, Any], redis: EmbeddedRedis) -> None:  # fmt: skip
    """Fill ``out`` as the run goes (setup, then each window as it ends), so whatever
    stops the run, what was measured is there to write."""
    counts = [int(c) for c in args.servers.split(",")]
    servers: list[tuple[str, int]] = [start_api(stack, procs, logdir, redis.url)]
    load = Load(stack.token, args.nodes, connections=args.connections, pool=args.pool,
                client=args.client, renew_every=args.renew_every,
                node_status_every=args.node_status_every, usage_every=args.usage_every,
                usage_pods=args.usage_pods)  # fmt: skip
    load.use_servers([servers[0][0]])
    out["stage"] = "register"
    register_s = await load.register()
    out["setup"] = {"register_s": round(register_s, 1)}
    print(f"registered {args.nodes} nodes in {register_s:.1f}s", flush=True)
    # Every window's pods are created now, before the lease loop starts: at 1,000 renewals/s
    # a saturated server would make creating them between windows take minutes.
    windows = [f"s{n}r{r}" for n in counts for r in range(args.runs)]
    windows += [f"s{counts[0]}prof"] if args.profile else []
    per_window = max(0, round(args.status_rate / 2 * args.seconds))
    t = time.monotonic()
    pods = {w: await load.create_pods(w, per_window) for w in windows}
    pods_s = time.monotonic() - t
    print(f"created {per_window * len(windows)} pods in {pods_s:.1f}s", flush=True)
    out["setup"]["create_pods_s"] = round(pods_s, 1)
    # Ten thousand nodes' and their pods' objects: without this, full collections stall this
    # loop for up to a quarter of a second and the stalls count as late renewals.
    collector.settle()
    young = asyncio.create_task(collector.keep_collections_young())
    load.start()
    results: list[dict[str, Any]] = out["configs"]
    try:
        for n in counts:
            while len(servers) < n:
                servers.append(await asyncio.to_thread(start_api, stack, procs, logdir, redis.url))
            load.use_servers([u for u, _ in servers[:n]])
            meter = Meter(
                [pid for _, pid in servers[:n]],
                stack.pg.pid if stack.pg else None,
                os.getpid(),
                redis.pid,
            )
            print(f"{n} API server(s):", flush=True)
            runs: list[dict[str, Any]] = []
            results.append({"api_servers": n, "runs": runs})
            for r in range(args.runs):
                tag = out["stage"] = f"s{n}r{r}"
                runs.append(await measured_window(load, meter, args, tag, pods[tag]))
                results[-1]["median"] = medians(runs)
            spy_path = profile.find_py_spy(args.py_spy)
            if args.profile and out["profile"] is None and spy_path:
                raw = logdir / "api.pyspy.txt"
                spy = (spy_path, servers[0][1], raw)
                await measured_window(load, meter, args, f"s{n}prof", pods[f"s{n}prof"], spy)
                out["profile"] = {"api_servers": n, **profile.summarize(raw.read_text())}
        out["stage"] = "done"
    finally:
        young.cancel()
        t = time.monotonic()
        left = await load.stop()
        out["stop"] = {"seconds": round(time.monotonic() - t, 1), "tasks_left": left}
        print(f"stopped the load in {out['stop']['seconds']}s", flush=True)


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    logdir = Path(tempfile.mkdtemp(prefix="qm-bench-agents-"))
    params = {k: v for k, v in vars(args).items() if k != "py_spy"}
    out: dict[str, Any] = {"stage": "start", "setup": {}, "configs": [], "profile": None}
    stack: Stack | None = None
    procs = Procs()
    redis = EmbeddedRedis(logdir / "redis")
    try:
        redis.start()
        stack = Stack()
        uvloop.run(bench(args, stack, procs, logdir, out, redis))
    except BaseException as exc:  # Ctrl-C included: keep what was measured, then re-raise
        out["error"] = f"{type(exc).__name__} during {out['stage']}: {exc}"
        raise
    finally:
        data = {"benchmark": "agents", "machine": machine(), "params": params,
                **out, "logs": str(logdir)}  # fmt: skip
        print(f"wrote {write_result('agents', data)}", flush=True)
        procs.stop_all()
        redis.stop()
        if stack is not None:
            stack.close()


if __name__ == "__main__":
    main()
