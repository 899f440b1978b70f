"""CPU used by the benchmark's processes over a window, read from ``/proc``.

Each API server is counted alone (its own utime + stime) and its children (the revisioner)
beside it; PostgreSQL is the postmaster with every backend, live or already reaped (the
postmaster's ``cutime``/``cstime`` keep what exited backends used); the usage store's Redis
alone; the load generator is this process. Percentages are of one core over the window's wall time.
"""

from __future__ import annotations

import os
import time
from typing import Any

from bench.scheduler.run import postgres_cpu_seconds

CLK_TCK = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None


def own_seconds(pid: int) -> float:
    fields = _stat(pid)
    return float("nan") if fields is None else (int(fields[11]) + int(fields[12])) / CLK_TCK


def children_seconds(pid: int) -> float:
    """Live children's own CPU plus what reaped children used (``cutime`` + ``cstime``)."""
    fields = _stat(pid)
    total = 0.0 if fields is None else (int(fields[13]) + int(fields[14])) / CLK_TCK
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (child := _stat(int(entry))) is not None and int(child[1]) == pid:
            total += (int(child[11]) + int(child[12])) / CLK_TCK
    return total


class Meter:
    """``mark()`` at the start of a window, ``read()`` at its end."""

    def __init__(self, api_pids: list[int], postmaster: int | None, loadgen: int,
                 redis: int | None = None) -> None:  # fmt: skip
        self.api_pids, self.postmaster, self.loadgen = api_pids, postmaster, loadgen
        self.redis = redis
        self._t0 = 0.0
        self._c0: dict[str, float] = {}

    def _sample(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for i, pid in enumerate(self.api_pids):
            out[f"api{i}"] = own_seconds(pid)
            out[f"api{i}_revisioner"] = children_seconds(pid)
        out["postgres"] = postgres_cpu_seconds(self.postmaster)
        out["loadgen"] = own_seconds(self.loadgen)
        if self.redis is not None:
            out["redis"] = own_seconds(self.redis)
        return out

    def mark(self) -> None:
        self._t0, self._c0 = time.monotonic(), self._sample()

    def read(self) -> dict[str, Any]:
        wall = time.monotonic() - self._t0
        now = self._sample()
        out: dict[str, Any] = {}
        for key, value in now.items():
            used = value - self._c0[key]
            out[key] = {"seconds": round(used, 2), "pct": round(100 * used / wall, 1)}
        total = sum(v["seconds"] for v in out.values())
        out["total"] = {"seconds": round(total, 2), "pct": round(100 * total / wall, 1)}
        return out
