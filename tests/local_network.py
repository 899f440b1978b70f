"""A local network (``app.devstack.network``) built for one test module and removed after it,
named with a letter of the module's own and this run's pid, so modules, parallel runs and a
developer's ``make up`` never share a name. Needs root and ``ip netns``: skipped elsewhere,
a failure where every capability is required (``capability``). ``tests/`` is on the path."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import capability

from app.devstack import network
from app.devstack.network import ZONES, NetworkPlan


@contextlib.contextmanager
def built(letter: str, zones: tuple[str, ...] = ZONES) -> Iterator[NetworkPlan]:
    why_not = network.available()
    if why_not is not None:
        capability.missing(f"network namespaces: {why_not}")
    plan = NetworkPlan(tag=f"{letter}{os.getpid() % 10**7}", zones=zones)
    network.setup(plan)
    try:
        yield plan
    finally:
        network.teardown(plan)
        assert not any(network.present(plan).values()), network.present(plan)
