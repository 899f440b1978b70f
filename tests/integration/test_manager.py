"""The controller manager's leader election: of two managers one runs the singleton loops;
when it is killed the other takes the lease and its loops take over, starting from a reset
(the node lifecycle loop measures every silence afresh, so a failover never evicts early).
How the manager drives its loops on a term is tested on a fake clock in
``tests/unit/test_manager_loops.py``.
"""

from __future__ import annotations

import signal
import time

from plane import Plane
from test_node_lifecycle import FAST, Agents, add_node, tainted

from workers.manager import LEASE_NAME

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
