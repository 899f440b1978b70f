"""The node proxy's data path: short exchanges through a service VIP vs. straight to a backend.

``measure`` (called by ``bench.discovery.run``) writes one ClusterIP service whose EndpointSlice
lists three small asyncio servers on 127.0.0.2-4 (``serve``, one process on uvloop), starts
``python -m agent.proxy`` in host mode against the benchmark's discovery replica, waits until
the VIP answers, then runs the load generator (``load``, its own uvloop process) alternately
against one backend directly and against the VIP, in the same run: ``--concurrency`` clients,
each doing 64-byte request / 64-byte response exchanges, either on a new connection per
exchange or on one persistent connection. Reported: exchanges/s and p50/p99 latency of each,
and VIP/direct ratios (medians of ``runs`` alternations), plus the proxy's CPU.

Run alone (for a quick look): ``python -m bench.discovery.proxy serve --hosts ... --port P`` and
``python -m bench.discovery.proxy load --target HOST:PORT --mode new|keep``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
import uvloop

from bench.common import ROOT, free_port, median, percentile
from bench.scheduler.run import Procs, cpu_seconds

SIZE = 64
REQUEST = b"GET / HTTP/1.1\r\nHost: echo\r\n\r\n".ljust(SIZE, b" ")
RESPONSE = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n".ljust(SIZE, b" ")
BACKENDS = ("127.0.0.2", "127.0.0.3", "127.0.0.4")
NS = "bench-proxy"


# -- the backends and the load generator (each its own process) ------------------------------
async def _serve(hosts: list[str], port: int) -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            while True:
                await reader.readexactly(SIZE)
                writer.write(RESPONSE)
        writer.close()

    servers = [await asyncio.start_server(handle, h, port, backlog=1024) for h in hosts]
    await asyncio.gather(*(s.serve_forever() for s in servers))


async def _load(host: str, port: int, mode: str, concurrency: int, seconds: float
                ) -> dict[str, Any]:  # fmt: skip
    lat: list[float] = []
    errors = 0
    t_end = time.monotonic() + seconds

    async def client() -> None:
        nonlocal errors
        conn: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        while time.monotonic() < t_end:
            t = time.monotonic()
            try:
                if conn is None:
                    conn = await asyncio.open_connection(host, port)
                conn[1].write(REQUEST)
                await conn[0].readexactly(SIZE)
                if mode == "new":
                    conn[1].close()
                    conn = None
                lat.append(time.monotonic() - t)
            except (OSError, asyncio.IncompleteReadError):
                errors += 1
                conn = None
        if conn is not None:
            conn[1].close()

    t0 = time.monotonic()
    await asyncio.gather(*(client() for _ in range(concurrency)))
    wall = time.monotonic() - t0
    return {"exchanges": len(lat), "rps": round(len(lat) / wall, 1), "errors": errors,
            "p50_ms": round(percentile(lat, 50) * 1000, 3),
            "p99_ms": round(percentile(lat, 99) * 1000, 3)}  # fmt: skip


# -- the measurement --------------------------------------------------------------------------
async def _exchange(host: str, port: int) -> bool:
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), 1)
        writer.write(REQUEST)
        await asyncio.wait_for(reader.readexactly(SIZE), 1)
        writer.close()
        return True
    except (OSError, TimeoutError, asyncio.IncompleteReadError):
        return False


async def _run_load(target: tuple[str, int], mode: str, concurrency: int, seconds: float
                    ) -> dict[str, Any]:  # fmt: skip
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bench.discovery.proxy", "load", "--target",
        f"{target[0]}:{target[1]}", "--mode", mode, "--concurrency", str(concurrency),
        "--seconds", str(seconds), cwd=ROOT, stdout=asyncio.subprocess.PIPE)  # fmt: skip
    out, _ = await proc.communicate()
    return dict(json.loads(out))


async def measure(db: psycopg.AsyncConnection[Any], discovery_port: int, procs: Procs,
                  logdir: Path, seconds: float, runs: int = 3,
                  concurrencies: tuple[int, ...] = (1, 16)) -> dict[str, Any]:  # fmt: skip
    port = free_port()
    svc = {"type": "ClusterIP", "selector": {"app": "echo"},
           "ports": [{"name": "http", "port": 8080, "targetPort": port}]}  # fmt: skip
    eps = [{"addresses": [h], "conditions": {"ready": True, "serving": True, "terminating": False},
            "nodeName": "local-a", "zone": "", "targetRef": {"kind": "Pod", "namespace": NS,
            "name": f"echo-{i}"}} for i, h in enumerate(BACKENDS)]  # fmt: skip
    slice_spec = {"addressType": "IPv4", "endpoints": eps,
                  "ports": [{"name": "http", "port": port, "protocol": "TCP"}]}  # fmt: skip
    labels = json.dumps({"kubernetes.io/service-name": "echo"})
    async with db.transaction():
        cur = await db.execute(
            "INSERT INTO services (uid, namespace, name, spec) VALUES (%s, %s, 'echo', %s)"
            " RETURNING spec->>'clusterIP'", (uuid.uuid4(), NS, json.dumps(svc)))  # fmt: skip
        row = await cur.fetchone()
        assert row is not None
        await db.execute(
            "INSERT INTO endpointslices (uid, namespace, name, labels, spec) VALUES"
            " (%s, %s, 'echo-1', %s, %s)",
            (uuid.uuid4(), NS, labels, json.dumps(slice_spec)),
        )
    vip = (str(row[0]), 8080)
    direct = (BACKENDS[0], port)
    backends = procs.start(["-m", "bench.discovery.proxy", "serve", "--hosts", ",".join(BACKENDS),
                            "--port", str(port)], {}, logdir / "backends.log")  # fmt: skip
    prox = procs.start(["-m", "agent.proxy", "--node-name", "local-a", "--discovery",
                        f"127.0.0.1:{discovery_port}", "--state-dir",
                        str(logdir / "proxy-state")], {}, logdir / "proxy.log")  # fmt: skip
    result: dict[str, Any] = {"vip": f"{vip[0]}:{vip[1]}", "backends": list(BACKENDS),
                              "seconds": seconds, "runs": runs}  # fmt: skip
    try:
        t0 = time.monotonic()
        while not (await _exchange(*direct) and await _exchange(*vip)):
            if time.monotonic() - t0 > 60 or prox.poll() is not None:
                raise RuntimeError(f"the proxy never forwarded {vip}; see {logdir}/proxy.log")
            await asyncio.sleep(0.1)
        result["vip_ready_s"] = round(time.monotonic() - t0, 2)
        for mode, name in (("new", "new_connection"), ("keep", "persistent")):
            for c in concurrencies:
                rows = []
                for _ in range(runs):
                    d = await _run_load(direct, mode, c, seconds)
                    c0 = cpu_seconds(prox.pid)
                    v = await _run_load(vip, mode, c, seconds)
                    v["proxy_cpu_pct"] = round(100 * (cpu_seconds(prox.pid) - c0) / seconds, 1)
                    rows.append({"direct": d, "vip": v})
                key = name if c == max(concurrencies) else f"{name}_c{c}"
                result[key] = {
                    "concurrency": c,
                    "runs": rows,
                    "median": {
                        "direct_rps": median([r["direct"]["rps"] for r in rows]),
                        "vip_rps": median([r["vip"]["rps"] for r in rows]),
                        "rps_ratio": round(
                            median([r["vip"]["rps"] / r["direct"]["rps"] for r in rows]), 3
                        ),
                        "direct_p50_ms": median([r["direct"]["p50_ms"] for r in rows]),
                        "vip_p50_ms": median([r["vip"]["p50_ms"] for r in rows]),
                        "p50_ratio": round(
                            median([r["vip"]["p50_ms"] / r["direct"]["p50_ms"] for r in rows]), 3
                        ),
                        "direct_p99_ms": median([r["direct"]["p99_ms"] for r in rows]),
                        "vip_p99_ms": median([r["vip"]["p99_ms"] for r in rows]),
                        "p99_ratio": round(
                            median([r["vip"]["p99_ms"] / r["direct"]["p99_ms"] for r in rows]), 3
                        ),
                        "proxy_cpu_pct": median([r["vip"]["proxy_cpu_pct"] for r in rows]),
                        "errors": sum(r["vip"]["errors"] + r["direct"]["errors"] for r in rows),
                    },
                }
                m = result[key]["median"]
                print(f"  proxy {key}: direct {m['direct_rps']}/s p50 {m['direct_p50_ms']} ms p99"
                      f" {m['direct_p99_ms']} ms; vip {m['vip_rps']}/s p50 {m['vip_p50_ms']} ms"
                      f" p99 {m['vip_p99_ms']} ms; ratios {m['rps_ratio']}, {m['p50_ratio']}, "
                      f"{m['p99_ratio']}", flush=True)  # fmt: skip
    finally:
        procs.stop(prox)
        procs.stop(backends)
    return result


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.discovery.proxy")
    sub = p.add_subparsers(dest="what", required=True)
    s = sub.add_parser("serve")
    s.add_argument("--hosts", default=",".join(BACKENDS))
    s.add_argument("--port", type=int, required=True)
    ld = sub.add_parser("load")
    ld.add_argument("--target", required=True)
    ld.add_argument("--mode", choices=("new", "keep"), default="new")
    ld.add_argument("--concurrency", type=int, default=16)
    ld.add_argument("--seconds", type=float, default=5.0)
    args = p.parse_args()
    if args.what == "serve":
        uvloop.run(_serve(args.hosts.split(","), args.port))
    else:
        host, _, port = args.target.rpartition(":")
        result = uvloop.run(_load(host, int(port), args.mode, args.concurrency, args.seconds))
        print(json.dumps(result))


if __name__ == "__main__":
    main()
