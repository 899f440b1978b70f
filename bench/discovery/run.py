"""Discovery benchmark: one discovery replica (``python -m app.discovery``) and thousands of
simulated subscribers, each a real TCP connection speaking the protocol with ``Replica`` and
acknowledging every version; then the node proxy's data path.

    python -m bench.discovery.run [--subscribers 1000,10000] [--services 100] [--per-service 10]
                                  [--changes 20] [--runs 3] [--rates 200,400,...] [--skip ...]

A throwaway stack (embedded PostgreSQL migrated with ``alembic upgrade head``, as
:class:`bench.common.Stack` builds it, and a revisioner, ``python -m app.stream``) gets
``--services`` ClusterIP services with one EndpointSlice of ``--per-service`` endpoints each.
Subscribers live in 2 (up to 2,000) or 4 ``bench.discovery.subscribers`` processes on uvloop.
Measured, for each subscriber count:

1. readiness change -> every subscriber holds it: ``--changes`` single-endpoint UPDATEs spaced
   0.5-1 s apart per run, ``--runs`` runs; p50/p99 over subscribers and changes;
2. bytes of each one-endpoint delta as received;
3. (first count only) subscriber-deltas/s: endpoint changes at rising ``--rates`` (10 per
   transaction: 2 in each of 5 slices) for ``--window`` s each, until the subscribers stop
   keeping up (lag > 1 s) or the writer cannot reach the rate;
4. (last count only) ``--runs`` restarts of the replica (SIGTERM, start): with nothing changed
   while it was down, and with one endpoint changed while it was down;

and then 5. the node proxy (``python -m agent.proxy``, host mode): ``bench.discovery.proxy``;
6. a pod's Ready flip -> every subscriber holds it, through the EndpointSlice controller (a
   Celery worker and the dispatcher): ``bench.discovery.pod_freshness``.
Writes ``bench/results/discovery-<stamp>.json`` through ``bench.common.write_result``, every
finished measurement included even when a later one fails, and prints a short table.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import resource
import signal
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from app.stream.revisioner import streaming
from bench.common import Stack, median, write_result
from bench.discovery import measure, pod_freshness, proxy
from bench.discovery.dataset import Dataset
from bench.discovery.harness import Replica, Workers
from bench.scheduler.run import Procs, wait_for

TARGETS = {"p99_ms_at_10000": 1000, "seed_bar_p99_ms": 5000, "delta_bytes": 300,
           "subscriber_deltas_per_s": 50_000}  # fmt: skip


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.discovery.run", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--subscribers", default="1000,10000")
    p.add_argument("--services", type=int, default=100)
    p.add_argument("--per-service", type=int, default=10)
    p.add_argument("--changes", type=int, default=20, help="changes per latency run")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument(
        "--rates",
        default="100,200,300,400,600,800,1200,1600",
        help="endpoint changes/s tried in turn for the throughput step",
    )
    p.add_argument("--rate-subscribers", type=int, default=1000)
    p.add_argument("--window", type=float, default=10.0, help="seconds per rate")
    p.add_argument("--max-lag", type=float, default=1.0, help="seconds a subscriber may lag")
    p.add_argument("--proxy-seconds", type=float, default=5.0)
    p.add_argument(
        "--fresh-changes",
        type=int,
        default=20,
        help="freshness: pod changes to distinct slices per run, 1-2 s apart",
    )
    p.add_argument(
        "--fresh-bursts",
        type=int,
        default=5,
        help="freshness: bursts of 3 changes to one slice 0.3 s apart per run",
    )
    p.add_argument("--skip", default="", help="comma list of latency,rate,restart,proxy,freshness")
    p.add_argument("--seed", type=int, default=1)
    return p.parse_args(argv)


def medians(runs: list[dict[str, Any]], keys: tuple[str, ...]) -> dict[str, Any]:
    return {k: median([r[k] for r in runs if isinstance(r.get(k), int | float)]) for k in keys}


async def bench(args: argparse.Namespace, stack: Stack, procs: Procs, logdir: Path,
                out: dict[str, Any]) -> None:  # fmt: skip
    skip = set(args.skip.split(","))
    rng = random.Random(args.seed)
    env = {"DATABASE_URL": stack.url, "QM_STREAM_DATABASE_URL": stack.url}
    with psycopg.connect(stack.url, autocommit=True) as sync_db:
        rev = procs.start(["-m", "app.stream"], {**env, "QM_HISTORY_SECONDS": "86400"},
                          logdir / "revisioner.log")  # fmt: skip
        wait_for("the revisioner to stream", lambda: streaming(sync_db), 120, [rev])
        ds = Dataset(args.services, args.per_service)
        ds.insert(sync_db)
    db = await psycopg.AsyncConnection.connect(stack.url, autocommit=True)
    replica = Replica(procs, env, logdir / "discovery.log")
    replica.start()
    await replica.healthy()
    counts = [int(c) for c in args.subscribers.split(",")]
    for count in counts:
        out["stage"] = f"connect {count}"
        workers = await Workers.start(2 if count <= 2000 else 4, logdir / f"subs-{count}")
        try:
            seconds = await workers.connect(replica.port, count, f"s{count}")
            snap = (await workers.stats())["snapshot_sizes"]
            entry: dict[str, Any] = {
                "connect_s": round(seconds, 2),
                "snapshot_bytes": max(snap) if snap else None,
            }
            out["by_subscribers"][str(count)] = entry
            print(f"{count} subscribers connected in {seconds:.1f}s", flush=True)
            if "latency" not in skip:
                runs = entry["latency_runs"] = []
                for r in range(args.runs):
                    out["stage"] = f"latency {count} run {r}"
                    runs.append(await measure.latency(ds, db, workers, count, rng, args.changes,
                                                      (0.5, 1.0)))  # fmt: skip
                    x = runs[-1]
                    print(
                        f"  latency run {r}: p50 {x['p50_ms']} ms, p99 {x['p99_ms']} ms, max "
                        f"{x['max_ms']} ms, delta {x['one_endpoint_delta_bytes']}",
                        flush=True,
                    )
                entry["latency"] = medians(runs, ("p50_ms", "p99_ms", "max_ms"))
                entry["latency"]["delta_bytes_p50"] = median(
                    [x["one_endpoint_delta_bytes"].get("p50", float("nan")) for x in runs]
                )
                entry["latency"]["delta_bytes_max"] = max(
                    x["one_endpoint_delta_bytes"].get("max", 0) for x in runs
                )
            if "rate" not in skip and count == args.rate_subscribers:
                steps = out["throughput"]["steps"] = []
                for rate in [float(x) for x in args.rates.split(",")]:
                    out["stage"] = f"rate {rate}"
                    step = await measure.rate_step(ds, db, workers, replica, rng, rate,
                                                   args.window, 5, 2, args.max_lag)  # fmt: skip
                    steps.append(step)
                    print(
                        f"  rate {rate:.0f}/s: written {step['written_endpoint_changes_per_s']}"
                        f"/s, subscriber-deltas/s {step['subscriber_deltas_per_s']} (discovery"
                        f" {step['discovery_counted_deltas_per_s']}), lag max "
                        f"{step['lag_max_s']} s, cpu {step['discovery_cpu_pct']}% (subscribers "
                        f"{step['subscriber_processes_cpu_pct']}%), kept up "
                        f"{step['kept_up']}",
                        flush=True,
                    )
                    if not step["kept_up"]:
                        break
                    await asyncio.sleep(2)
                kept = [s for s in steps if s["kept_up"]]
                out["throughput"]["subscribers"] = count
                out["throughput"]["best_kept_up"] = (
                    max(kept, key=lambda s: s["subscriber_deltas_per_s"]) if kept else None
                )
            if "restart" not in skip and count == counts[-1]:
                restarts = out["restart"]["runs"] = []
                for r in range(args.runs):
                    for changed in (False, True):
                        out["stage"] = f"restart {r} changed={changed}"
                        restarts.append(await measure.restart(ds, db, workers, replica, rng,
                                                              changed))  # fmt: skip
                        x = restarts[-1]
                        print(
                            f"  restart {r} (changed while down: {changed}): healthz "
                            f"{x['healthz_after_start_s']}s, all current after start "
                            f"{x['all_current_after_start_s']}s / after healthz "
                            f"{x['all_current_after_healthz_s']}s, by {x['brought_by']}, "
                            f"frame {x['frame_bytes']}",
                            flush=True,
                        )
                        await asyncio.sleep(3)
                out["restart"]["subscribers"] = count
                keys = ("healthz_after_start_s", "all_current_after_start_s",
                        "all_current_after_healthz_s", "current_after_start_p50_s")  # fmt: skip
                for changed in (False, True):
                    sel = [x for x in restarts if x["change_while_down"] is changed]
                    out["restart"]["changed" if changed else "unchanged"] = medians(sel, keys)
            entry["discovery_peak_rss_mib"] = round(replica.sample(), 1)
        finally:
            await workers.close()
    if "proxy" not in skip:
        out["stage"] = "proxy"
        out["proxy"] = await proxy.measure(db, replica.port, procs, logdir, args.proxy_seconds)
    if "freshness" not in skip:
        out["stage"] = "freshness"
        out["freshness"] = {}
        await pod_freshness.measure(stack.url, Path(stack.tmp), procs, logdir, replica.port,
                                    counts, args, out["freshness"])  # fmt: skip
    await db.close()
    out["stage"] = "done"


def table(out: dict[str, Any]) -> None:
    print("\nfigure                                         value        target")
    for count, e in out["by_subscribers"].items():
        lat = e.get("latency") or {}
        target = "< 1000" if count == "10000" else ""
        print(
            f"change->all hold it, {count:>6} subs p50/p99 ms  {lat.get('p50_ms')}/"
            f"{lat.get('p99_ms')}  {target}"
        )
        print(
            f"one-endpoint delta bytes ({count} subs) p50/max   {lat.get('delta_bytes_p50')}/"
            f"{lat.get('delta_bytes_max')}  <= 300"
        )
    best = out["throughput"].get("best_kept_up")
    if best:
        print(
            f"subscriber-deltas/s kept up (1 process)        {best['subscriber_deltas_per_s']}"
            f" (discovery {best['discovery_counted_deltas_per_s']}, cpu "
            f"{best['discovery_cpu_pct']}%)  >= 50000"
        )
    for k in ("unchanged", "changed"):
        r = out["restart"].get(k)
        if r:
            print(
                f"restart ({k} while down): all current s    start "
                f"{r['all_current_after_start_s']} / healthz {r['all_current_after_healthz_s']}"
            )
    p = out.get("proxy") or {}
    for mode in ("new_connection", "persistent"):
        if mode in p:
            m = p[mode]["median"]
            print(
                f"proxy {mode:15} rps vip/direct, p99 ratio      {m['vip_rps']}/"
                f"{m['direct_rps']} ({m['rps_ratio']}), {m['p99_ratio']}"
            )
    pod_freshness.table(out.get("freshness"))


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    out: dict[str, Any] = {"stage": "start", "by_subscribers": {}, "throughput": {},
                           "restart": {}, "proxy": None}  # fmt: skip
    stack: Stack | None = None
    procs = Procs()
    t0 = time.monotonic()
    try:
        stack = Stack()
        logdir = Path(stack.tmp) / "logs"
        logdir.mkdir(parents=True, exist_ok=True)
        print(f"logs: {logdir}", flush=True)
        out["logs"] = str(logdir)
        uvloop.run(bench(args, stack, procs, logdir, out))
    except BaseException as exc:
        out["error"] = f"{type(exc).__name__} during {out['stage']}: {exc}"
        raise
    finally:
        out["seconds"] = round(time.monotonic() - t0)
        data = {"benchmark": "discovery", "parameters": vars(args), "targets": TARGETS,
                "dataset": {"services": args.services, "endpoints_per_service":
                            args.per_service, "slices": args.services, "namespace": "bench",
                            "endpoints": args.services * args.per_service}, **out}  # fmt: skip
        print(f"wrote {write_result('discovery', data)}", flush=True)
        procs.stop_all()
        if stack is not None:
            stack.close()
        table(out)


if __name__ == "__main__":
    main()
