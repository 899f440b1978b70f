"""The EndpointSlice controller end to end: real PostgreSQL and revisioner, real Redis, a real
Celery worker and the dispatcher (running the Service controller and the garbage collector).
There is no node agent: the tests play it (and the scheduler) by writing pods' ``podIP``,
``Ready`` condition and ``spec.nodeName`` with SQL.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from plane import NS, Plane, start_worker

from app.core.admission import admit
from app.core.kinds import BY_KIND

MANAGED = "endpointslice-controller.quaymaster.io"


def _insert(plane: Plane, kind: str, obj: dict[str, Any], status: Any = None) -> str:
    k = BY_KIND[kind]
    admitted = admit(k, obj, None)
    uid = str(uuid.uuid4())
    meta = admitted["metadata"]
    if k.spec_fields == ("spec",):
        spec = admitted.get("spec") or {}
    else:  # an EndpointSlice keeps its fields at the top level
        spec = {f: admitted[f] for f in k.spec_fields if f in admitted}
    plane.db.execute(
        f"INSERT INTO {BY_KIND[kind].table} (uid, namespace, name, labels, spec, status)"
        " VALUES (%s, %s, %s, %s, %s, %s)",
        (uid, meta.get("namespace", ""), meta["name"], json.dumps(meta.get("labels") or {}),
         json.dumps(spec), json.dumps(status or {})),
    )  # fmt: skip
    return uid


def node(plane: Plane, name: str, zone: str) -> None:
    labels = {"topology.kubernetes.io/zone": zone}
    _insert(plane, "Node", {"kind": "Node", "metadata": {"name": name, "labels": labels}})


def service(plane: Plane, name: str, selector: dict[str, str] | None) -> str:
    spec: dict[str, Any] = {"ports": [{"name": "http", "port": 80, "targetPort": "http"}]}
    if selector is not None:
        spec["selector"] = selector
    meta = {"name": name, "namespace": NS}
    return _insert(plane, "Service", {"kind": "Service", "metadata": meta, "spec": spec})


def pod_status(ip: str, ready: bool) -> dict[str, Any]:
    ready_cond = {"type": "Ready", "status": "True" if ready else "False"}
    return {"phase": "Running", "podIP": ip, "conditions": [ready_cond]}


def pod(plane: Plane, name: str, ip: str, node_name: str, app: str = "web") -> str:
    container = {"name": "c", "image": "busybox",
                 "ports": [{"name": "http", "containerPort": 8000}]}  # fmt: skip
    obj = {"kind": "Pod", "metadata": {"name": name, "namespace": NS, "labels": {"app": app}},
           "spec": {"nodeName": node_name, "containers": [container]}}  # fmt: skip
    return _insert(plane, "Pod", obj, pod_status(ip, True))


def slices(plane: Plane, service_name: str) -> list[dict[str, Any]]:
    rows = plane.db.execute(
        "SELECT name, labels, annotations, owner_references, spec, row_version"
        " FROM endpointslices WHERE namespace = %s AND service_name = %s ORDER BY name",
        (NS, service_name),
    ).fetchall()
    return [
        {"name": r[0], "labels": r[1], "annotations": r[2], "owners": r[3], **r[4], "rv": r[5]}
        for r in rows
    ]


def endpoints(plane: Plane, service_name: str) -> dict[str, dict[str, Any]]:
    return {
        e["targetRef"]["name"]: e
        for s in slices(plane, service_name)
        if s["labels"].get("endpointslice.kubernetes.io/managed-by") == MANAGED
        for e in s.get("endpoints") or []
    }


def conditions(plane: Plane, pod_name: str) -> tuple[bool, bool, bool] | None:
    e = endpoints(plane, "web").get(pod_name)
    if e is None:
        return None
    c = e["conditions"]
    return c["ready"], c["serving"], c["terminating"]


def start(plane: Plane) -> None:
    plane.env["QM_CONTROLLERS"] = "Service,Garbage"
    start_worker(plane)
    plane.start("-m", "workers.dispatch")


def test_endpoints_follow_readiness_and_deletion_and_go_with_the_service(plane: Plane) -> None:
    node(plane, "node-a", "zone-a")
    node(plane, "node-b", "zone-b")
    svc_uid = service(plane, "web", {"app": "web"})
    for i, node_name in enumerate(("node-a", "node-b", "node-a")):
        pod(plane, f"web-{i}", f"10.88.0.{11 + i}", node_name)
    pod(plane, "db-0", "10.88.0.20", "node-a", app="db")
    start(plane)
    plane.wait(lambda: len(endpoints(plane, "web")) == 3, what="three endpoints")
    (s,) = slices(plane, "web")
    assert s["addressType"] == "IPv4"
    assert s["ports"] == [{"name": "http", "port": 8000, "protocol": "TCP"}]
    assert s["owners"][0]["uid"] == svc_uid and s["owners"][0]["controller"] is True
    e = endpoints(plane, "web")["web-1"]
    assert e["addresses"] == ["10.88.0.12"] and (e["nodeName"], e["zone"]) == ("node-b", "zone-b")
    assert e["targetRef"]["kind"] == "Pod" and e["targetRef"]["namespace"] == NS
    assert conditions(plane, "web-0") == (True, True, False)

    plane.db.execute("UPDATE pods SET status = %s WHERE namespace = %s AND name = 'web-0'",
                     (json.dumps(pod_status("10.88.0.11", False)), NS))  # fmt: skip
    plane.wait(lambda: conditions(plane, "web-0") == (False, False, False), what="not ready")

    plane.db.execute(
        "UPDATE pods SET deletion_timestamp = now(), deletion_grace_period_seconds = 30"
        " WHERE namespace = %s AND name = 'web-1'",
        (NS,),
    )
    plane.wait(lambda: conditions(plane, "web-1") == (False, True, True), what="terminating")
    plane.db.execute("DELETE FROM pods WHERE namespace = %s AND name = 'web-1'", (NS,))
    plane.wait(lambda: conditions(plane, "web-1") is None, what="the deleted pod's endpoint gone")

    pod(plane, "web-3", "10.88.0.14", "node-b")
    plane.wait(lambda: conditions(plane, "web-3") == (True, True, False), what="a new endpoint")
    assert len(slices(plane, "web")) == 1  # it filled the slice with room
    settled = slices(plane, "web")[0]["rv"]
    time.sleep(2.5)  # a resync later, nothing changed: nothing written
    assert slices(plane, "web")[0]["rv"] == settled

    plane.db.execute("DELETE FROM services WHERE namespace = %s AND name = 'web'", (NS,))
    plane.wait(lambda: not slices(plane, "web"), what="the slices gone with the service")


def test_a_selector_is_what_makes_slices_managed(plane: Plane) -> None:
    node(plane, "node-a", "zone-a")
    service(plane, "manual", None)
    ep = {"addresses": ["10.9.9.9"], "conditions": {"ready": True}}
    manual = {"kind": "EndpointSlice", "addressType": "IPv4", "endpoints": [ep], "ports": [],
              "metadata": {"name": "manual-1", "namespace": NS,
                           "labels": {"kubernetes.io/service-name": "manual"}}}  # fmt: skip
    _insert(plane, "EndpointSlice", manual)
    pod(plane, "web-0", "10.88.0.11", "node-a")
    start(plane)
    plane.db.execute(
        "UPDATE services SET spec = jsonb_set(spec, '{selector}', '{\"app\": \"web\"}')"
        " WHERE namespace = %s AND name = 'manual'",
        (NS,),
    )
    plane.wait(lambda: len(slices(plane, "manual")) == 2, what="a managed slice beside the manual")
    plane.db.execute(
        "UPDATE services SET spec = spec - 'selector' WHERE namespace = %s AND name = 'manual'",
        (NS,),
    )
    plane.wait(lambda: [s["name"] for s in slices(plane, "manual")] == ["manual-1"],
               what="only the manual slice left")  # fmt: skip
    assert slices(plane, "manual")[0]["endpoints"] == [ep]
