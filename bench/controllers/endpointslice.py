"""What the EndpointSlice controller's core costs for a 5,000-pod Service, and how many slice
writes a rolling update of that Service makes.

``python -m bench.controllers.endpointslice [--pods 5000] [--step 250] [--runs 5]``

Pure core only (``app.core.controllers.endpointslice.reconcile``), in this process, applied
to an in-memory set of slices as the applier would apply it (names, resourceVersions); the
shell's reads from PostgreSQL and the writes themselves are not in these figures.

* **reconcile**: CPU seconds of one reconcile of the settled service that finds nothing to do
  (what a resync costs), and of one that flips 10 pods' readiness; medians of ``--runs``.
* **rollout**: every pod replaced, ``--step`` at a time, on a fake clock: new pods appear
  (not ready), become ready 0.5 s later, then as many old pods start terminating (0.2 s) and
  are gone 0.5 s after that; the controller reconciles after every change and whenever a plan
  asks to look again (``requeue_after``). Reported: reconciles, slice writes (creates,
  updates, deletes), slices at the end and how full they are, and the shortest time between
  two writes of one slice (the rate limit says >= 1 s). For scale: rewriting every slice on
  every reconcile would be reconciles x slices.

Results go to ``bench/results/controllers-endpointslice-<stamp>.json`` with the commit and
machine (``bench.common.write_result``).
"""

from __future__ import annotations

import argparse
import copy
import heapq
import itertools
import json
import time
from typing import Any

from app.core.controllers.endpointslice import reconcile
from app.core.controllers.plan import Plan, format_time
from bench.common import median, write_result

NS = "bench"
ZONES = {f"node-{i}": f"zone-{i % 3}" for i in range(30)}
SERVICE = {
    "kind": "Service",
    "metadata": {"name": "web", "namespace": NS, "uid": "svc"},
    "spec": {"selector": {"app": "web"}, "ports": [{"name": "http", "port": 80,
                                                    "targetPort": 8000}]},
}  # fmt: skip
Obj = dict[str, Any]


def pod(i: int, gen: str, ready: bool = True, deleting: float | None = None) -> Obj:
    meta: Obj = {"name": f"web-{gen}-{i:05d}", "namespace": NS, "uid": f"{gen}-{i}",
                 "labels": {"app": "web"}}  # fmt: skip
    if deleting is not None:
        meta["deletionTimestamp"] = format_time(deleting)
    ip = f"10.{1 if gen == 'a' else 2}.{i // 256}.{i % 256}"
    ready_cond = {"type": "Ready", "status": "True" if ready else "False"}
    return {"kind": "Pod", "metadata": meta, "spec": {"nodeName": f"node-{i % 30}"},
            "status": {"phase": "Running", "podIP": ip, "conditions": [ready_cond]}}  # fmt: skip


class Store:
    """Slices in memory, written as the applier writes them; each write's time per slice."""

    def __init__(self) -> None:
        self.objs: dict[str, Obj] = {}
        self.written: dict[str, list[float]] = {}
        self.counts = {"creates": 0, "updates": 0, "deletes": 0}
        self._ids = itertools.count()

    def apply(self, plan: Plan, now: float) -> None:
        for obj in plan.creates:
            obj = copy.deepcopy(obj)
            obj["metadata"]["name"] = f"web-{next(self._ids):05d}"
            obj["metadata"]["uid"] = obj["metadata"]["name"]
            self._put(obj, now, "creates")
        for d in plan.deletes:
            del self.objs[d.name]
            self.written.setdefault(d.name, []).append(now)
            self.counts["deletes"] += 1
        for obj in plan.updates:
            self._put(copy.deepcopy(obj), now, "updates")

    def _put(self, obj: Obj, now: float, what: str) -> None:
        obj["metadata"]["resourceVersion"] = str(int(now * 1000))
        self.objs[obj["metadata"]["name"]] = obj
        self.written.setdefault(obj["metadata"]["name"], []).append(now)
        self.counts[what] += 1


def settled(pods: list[Obj], now: float) -> Store:
    store = Store()
    store.apply(reconcile(SERVICE, pods, [], ZONES, now), now)
    return store


def time_reconciles(n: int, runs: int) -> dict[str, Any]:
    pods = [pod(i, "a") for i in range(n)]
    store = settled(pods, 0.0)
    slices = list(store.objs.values())
    flipped = [pod(i, "a", ready=i % (n // 10) != 0) for i in range(n)]
    idle, flips = [], []
    for _ in range(runs):
        started = time.process_time()
        assert reconcile(SERVICE, pods, slices, ZONES, 100.0).empty
        idle.append(time.process_time() - started)
        started = time.process_time()
        plan = reconcile(SERVICE, flipped, slices, ZONES, 100.0)
        flips.append(time.process_time() - started)
    return {"pods": n, "slices": len(slices), "idle_cpu_seconds": median(idle),
            "ten_flips_cpu_seconds": median(flips),
            "ten_flips_updates": len(plan.updates)}  # fmt: skip


def rollout(n: int, step: int) -> dict[str, Any]:
    pods: dict[str, Obj] = {f"a-{i}": pod(i, "a") for i in range(n)}
    store = settled(list(pods.values()), 0.0)
    events: list[tuple[float, int, str, int]] = []
    seq = itertools.count()
    for k, first in enumerate(range(0, n, step)):
        t = 10.0 + 2.0 * k  # a step every 2 s, the next surge before the last drain ends
        for i in range(first, min(n, first + step)):
            for at, what in ((t, "add"), (t + 0.5, "ready"), (t + 0.7, "term"), (t + 1.2, "gone")):
                heapq.heappush(events, (at, next(seq), what, i))
    reconciles = 0
    while events:
        now, _, what, i = heapq.heappop(events)
        changed = what != "look"
        if what == "add":
            pods[f"b-{i}"] = pod(i, "b", ready=False)
        elif what == "ready":
            pods[f"b-{i}"] = pod(i, "b")
        elif what == "term":
            pods[f"a-{i}"] = pod(i, "a", deleting=now)
        elif what == "gone":
            del pods[f"a-{i}"]
        if changed and events and events[0][0] == now:
            continue  # a batch of changes at one instant: one reconcile, as the dispatcher does
        plan = reconcile(SERVICE, list(pods.values()), list(store.objs.values()), ZONES, now)
        reconciles += 1
        store.apply(plan, now)
        if plan.requeue_after is not None:
            heapq.heappush(events, (now + plan.requeue_after, next(seq), "look", -1))
    gaps = [b - a for ts in store.written.values() for a, b in itertools.pairwise(ts)]
    sizes = sorted(len(s["endpoints"]) for s in store.objs.values())
    writes = sum(store.counts.values())
    return {"pods": n, "step": step, "reconciles": reconciles, "writes": writes,
            **store.counts, "slices_at_end": len(sizes), "smallest_slice": sizes[0],
            "largest_slice": sizes[-1], "min_seconds_between_writes_of_a_slice": min(gaps),
            "all_endpoints_ready": all(e["conditions"]["ready"] for s in store.objs.values()
                                       for e in s["endpoints"]),
            "rewrite_everything_writes": reconciles * (n // 100)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pods", type=int, default=5000)
    parser.add_argument("--step", type=int, default=250)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    result = {"benchmark": "controllers-endpointslice", "scope": "pure core, in memory",
              "reconcile": time_reconciles(args.pods, args.runs),
              "rollout": rollout(args.pods, args.step)}  # fmt: skip
    print(json.dumps(result, indent=2))
    print(write_result("controllers-endpointslice", result))


if __name__ == "__main__":
    main()
