"""What PgBouncer's transaction pooling costs the API's writes (ADR 0057).

One embedded PostgreSQL with the migrations applied, one PgBouncer (transaction pooling, 20
server connections) in front of it, and three API servers on the same database, told apart
only by how they connect:

* ``direct``: straight to PostgreSQL, asyncpg's statement cache on (``make up`` before);
* ``direct-nocache``: straight to PostgreSQL with ``QM_PGBOUNCER=1`` (no cache, no reset):
  what the driver settings alone cost;
* ``pgbouncer``: through PgBouncer as ``qm_app`` (``make up`` now).

In each round every server in turn takes ``--seconds`` of ConfigMap creates from ``--clients``
concurrent clients (the others idle); rounds alternate the order, and the figures are the
medians over ``--rounds``. Writes the result to ``bench/results/pgbouncer-*.json``.

    .venv/bin/python -m bench.pgbouncer.run [--rounds 3] [--seconds 10] [--clients 32]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from app.devstack.pgbouncer import EmbeddedPgBouncer, pooled_env
from app.devstack.postgres import EmbeddedPostgres
from app.store.secret_keys import ENV as SECRET_KEYS_ENV
from app.store.secret_keys import ensure_keys_file
from bench.common import ROOT, free_port, median, percentile, write_result

API = "/apis/quaymaster.io/v1"
NS = "bench"


def start_api(env: dict[str, str], token: str) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**env, "QM_BOOTSTRAP_TOKEN": token, "QM_API_PORT": str(port), "QM_API_URL": url}
    proc = subprocess.Popen([sys.executable, "-m", "app.api", "--port", str(port)], cwd=ROOT,
                            env=env, stdout=subprocess.DEVNULL)  # fmt: skip
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        if proc.poll() is not None:
            raise RuntimeError("an API server exited during start")
        time.sleep(0.1)
    raise RuntimeError("an API server did not become ready")


async def load(url: str, token: str, clients: int, seconds: float, tag: str) -> dict[str, Any]:
    """``clients`` loops creating ConfigMaps for ``seconds``; rate and latencies."""
    latencies: list[float] = []
    failed = 0
    stop = time.monotonic() + seconds
    headers = {"Authorization": f"Bearer {token}"}
    limits = httpx.Limits(max_connections=clients)
    async with httpx.AsyncClient(base_url=url, headers=headers, limits=limits, timeout=30) as c:

        async def one(i: int) -> None:
            nonlocal failed
            n = 0
            while time.monotonic() < stop:
                meta = {"name": f"{tag}-{i}-{n}"}
                body = {"apiVersion": "quaymaster.io/v1", "kind": "ConfigMap",
                        "metadata": meta, "data": {"k": "v" * 64}}  # fmt: skip
                t0 = time.perf_counter()
                r = await c.post(f"{API}/namespaces/{NS}/configmaps", json=body)
                latencies.append(time.perf_counter() - t0)
                failed += r.status_code != 201
                n += 1

        t0 = time.monotonic()
        await asyncio.gather(*(one(i) for i in range(clients)))
        elapsed = time.monotonic() - t0
    return {
        "writes_per_s": round(len(latencies) / elapsed, 1),
        "p50_ms": round(percentile(latencies, 50) * 1e3, 2),
        "p99_ms": round(percentile(latencies, 99) * 1e3, 2),
        "failed": failed,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--clients", type=int, default=32)
    args = ap.parse_args()

    base = Path(tempfile.mkdtemp(prefix="qm-bench-pgbouncer-"))
    pg = EmbeddedPostgres(base / "pg")
    bouncer: EmbeddedPgBouncer | None = None
    procs: list[subprocess.Popen[bytes]] = []
    try:
        direct = pg.start()
        keys = base / "secret-keys.json"
        ensure_keys_file(keys)
        env = {**os.environ, "DATABASE_URL": direct, "QM_STREAM_DATABASE_URL": direct,
               SECRET_KEYS_ENV: str(keys), "PYTHONUNBUFFERED": "1"}  # fmt: skip
        subprocess.run([sys.executable, "-m", "alembic", "upgrade", "head"], cwd=ROOT, env=env,
                       check=True, capture_output=True)  # fmt: skip
        bouncer = EmbeddedPgBouncer(base / "pgbouncer", pg.port, pool_size=20)
        bouncer.start()
        token = secrets.token_urlsafe(24)
        variants = {
            "direct": env,
            "direct-nocache": {**env, "QM_PGBOUNCER": "1"},
            "pgbouncer": {**env, **pooled_env(direct, bouncer)},
        }
        urls: dict[str, str] = {}
        for name, venv in variants.items():
            proc, urls[name] = start_api(venv, token)
            procs.append(proc)
        ns = {"apiVersion": "quaymaster.io/v1", "kind": "Namespace", "metadata": {"name": NS}}
        httpx.post(f"{urls['direct']}{API}/namespaces", json=ns,
                   headers={"Authorization": f"Bearer {token}"})  # fmt: skip
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name in variants}
        order = list(variants)
        for r in range(args.rounds):
            for name in order if r % 2 == 0 else reversed(order):
                tag = f"{name}-{r}"
                got = asyncio.run(load(urls[name], token, args.clients, args.seconds, tag))
                print(f"round {r} {name}: {got}", flush=True)
                runs[name].append(got)
        summary = {
            name: {k: median([run[k] for run in rs]) for k in ("writes_per_s", "p50_ms", "p99_ms")}
            | {"failed": sum(run["failed"] for run in rs)}
            for name, rs in runs.items()
        }
        ratio = summary["pgbouncer"]["writes_per_s"] / summary["direct"]["writes_per_s"]
        nocache = summary["direct-nocache"]["writes_per_s"] / summary["direct"]["writes_per_s"]
        result = {
            "benchmark": "pgbouncer",
            "clients": args.clients,
            "seconds": args.seconds,
            "rounds": args.rounds,
            "pgbouncer_pool_size": 20,
            "runs": runs,
            "median": summary,
            "pgbouncer_over_direct": round(ratio, 3),
            "nocache_over_direct": round(nocache, 3),
        }
        print(f"through PgBouncer / direct: {ratio:.2f}; direct without cache / direct: "
              f"{nocache:.2f}; wrote {write_result('pgbouncer', result)}")  # fmt: skip
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
        if bouncer is not None:
            bouncer.stop()
        pg.stop()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
