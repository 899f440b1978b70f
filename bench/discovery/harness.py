"""The discovery benchmark's processes: the discovery replica and the subscriber workers.

``Replica`` starts ``python -m app.discovery`` on fixed ports (so a restart listens where its
subscribers dial), waits for ``/healthz``, scrapes ``/metrics`` and reads its CPU and memory
from ``/proc``. ``Workers`` drives the ``bench.discovery.subscribers`` processes over their
stdin/stdout (one command at a time per worker, all workers at once). Used by
``bench.discovery.measure`` and ``bench.discovery.run``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

from bench.common import ROOT, free_port, rss_mib
from bench.scheduler.run import Procs, cpu_seconds


class Replica:
    """One discovery process (restartable on the same ports)."""

    def __init__(self, procs: Procs, env: dict[str, str], log: Path) -> None:
        self.procs, self.env, self.log = procs, env, log
        self.port, self.http_port = free_port(), free_port()
        self.http = f"http://127.0.0.1:{self.http_port}"
        self.proc: Any = None
        self.started_at = self.healthy_at = 0.0
        self.peak_rss_mib = 0.0

    def start(self) -> None:
        """Start the process; ``started_at`` is just before it is spawned."""
        argv = ["-m", "app.discovery", "--port", str(self.port),
                "--http-port", str(self.http_port), "--log-level", "info"]  # fmt: skip
        self.started_at = time.monotonic()
        self.proc = self.procs.start(argv, self.env, self.log)

    async def healthy(self, timeout: float = 60) -> float:
        """Wait for ``/healthz`` (state loaded); returns when it first answered 200."""
        deadline = time.monotonic() + timeout
        async with httpx.AsyncClient(timeout=2) as http:
            while time.monotonic() < deadline:
                with contextlib.suppress(httpx.HTTPError):
                    if (await http.get(self.http + "/healthz")).status_code == 200:
                        self.healthy_at = time.monotonic()
                        return self.healthy_at
                if self.proc.poll() is not None:
                    raise RuntimeError(f"discovery exited; see {self.log}")
                await asyncio.sleep(0.01)
        raise RuntimeError("discovery did not become healthy")

    def stop(self) -> None:
        self.sample()
        self.procs.stop(self.proc)

    async def metrics(self) -> dict[str, float]:
        """Counters and gauges that are not per subscriber."""
        async with httpx.AsyncClient(timeout=30) as http:
            text = (await http.get(self.http + "/metrics")).text
        out: dict[str, float] = {}
        for line in text.splitlines():
            if line.startswith("qm_discovery_") and "{subscriber=" not in line:
                key, _, value = line.rpartition(" ")
                with contextlib.suppress(ValueError):
                    out[key] = float(value)
        return out

    def cpu(self) -> float:
        return cpu_seconds(self.proc.pid)

    def sample(self) -> float:
        if self.proc is not None and self.proc.poll() is None:
            self.peak_rss_mib = max(self.peak_rss_mib, rss_mib(self.proc.pid))
        return self.peak_rss_mib


class Worker:
    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.lock = asyncio.Lock()

    async def call(self, cmd: str, **kw: Any) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        async with self.lock:
            self.proc.stdin.write((json.dumps({"cmd": cmd, **kw}) + "\n").encode())
            line = await self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"a subscriber worker exited during {cmd!r}")
        return dict(json.loads(line))


class Workers:
    """``n`` worker processes holding ``count`` subscribers between them."""

    def __init__(self, workers: list[Worker]) -> None:
        self.workers = workers

    @classmethod
    async def start(cls, n: int, log: Path) -> Workers:
        procs = []
        for i in range(n):
            err = open(log.with_name(f"{log.name}-{i}.log"), "ab")  # noqa: SIM115
            procs.append(await asyncio.create_subprocess_exec(
                sys.executable, "-m", "bench.discovery.subscribers", cwd=ROOT,
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=err,
                limit=2**27))  # fmt: skip
            err.close()
        return cls([Worker(p) for p in procs])

    async def all(self, cmd: str, **kw: Any) -> list[dict[str, Any]]:
        return list(await asyncio.gather(*(w.call(cmd, **kw) for w in self.workers)))

    async def connect(self, port: int, count: int, tag: str) -> float:
        t0 = time.monotonic()
        shares = [count // len(self.workers) + (i < count % len(self.workers))
                  for i in range(len(self.workers))]  # fmt: skip
        answers = await asyncio.gather(*(
            w.call("connect", host="127.0.0.1", port=port, prefix=f"{tag}-{i}-", count=k)
            for i, (w, k) in enumerate(zip(self.workers, shares, strict=True))))  # fmt: skip
        if not all(a["ok"] for a in answers):
            raise RuntimeError(f"not every subscriber got its snapshot: {answers}")
        return time.monotonic() - t0

    async def stats(self) -> dict[str, Any]:
        """Every worker's counters summed (sizes merged, versions and seq as min/max)."""
        parts = await self.all("stats")
        out: dict[str, Any] = {k: sum(p[k] for p in parts) for k in
                               ("bytes", "deltas", "endpoint_changes", "snapshots", "nacks",
                                "connected")}  # fmt: skip
        for key in ("one_sizes", "snapshot_sizes"):
            merged: Counter[int] = Counter()
            for p in parts:
                merged.update({int(k): v for k, v in p[key].items()})
            out[key] = merged
        out["min_seq"] = min(p["min_seq"] for p in parts)
        out["min_version"] = min(p["min_version"] for p in parts)
        out["max_version"] = max(p["max_version"] for p in parts)
        return out

    async def close(self) -> None:
        with contextlib.suppress(RuntimeError, BrokenPipeError, ConnectionError):
            await asyncio.wait_for(self.all("close"), 30)
        for w in self.workers:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(w.proc.wait(), 10)
            if w.proc.returncode is None:
                w.proc.kill()
                await w.proc.wait()
