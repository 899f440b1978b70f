"""Shared helpers for benchmarks: the machine description, medians, result files, and a
throwaway PostgreSQL + API server stack built the same way ``make up`` builds it."""

from __future__ import annotations

import json
import os
import platform
import secrets
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"


def machine() -> dict[str, Any]:
    cpu = ""
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    with open("/proc/meminfo") as f:
        mem_kb = int(f.readline().split()[1])
    return {
        "cpus": os.cpu_count(),
        "cpu_model": cpu,
        "memory_gib": round(mem_kb / 2**20, 1),
        "python": platform.python_version(),
        "kernel": platform.release(),
    }


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def percentile(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, round(p / 100 * (len(s) - 1)))]


def _git(*args: str) -> str:
    out = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False)
    return out.stdout.strip()


def provenance() -> dict[str, Any]:
    """What a result was measured on: the commit, whether the tree had uncommitted changes
    (results themselves excepted), and the machine."""
    status = _git("status", "--porcelain", "--untracked-files=no", "--", ".", ":!bench/results")
    return {"commit": _git("rev-parse", "--short=12", "HEAD"), "dirty": bool(status),
            "machine": machine()}  # fmt: skip


def write_result(name: str, data: dict[str, Any]) -> Path:
    """Write ``data`` as ``bench/results/<name>-<time>.json``, stamped with :func:`provenance`
    (which overrides any ``commit``/``dirty``/``machine`` the caller set)."""
    data = {**data, **provenance()}
    RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = RESULTS / f"{name}-{stamp}.json"
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


class Stack:
    """An embedded PostgreSQL (or ``DATABASE_URL``) with migrations applied, and an API server."""

    def __init__(self) -> None:
        from app.devstack.postgres import EmbeddedPostgres

        self.tmp = tempfile.mkdtemp(prefix="qm-bench-")
        self.pg: EmbeddedPostgres | None = None
        if os.environ.get("DATABASE_URL"):
            self.url = os.environ["DATABASE_URL"]
        else:
            self.pg = EmbeddedPostgres(Path(self.tmp) / "pg")
            self.url = self.pg.start()
        env = {**os.environ, "DATABASE_URL": self.url}
        subprocess.run(
            [sys.executable, "-m", "alembic", "upgrade", "head"],
            cwd=ROOT,
            env=env,
            check=True,
            capture_output=True,
        )
        self.token = secrets.token_urlsafe(24)
        self.port = free_port()
        self.api: subprocess.Popen[bytes] | None = None

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start_api(self) -> float:
        """Start the API server; returns seconds until it answered /readyz."""
        env = {**os.environ, "DATABASE_URL": self.url, "QM_BOOTSTRAP_TOKEN": self.token}
        t0 = time.monotonic()
        self.api = subprocess.Popen(
            [sys.executable, "-m", "app.api", "--port", str(self.port)], cwd=ROOT, env=env
        )
        for _ in range(6000):
            try:
                if httpx.get(f"{self.api_url}/readyz", timeout=1).status_code == 200:
                    return time.monotonic() - t0
            except httpx.HTTPError:
                pass
            if self.api.poll() is not None:
                raise RuntimeError("the API server exited during start")
            time.sleep(0.05)
        raise RuntimeError("the API server did not become ready")

    def stop_api(self) -> None:
        if self.api is not None:
            self.api.terminate()
            try:
                self.api.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.api.kill()
                self.api.wait()
            self.api = None

    def close(self) -> None:
        self.stop_api()
        if self.pg is not None:
            self.pg.stop()
            # The database files go; the logs beside them stay for a look after the run.
            shutil.rmtree(Path(self.tmp) / "pg", ignore_errors=True)
