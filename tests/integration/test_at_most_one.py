"""At-most-one pods with real workers: the replacement of a terminating copy waits until the
copy's row is gone, and carries a higher fencing epoch."""

from __future__ import annotations

import json
import time
import uuid

from plane import NS, Plane, start_worker

from app.devstack.supervise import free_port


def _at_most_one_rs(plane: Plane, name: str) -> str:
    uid = str(uuid.uuid4())
    template = {
        "metadata": {"labels": {"app": name}},
        "spec": {"atMostOne": True, "containers": [{"name": "c", "image": "busybox"}]},
    }
    spec = {"replicas": 1, "selector": {"matchLabels": {"app": name}}, "template": template}
    plane.db.execute(
        "INSERT INTO replicasets (uid, namespace, name, labels, spec) VALUES (%s, %s, %s, %s, %s)",
        (uid, NS, name, json.dumps({"app": name}), json.dumps(spec)),
    )
    return uid


def _copies(plane: Plane, uid: str) -> list[tuple[str, int, bool]]:
    """(name, fencing epoch, terminating) of every pod of the ReplicaSet, terminating or not."""
    rows = plane.db.execute(
        "SELECT name, (spec->>'fencingEpoch')::bigint, deletion_timestamp IS NOT NULL FROM pods"
        " WHERE owner_references @> %s::jsonb ORDER BY creation_timestamp",
        (json.dumps([{"uid": uid}]),),
    ).fetchall()
    return [(r[0], r[1], r[2]) for r in rows]


def test_a_replacement_waits_for_the_old_copy_and_carries_a_higher_epoch(plane: Plane) -> None:
    start_worker(plane)
    plane.start("-m", "workers.dispatch")
    uid = _at_most_one_rs(plane, "leader")
    plane.wait(lambda: len(_copies(plane, uid)) == 1, what="the first copy")
    [(first, epoch1, _)] = _copies(plane, uid)
    assert epoch1 is not None and epoch1 > 0

    # The copy is on a node and asked to stop: it may still be running there.
    plane.db.execute(
        'UPDATE pods SET spec = spec || \'{"nodeName": "n1"}\','
        " deletion_timestamp = now(), deletion_grace_period_seconds = 30"
        " WHERE namespace = %s AND name = %s",
        (NS, first),
    )
    deadline = time.monotonic() + 6.0  # three resyncs and the change itself
    while time.monotonic() < deadline:
        assert len(_copies(plane, uid)) == 1, _copies(plane, uid)
        time.sleep(0.1)

    plane.db.execute("DELETE FROM pods WHERE namespace = %s AND name = %s", (NS, first))
    plane.wait(lambda: len(_copies(plane, uid)) == 1 and _copies(plane, uid)[0][0] != first,
               what="the replacement")  # fmt: skip
    [(_second, epoch2, terminating)] = _copies(plane, uid)
    assert not terminating
    assert epoch2 > epoch1


def test_at_most_one_holds_through_a_partition(plane: Plane) -> None:
    """The node holding the only copy goes silent (cut off, its pod maybe still running). The
    copy is released only after the lease duration plus the agent's self-kill window, never
    with the ordinary pods; until then no second copy exists, and the replacement, placed on
    the other node, carries a higher epoch."""
    from test_node_lifecycle import FAST, Agents, add_node, pods_on

    plane.env.update({**FAST, "QM_NODE_AGENT_SELF_KILL": "8"})  # release at 4 + 8 + 1 = 13 s
    with Agents(plane.url) as agents:
        for n in ("n0", "n1"):
            add_node(plane.db, n)
        agents.alive |= {"n0", "n1"}
        start_worker(plane)
        plane.start("-m", "workers.dispatch")
        plane.start("-m", "app.scheduler", "--metrics-port", str(free_port()))
        plane.start("-m", "workers.manager", "--identity", "m1")
        uid = _at_most_one_rs(plane, "shard-leader")
        plane.wait(lambda: bool(pods_on(plane.db, "n0") or pods_on(plane.db, "n1")),
                   what="the copy bound")  # fmt: skip
        victim = "n0" if pods_on(plane.db, "n0") else "n1"
        other = "n1" if victim == "n0" else "n0"
        [(first, epoch1, _)] = _copies(plane, uid)
        agents.alive.discard(victim)
        silent_since = time.monotonic()

        while True:
            copies = _copies(plane, uid)
            assert len(copies) <= 1, copies  # never two, terminating ones included
            if copies and copies[0][0] != first:
                break
            assert time.monotonic() - silent_since < 30, "the copy was never replaced"
            time.sleep(0.05)
        replaced_after = time.monotonic() - silent_since
        assert replaced_after >= 12.5, replaced_after  # not at the ordinary 8 s eviction
        [(_second, epoch2, _)] = copies
        assert epoch2 > epoch1
        plane.wait(lambda: pods_on(plane.db, other) == [_copies(plane, uid)[0][0]],
                   what="the replacement bound to the live node")  # fmt: skip
