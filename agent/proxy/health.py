"""Edge mode's own health checks of endpoints: the pure record of results (ADR 0040).

The edge load balancer does not take discovery's word alone for which endpoints can take
traffic: it connects to every endpoint port itself (:mod:`agent.proxy.edge` runs the checks)
and records each result here. A target is healthy after ``rise`` consecutive successes (1)
and unhealthy after ``fall`` consecutive failures (2); a target never checked is not
healthy. :func:`agent.proxy.table.edge_tiers` then builds the pool with its fail-open
threshold, so a wrong result here can shrink the pool but never empty it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from agent.proxy.table import Target

RISE = 1
FALL = 2


@dataclass
class _State:
    healthy: bool = False
    successes: int = 0
    failures: int = 0


class HealthBook:
    def __init__(self, rise: int = RISE, fall: int = FALL) -> None:
        self.rise, self.fall = rise, fall
        self._states: dict[Target, _State] = {}

    def record(self, target: Target, ok: bool) -> bool:
        """Note one check's result; returns whether ``target`` is now healthy."""
        state = self._states.setdefault(target, _State())
        if ok:
            state.successes, state.failures = state.successes + 1, 0
            if state.successes >= self.rise:
                state.healthy = True
        else:
            state.successes, state.failures = 0, state.failures + 1
            if state.failures >= self.fall:
                state.healthy = False
        return state.healthy

    def healthy(self, target: Target | None) -> bool:
        state = self._states.get(target) if target is not None else None
        return state is not None and state.healthy

    def keep(self, targets: Iterable[Target]) -> None:
        """Forget every target not in ``targets`` (its endpoint is gone)."""
        keep = set(targets)
        for target in [t for t in self._states if t not in keep]:
            del self._states[target]

    def counts(self) -> tuple[int, int]:
        """(healthy, checked)."""
        return sum(s.healthy for s in self._states.values()), len(self._states)
