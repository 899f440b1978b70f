"""Where the CPU goes during the fairness benchmark, quiet and under the flood: the API
servers, their revision-stream children, PostgreSQL, the flooder's client, the team's client
(this process) and everything else on the machine, in cores used (CPU seconds per second),
sampled from ``/proc`` through psutil and counted in the slice each sample falls in, as the
team's requests are.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections import defaultdict
from collections.abc import Callable

import psutil

Label = Callable[[float], str | None]


def _cpu(p: psutil.Process) -> float:
    t = p.cpu_times()
    return float(t.user + t.system)


class CpuSampler:
    """Samples every ``every`` seconds; :meth:`cores` gives the averages by label and group."""

    def __init__(self, api_pids: list[int], pg_pid: int | None, every: float = 0.5) -> None:
        self.api_pids = api_pids
        self.pg_pid = pg_pid
        self.every = every
        self.flooder_pid: int | None = None
        self._last: dict[int, float] = {}
        self._busy: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        self._seconds: dict[str, float] = defaultdict(float)

    def reset(self, flooder_pid: int) -> None:
        """A new run, with its own flooder process: the averages start again."""
        self.flooder_pid = flooder_pid
        self._busy.clear()
        self._seconds.clear()

    def _groups(self) -> dict[str, list[psutil.Process]]:
        groups: dict[str, list[psutil.Process]] = defaultdict(list)
        for pid in self.api_pids:
            with contextlib.suppress(psutil.Error):
                api = psutil.Process(pid)
                groups["api_servers"].append(api)
                groups["revision_stream"] += api.children(recursive=True)
        if self.pg_pid is not None:
            with contextlib.suppress(psutil.Error):
                pg = psutil.Process(self.pg_pid)
                groups["postgres"] += [pg, *pg.children(recursive=True)]
        if self.flooder_pid is not None:
            with contextlib.suppress(psutil.Error):
                groups["flooder_client"].append(psutil.Process(self.flooder_pid))
        groups["team_client"].append(psutil.Process(os.getpid()))
        return groups

    def _sample(self) -> dict[str, float]:
        """CPU seconds per group since the last sample (a process seen first counts from now)."""
        out: dict[str, float] = defaultdict(float)
        seen: dict[int, float] = {}
        for group, procs in self._groups().items():
            for p in procs:
                with contextlib.suppress(psutil.Error):
                    now = _cpu(p)
                    seen[p.pid] = now
                    out[group] += max(0.0, now - self._last.get(p.pid, now))
        machine = psutil.cpu_times()
        seen[-1] = float(machine.user + machine.system + machine.nice)
        out["whole_machine"] = max(0.0, seen[-1] - self._last.get(-1, seen[-1]))
        self._last = seen
        return out

    async def run(self, label: Label) -> None:
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, self._sample)
        last = time.monotonic()
        while True:
            await asyncio.sleep(self.every)
            busy = await loop.run_in_executor(None, self._sample)
            now = time.monotonic()
            which = label(last)
            if which is not None and label(now) == which:  # the interval lies in one slice
                self._seconds[which] += now - last
                for group, cpu in busy.items():
                    self._busy[which][group] += cpu
            last = now

    def cores(self) -> dict[str, dict[str, float]]:
        """``{label: {group: cores}}``; ``other`` is the machine minus the groups."""
        out: dict[str, dict[str, float]] = {}
        for which, secs in self._seconds.items():
            row = {g: cpu / secs for g, cpu in self._busy[which].items()}
            row["other"] = row.get("whole_machine", 0.0) - sum(
                v for g, v in row.items() if g != "whole_machine"
            )
            out[which] = row
        return out
