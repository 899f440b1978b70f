"""The EndpointSlice controller as a pure function, applied to an in-memory set of slices: the
slices' shape, what an endpoint is and its conditions, slices without a selector, minimal
churn at 5,000 pods, the write rate limit on a fake clock, and the dispatcher's selector
index."""

from __future__ import annotations

import copy
import itertools
from typing import Any

import pytest

from app.core.admission import admit
from app.core.controllers.endpointslice import (
    LAST_WRITE,
    MANAGED_BY_LABEL,
    MANAGER,
    SERVICE_NAME_LABEL,
    ServiceSelectors,
    reconcile,
)
from app.core.controllers.plan import Plan, format_time
from app.core.kinds import BY_KIND
from app.stream.informer import Change
from workers.dispatch import NamespaceIndex, keys_of

T0 = 1_800_000_000.0
NS = "shop"
Obj = dict[str, Any]
ZONES = {"node-a": "zone-a", "node-b": "zone-b"}
SLICE = BY_KIND["EndpointSlice"]


def service(selector: dict[str, str] | None = None, **spec: Any) -> Obj:
    ports = [{"name": "http", "port": 80, "targetPort": 8000, "protocol": "TCP"}]
    body: Obj = {"ports": ports, **spec}
    if selector is not None:
        body["selector"] = selector
    return {
        "apiVersion": "quaymaster.io/v1",
        "kind": "Service",
        "metadata": {"name": "web", "namespace": NS, "uid": "svc-uid"},
        "spec": body,
    }


WEB = service({"app": "web"})


def pod(
    name: str,
    ip: str | None = "10.0.0.1",
    *,
    ready: bool = True,
    deleting: bool = False,
    phase: str = "Running",
    node: str = "node-a",
    labels: dict[str, str] | None = None,
    ports: list[Obj] | None = None,
) -> Obj:
    meta: Obj = {"name": name, "namespace": NS, "uid": f"uid-{name}",
                 "labels": {"app": "web"} if labels is None else labels}  # fmt: skip
    if deleting:
        meta["deletionTimestamp"] = format_time(T0)
    ready_cond = {"type": "Ready", "status": "True" if ready else "False"}
    status: Obj = {"phase": phase, "conditions": [ready_cond]}
    if ip is not None:
        status["podIP"] = ip
    container = {"name": "c", "image": "app", "ports": ports or []}
    return {"kind": "Pod", "metadata": meta, "spec": {"nodeName": node,
            "containers": [container]}, "status": status}  # fmt: skip


def many(n: int, start: int = 0, prefix: str = "p") -> list[Obj]:
    return [
        pod(f"{prefix}-{i:05d}", f"10.{i // 65536 % 256}.{i // 256 % 256}.{i % 256}")
        for i in range(start, start + n)
    ]


class Slices:
    """The store, for slices: applies plans as the applier would (admission, names,
    resourceVersion checks) and counts the writes."""

    def __init__(self) -> None:
        self.objs: dict[str, Obj] = {}
        self._names = itertools.count()
        self._versions = itertools.count(1)
        self.writes: list[str] = []

    def list(self) -> list[Obj]:
        return [copy.deepcopy(o) for o in self.objs.values()]

    def apply(self, plan: Plan) -> None:
        for obj in plan.creates:
            obj = copy.deepcopy(obj)
            obj["metadata"]["name"] = f"{obj['metadata']['generateName']}{next(self._names):05d}"
            self._store(admit(SLICE, obj, None))
        for d in plan.deletes:
            assert self.objs[d.name]["metadata"]["uid"] == d.uid
            del self.objs[d.name]
            self.writes.append(d.name)
        for obj in plan.updates:
            name = obj["metadata"]["name"]
            old = self.objs[name]
            assert obj["metadata"]["resourceVersion"] == old["metadata"]["resourceVersion"]
            self._store(admit(SLICE, copy.deepcopy(obj), old))

    def _store(self, obj: Obj) -> None:
        meta = obj["metadata"]
        meta.setdefault("uid", f"uid-{meta['name']}")
        meta["resourceVersion"] = str(next(self._versions))
        self.objs[meta["name"]] = obj
        self.writes.append(meta["name"])

    def endpoints(self) -> dict[str, Obj]:
        """Every endpoint by pod name."""
        return {e["targetRef"]["name"]: e for s in self.objs.values() for e in s["endpoints"]}

    def where(self) -> dict[str, str]:
        """The slice each pod's endpoint is in."""
        return {e["targetRef"]["name"]: n for n, s in self.objs.items() for e in s["endpoints"]}


def run(store: Slices, pods: list[Obj], now: float, svc: Obj = WEB) -> Plan:
    plan = reconcile(svc, pods, store.list(), ZONES, now)
    store.apply(plan)
    return plan


def settled(pods: list[Obj], now: float = T0) -> Slices:
    store = Slices()
    run(store, pods, now)
    assert reconcile(WEB, pods, store.list(), ZONES, now + 10).empty  # a fixpoint
    store.writes.clear()
    return store


# ----------------------------------------------------------------------------- shape


def test_a_slice_has_the_shape_discovery_reads() -> None:
    store = Slices()
    plan = run(store, [pod("a", "10.0.0.1"), pod("b", "10.0.0.2", node="node-b")], T0)
    assert len(plan.creates) == 1 and not plan.updates and plan.requeue_after is None
    (s,) = store.objs.values()
    meta = s["metadata"]
    assert meta["generateName"] == "web-" and meta["namespace"] == NS
    assert meta["labels"] == {SERVICE_NAME_LABEL: "web", MANAGED_BY_LABEL: MANAGER}
    owner = {"apiVersion": "quaymaster.io/v1", "kind": "Service", "name": "web",
             "uid": "svc-uid", "controller": True, "blockOwnerDeletion": True}  # fmt: skip
    assert meta["ownerReferences"] == [owner]
    assert float(meta["annotations"][LAST_WRITE]) == T0
    assert s["addressType"] == "IPv4"
    assert s["ports"] == [{"name": "http", "port": 8000, "protocol": "TCP"}]
    assert s["endpoints"][1] == {
        "addresses": ["10.0.0.2"],
        "conditions": {"ready": True, "serving": True, "terminating": False},
        "nodeName": "node-b",
        "zone": "zone-b",
        "targetRef": {"kind": "Pod", "namespace": NS, "name": "b", "uid": "uid-b"},
    }


@pytest.mark.parametrize(
    ("p", "conditions"),
    [
        (pod("a"), (True, True, False)),
        (pod("a", ready=False), (False, False, False)),  # not ready: kept, marked
        (pod("a", deleting=True), (False, True, True)),  # terminating, still serving
        (pod("a", deleting=True, ready=False), (False, False, True)),
    ],
)
def test_conditions_follow_readiness_and_deletion(p: Obj, conditions: tuple[bool, ...]) -> None:
    store = Slices()
    run(store, [p], T0)
    c = store.endpoints()["a"]["conditions"]
    assert (c["ready"], c["serving"], c["terminating"]) == conditions


def test_only_selected_pods_with_an_address_that_have_not_finished_are_endpoints() -> None:
    other_ns = pod("elsewhere", "10.0.0.9")
    other_ns["metadata"]["namespace"] = "other"
    pods = [
        pod("ok", "10.0.0.1"),
        pod("no-ip", None),
        pod("v6", "fd00::1"),
        pod("done", "10.0.0.2", phase="Succeeded"),
        pod("failed", "10.0.0.3", phase="Failed"),
        pod("other-app", "10.0.0.4", labels={"app": "db"}),
        other_ns,
    ]
    store = Slices()
    run(store, pods, T0)
    assert list(store.endpoints()) == ["ok"]


def test_an_unready_pod_is_marked_not_removed_and_a_node_without_zone_has_none() -> None:
    store = settled([pod("a", "10.0.0.1"), pod("b", "10.0.0.2", node="node-x")])
    plan = run(store, [pod("a", "10.0.0.1", ready=False), pod("b", "10.0.0.2", node="node-x")],
               T0 + 5)  # fmt: skip
    assert len(plan.updates) == 1 and not plan.creates and not plan.deletes
    assert store.endpoints()["a"]["conditions"]["ready"] is False
    assert "zone" not in store.endpoints()["b"] and store.endpoints()["b"]["nodeName"] == "node-x"


def test_named_target_ports_resolve_per_pod_and_group_slices_by_ports() -> None:
    svc = service({"app": "web"}, ports=[
        {"name": "http", "port": 80, "targetPort": "web", "protocol": "TCP"},
        {"name": "admin", "port": 81, "targetPort": 9000, "protocol": "TCP"},
    ])  # fmt: skip
    pods = [
        pod("a", "10.0.0.1", ports=[{"name": "web", "containerPort": 8080}]),
        pod("b", "10.0.0.2", ports=[{"name": "web", "containerPort": 8081}]),
        pod("c", "10.0.0.3", ports=[{"name": "web", "containerPort": 8080, "protocol": "UDP"}]),
    ]
    store = Slices()
    run(store, pods, T0, svc)
    by_ports = {
        tuple((p["name"], p["port"]) for p in s["ports"]): [e["targetRef"]["name"]
                                                         for e in s["endpoints"]]
        for s in store.objs.values()
    }  # fmt: skip
    assert by_ports == {
        (("http", 8080), ("admin", 9000)): ["a"],
        (("http", 8081), ("admin", 9000)): ["b"],
        (("admin", 9000),): ["c"],  # no TCP port named "web": that port left out for c
    }
    assert reconcile(svc, pods, store.list(), ZONES, T0 + 10).empty


# ------------------------------------------------------------ services without managed slices


def manual_slice() -> Obj:
    return {"kind": "EndpointSlice", "addressType": "IPv4", "endpoints": [], "ports": [],
            "metadata": {"name": "web-manual", "namespace": NS, "uid": "m", "resourceVersion": "1",
                         "labels": {SERVICE_NAME_LABEL: "web"}}}  # fmt: skip


@pytest.mark.parametrize(
    "svc",
    [
        service(None),
        service({}),
        service({"app": "web"}, type="ExternalName", externalName="db.example.com"),
    ],
    ids=["no-selector", "empty-selector", "external-name"],
)
def test_a_service_without_selector_loses_managed_slices_and_keeps_manual_ones(svc: Obj) -> None:
    store = settled(many(150))
    assert len(store.objs) == 2
    store.objs["web-manual"] = manual_slice()
    run(store, many(150), T0 + 10, svc)
    assert list(store.objs) == ["web-manual"]
    assert reconcile(svc, many(150), store.list(), ZONES, T0 + 20).empty


def test_a_deleting_service_plans_nothing_and_a_stale_owners_slice_is_replaced() -> None:
    store = settled(many(3))
    deleting = copy.deepcopy(WEB)
    deleting["metadata"]["deletionTimestamp"] = format_time(T0)
    assert reconcile(deleting, [], store.list(), ZONES, T0 + 10).empty
    reborn = copy.deepcopy(WEB)
    reborn["metadata"]["uid"] = "svc-uid-2"
    plan = run(store, many(3), T0 + 10, reborn)
    assert len(plan.deletes) == 1 and len(plan.creates) == 1
    (s,) = store.objs.values()
    assert s["metadata"]["ownerReferences"][0]["uid"] == "svc-uid-2"


# ----------------------------------------------------------------------------- packing


def test_slices_hold_at_most_100_endpoints() -> None:
    store = Slices()
    run(store, many(250), T0)
    assert sorted(len(s["endpoints"]) for s in store.objs.values()) == [50, 100, 100]


def test_new_endpoints_fill_slices_with_room_before_a_new_slice() -> None:
    pods = many(150)
    store = settled(pods)
    left = [p for p in pods if p["metadata"]["name"] not in {f"p-{i:05d}" for i in range(30)}]
    plan = run(store, left + many(70, 1000), T0 + 10)  # 80 free places for 70 new endpoints
    assert not plan.creates and not plan.deletes and len(plan.updates) == 2
    assert sorted(len(s["endpoints"]) for s in store.objs.values()) == [90, 100]


def test_empty_slices_are_deleted_but_one_stays_while_there_are_no_endpoints() -> None:
    store = settled(many(250))
    plan = run(store, many(50), T0 + 10)  # the 50 remaining live in the first slice
    assert len(plan.deletes) == 2 and len(plan.updates) == 1 and not plan.creates
    run(store, [], T0 + 20)
    (placeholder,) = store.objs.values()
    assert placeholder["endpoints"] == [] and placeholder["ports"] == []
    assert reconcile(WEB, [], store.list(), ZONES, T0 + 30).empty
    plan = run(store, many(3), T0 + 30)  # the placeholder is reused, not replaced
    assert len(plan.updates) == 1 and not plan.creates and not plan.deletes


def test_a_service_with_no_pods_gets_one_empty_slice() -> None:
    store = Slices()
    plan = run(store, [], T0)
    assert len(plan.creates) == 1 and store.list()[0]["endpoints"] == []


def test_a_port_change_rewrites_each_slice_once_in_place() -> None:
    store = settled(many(250))
    names = set(store.objs)
    svc = service({"app": "web"}, ports=[{"name": "http", "port": 80, "targetPort": 9000}])
    plan = run(store, many(250), T0 + 10, svc)
    assert len(plan.updates) == 3 and not plan.creates and not plan.deletes
    assert set(store.objs) == names
    assert all(s["ports"][0]["port"] == 9000 for s in store.objs.values())


# ------------------------------------------------------- minimal churn at 5,000 pods


def test_readiness_flips_in_a_5000_pod_service_rewrite_only_their_slices() -> None:
    pods = many(5000)
    store = settled(pods)
    assert len(store.objs) == 50
    where = store.where()
    flipped = {f"p-{i:05d}" for i in range(0, 5000, 500)}  # 10 pods, 10 different slices
    changed = [pod(p["metadata"]["name"], p["status"]["podIP"], ready=False)
               if p["metadata"]["name"] in flipped else p for p in pods]  # fmt: skip
    plan = run(store, changed, T0 + 10)
    assert not plan.creates and not plan.deletes
    assert {u["metadata"]["name"] for u in plan.updates} == {where[n] for n in flipped}
    assert len(plan.updates) == 10
    assert store.where() == where  # nobody moved
    together = {f"p-{i:05d}" for i in range(10)}  # 10 pods of one slice: one write
    changed = [pod(p["metadata"]["name"], p["status"]["podIP"], deleting=True)
               if p["metadata"]["name"] in together else p for p in changed]  # fmt: skip
    assert len(run(store, changed, T0 + 20).updates) == 1


def test_a_rollout_step_in_a_5000_pod_service_rewrites_at_most_the_slices_it_touches() -> None:
    pods = many(5000)
    store = settled(pods)
    replaced = {f"p-{i:05d}" for i in range(7, 5000, 500)}  # 10 old pods from 10 slices
    new = many(10, 5000, prefix="q")
    rolled = [p for p in pods if p["metadata"]["name"] not in replaced] + new
    plan = run(store, rolled, T0 + 10)
    assert not plan.creates and not plan.deletes and 1 <= len(plan.updates) <= 10
    assert len(store.endpoints()) == 5000 and len(store.objs) == 50
    assert reconcile(WEB, rolled, store.list(), ZONES, T0 + 20).empty


# ------------------------------------------------------------- rate limit, fake clock


def test_a_quiet_slice_is_written_at_once_and_a_hot_one_batches_until_it_cools() -> None:
    pods = [pod("a", "10.0.0.1"), pod("b", "10.0.0.2")]
    store = settled(pods, T0)  # written at T0
    quiet = reconcile(
        WEB, [pod("a", "10.0.0.1", ready=False), pods[1]], store.list(), ZONES, T0 + 1.0
    )
    assert len(quiet.updates) == 1 and quiet.requeue_after is None  # 1 s later: cool, at once
    first = [pod("a", "10.0.0.1", ready=False), pods[1]]
    plan = run(store, first, T0 + 0.3)
    assert plan.empty and plan.requeue_after == pytest.approx(0.7)
    second = [pod("a", "10.0.0.1", ready=False), pod("b", "10.0.0.2", ready=False)]
    plan = run(store, second, T0 + 0.6)
    assert plan.empty and plan.requeue_after == pytest.approx(0.4)
    plan = run(store, second, T0 + 1.0)  # both changes in one write
    assert len(plan.updates) == 1 and plan.requeue_after is None
    assert not any(e["conditions"]["ready"] for e in store.endpoints().values())
    assert float(store.list()[0]["metadata"]["annotations"][LAST_WRITE]) == T0 + 1.0
    plan = run(store, pods, T0 + 1.5)  # flipped back at once: wait again
    assert plan.empty and plan.requeue_after == pytest.approx(0.5)


def test_a_hot_slice_holds_back_only_its_own_changes() -> None:
    pods = many(150)
    store = settled(pods)
    run(store, [pod("p-00000", "10.0.0.0", ready=False), *pods[1:]], T0 + 10)  # slice 1 hot
    slice_of = store.where()
    unready = [pod("p-00000", "10.0.0.0", ready=False), pod("p-00001", "10.0.0.1", ready=False)]
    changed = [*unready, *pods[2:149], pod("p-00149", "10.0.0.149", ready=False)]
    plan = run(store, changed, T0 + 10.2)
    assert [u["metadata"]["name"] for u in plan.updates] == [slice_of["p-00149"]]
    assert plan.requeue_after == pytest.approx(0.8)  # p-00001's change waits for slice 1
    assert store.endpoints()["p-00001"]["conditions"]["ready"] is True
    plan = run(store, changed, T0 + 11)
    assert [u["metadata"]["name"] for u in plan.updates] == [slice_of["p-00001"]]
    assert store.endpoints()["p-00001"]["conditions"]["ready"] is False


def test_new_endpoints_wait_for_a_hot_slice_with_room_rather_than_making_a_slice() -> None:
    pods = many(50)
    store = settled(pods)
    run(store, pods[1:], T0 + 10)  # a pod went: the slice is hot with room
    plan = run(store, [*pods[1:], *many(3, 100)], T0 + 10.5)
    assert plan.empty and plan.requeue_after == pytest.approx(0.5)
    plan = run(store, [*pods[1:], *many(3, 100)], T0 + 11)
    assert len(plan.updates) == 1 and not plan.creates and len(store.endpoints()) == 52


# ------------------------------------------------------------- the dispatcher's index


def change(kind: str, name: str, op: str = "A", **obj: Any) -> Change:
    body = {"kind": kind, "metadata": {"namespace": NS, "name": name, **obj.pop("meta", {})}}
    return Change(1, kind, op, "u-" + name, NS, name, 1, {**body, **obj})


def test_a_pod_change_wakes_the_services_that_select_it_now_or_before() -> None:
    index = NamespaceIndex()
    keys_of([change("Service", "web", spec={"selector": {"app": "web"}}),
             change("Service", "db", spec={"selector": {"app": "db"}}),
             change("Service", "manual", spec={})], index)  # fmt: skip
    web_pod = change("Pod", "p1", meta={"labels": {"app": "web"}})
    assert ("Service", NS, "web") in keys_of([web_pod], index)
    assert ("Service", NS, "db") not in keys_of([web_pod], index)
    relabelled = change("Pod", "p1", "M", meta={"labels": {"app": "db"}})
    assert {k for k in keys_of([relabelled], index) if k[0] == "Service"} == {
        ("Service", NS, "web"), ("Service", NS, "db")}  # fmt: skip
    gone = change("Pod", "p1", "D", meta={"labels": {"app": "db"}})
    assert [k for k in keys_of([gone], index) if k[0] == "Service"] == [("Service", NS, "db")]
    stray = change("Pod", "p2", meta={"labels": {"app": "cache"}})
    assert not [k for k in keys_of([stray], index) if k[0] == "Service"]


def test_a_slice_change_wakes_its_service_and_the_relist_knows_selectors_first() -> None:
    owned = change("EndpointSlice", "web-x", meta={"ownerReferences": [
        {"kind": "Service", "name": "web", "uid": "svc-uid", "controller": True}]})  # fmt: skip
    assert keys_of([owned]) == [("Service", NS, "web")]
    index = NamespaceIndex()
    listed = [change("Pod", "p1", meta={"labels": {"app": "web"}}),
              change("Service", "web", spec={"selector": {"app": "web"}})]  # fmt: skip
    keys_of(listed, index, listed=True)
    assert index.services.observe_pod(NS, "p1", {}, deleted=True) == ["web"]


def test_service_selectors_forget_a_service_whose_selector_went() -> None:
    sel = ServiceSelectors()
    sel.observe_service(NS, "web", service({"app": "web"}))
    assert sel.observe_pod(NS, "p", {"app": "web"}, deleted=False) == ["web"]
    sel.observe_service(NS, "web", service(None))
    assert sel.observe_pod(NS, "p", {"app": "web"}, deleted=False) == ["web"]  # it was there
    assert sel.observe_pod(NS, "p", {"app": "web"}, deleted=False) == []
