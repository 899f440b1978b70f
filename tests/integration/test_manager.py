"""The controller manager's leader election: of two managers one runs the singleton loops;
when it is killed the other takes the lease and its loops take over, starting from a reset
(the node lifecycle loop measures every silence afresh, so a failover never evicts early).
"""

from __future__ import annotations

import asyncio
import signal
import time
from dataclasses import dataclass, field
from typing import Any

from plane import Plane
from test_node_lifecycle import FAST, Agents, add_node, tainted

from workers.loops import Context
from workers.manager import LEASE_NAME, Manager

UNREACHABLE = "node.kubernetes.io/unreachable"


def holder(plane: Plane) -> str | None:
    row = plane.db.execute(
        "SELECT spec->>'holderIdentity' FROM leases WHERE namespace = 'quaymaster-system'"
        " AND name = %s",
        (LEASE_NAME,),
    ).fetchone()
    return row[0] if row else None


def test_the_standby_takes_over_and_starts_its_silences_afresh(plane: Plane) -> None:
    plane.env.update({**FAST, "QM_NODE_UNREACHABLE_AFTER": "6"})
    for n in ("m0", "m1"):
        add_node(plane.db, n)
    with Agents(plane.url) as agents:
        agents.alive |= {"m0", "m1"}
        first = plane.start("-m", "workers.manager", "--identity", "first")
        plane.wait(lambda: holder(plane) == "first", timeout=10, what="the first leader")
        second = plane.start("-m", "workers.manager", "--identity", "second")
        time.sleep(2.0)
        assert holder(plane) == "first"
        agents.alive.discard("m0")
        time.sleep(3.0)
        first.send_signal(signal.SIGKILL)  # no release: the lease must expire
        plane.wait(lambda: holder(plane) == "second", timeout=10, what="the standby leading")
        took_over = time.monotonic()
        plane.wait(lambda: tainted(plane.db, "m0", UNREACHABLE), timeout=15, what="the taint")
        tainted_after = time.monotonic() - took_over
        # The old leader would have tainted m0 3 s after the kill; the new one counts 6 s from
        # its own first look.
        assert 5.5 <= tainted_after <= 9.0, tainted_after
        assert not tainted(plane.db, "m1", UNREACHABLE)
        assert second.poll() is None


@dataclass
class FakeLease:
    leading: bool = False
    on_change: Any = None

    async def run(self, stop: asyncio.Event, on_change: Any = None) -> None:
        self.on_change = on_change
        await stop.wait()

    def is_leader(self) -> bool:
        return self.leading

    async def release(self) -> bool:
        return True

    def flip(self, leading: bool) -> None:
        self.leading = leading
        self.on_change(leading)


@dataclass
class CountingLoop:
    name: str = "counting"
    interval: float = 0.05
    resets: int = 0
    ticks: list[int] = field(default_factory=list)

    def reset(self) -> None:
        self.resets += 1

    async def tick(self, ctx: Context) -> None:
        self.ticks.append(self.resets)


async def test_loops_tick_only_while_leading_and_reset_on_every_change_of_term() -> None:
    lease, loop = FakeLease(), CountingLoop()
    manager = Manager(None, [loop], lease)  # type: ignore[arg-type]
    stop = asyncio.Event()
    task = asyncio.create_task(manager.run(stop))
    await asyncio.sleep(0.2)
    assert loop.ticks == [] and loop.resets == 1  # the start of the first term
    lease.flip(True)
    await asyncio.sleep(0.2)
    assert loop.ticks and set(loop.ticks) == {2}
    # Lost and regained between two ticks: still a new term, so the loop forgets.
    lease.flip(False)
    lease.flip(True)
    await asyncio.sleep(0.2)
    assert loop.resets == 3 and loop.ticks[-1] == 3
    lease.flip(False)
    await asyncio.sleep(0.1)
    count = len(loop.ticks)
    await asyncio.sleep(0.2)
    assert len(loop.ticks) == count
    stop.set()
    await task
