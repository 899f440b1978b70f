"""Admission policies on the controllers' creates, with real Celery workers and the dispatcher
on a database of the test's own: a Deployment whose pods a policy refuses gets its ReplicaSet
but no pod, and the ReplicaSet shows ``FailedCreate`` naming the policy and the rule; a Job's
own pod streams are refused the same way; a policy in ``Warn`` mode, or one whose namespace
selector leaves the namespace out, lets the pods be made."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from plane import NS, Plane, start_worker
from test_job_controller import job_obj

from app.core.admission import admit
from app.core.kinds import BY_KIND


def insert(plane: Plane, kind: str, obj: dict[str, Any]) -> str:
    admitted = admit(BY_KIND[kind], obj, None)
    uid, meta = str(uuid.uuid4()), admitted["metadata"]
    body = {k: v for k, v in admitted.items() if k in BY_KIND[kind].spec_fields}
    spec = body["spec"] if BY_KIND[kind].spec_fields == ("spec",) else body
    plane.db.execute(
        f"INSERT INTO {BY_KIND[kind].table} (uid, namespace, name, labels, spec)"
        " VALUES (%s, %s, %s, %s, %s)",
        (uid, meta.get("namespace", ""), meta["name"], json.dumps(meta.get("labels") or {}),
         json.dumps(spec)),
    )  # fmt: skip
    return uid


def policy(plane: Plane, name: str, mode: str = "Enforce", selector: Any = None) -> None:
    spec: dict[str, Any] = {"mode": mode, "rules": {"denyPrivileged": True}}
    if selector is not None:
        spec["namespaceSelector"] = selector
    insert(plane, "AdmissionPolicy", {"kind": "AdmissionPolicy", "metadata": {"name": name},
                                      "spec": spec})  # fmt: skip


PRIVILEGED = {"name": "c", "image": "busybox", "securityContext": {"privileged": True}}


def deployment(plane: Plane, name: str) -> str:
    template = {"metadata": {"labels": {"app": name}}, "spec": {"containers": [PRIVILEGED]}}
    return insert(plane, "Deployment", {"kind": "Deployment", "metadata": {"name": name,
                  "namespace": NS}, "spec": {"replicas": 2, "selector": {"matchLabels":
                  {"app": name}}, "template": template}})  # fmt: skip


def owned(plane: Plane, table: str, uid: str) -> list[str]:
    rows = plane.db.execute(
        f"SELECT uid::text FROM {table} WHERE owner_references @> %s::jsonb",
        (json.dumps([{"uid": uid}]),),
    ).fetchall()
    return [r[0] for r in rows]


def failed_create(plane: Plane, uid: str) -> str | None:
    row = plane.db.execute(
        "SELECT spec->>'message' FROM events WHERE involved_uid = %s AND reason = 'FailedCreate'",
        (uid,),
    ).fetchone()
    return None if row is None else str(row[0])


def start(plane: Plane) -> None:
    start_worker(plane)
    plane.start("-m", "workers.dispatch")


def test_a_deployment_whose_pods_a_policy_refuses_shows_failed_create_naming_it(
    plane: Plane,
) -> None:
    policy(plane, "no-privileged")
    dep = deployment(plane, "web")
    start(plane)
    plane.wait(lambda: len(owned(plane, "replicasets", dep)) == 1, what="the ReplicaSet")
    (rs,) = owned(plane, "replicasets", dep)
    plane.wait(lambda: failed_create(plane, rs) is not None, what="FailedCreate on the RS")
    message = failed_create(plane, rs)
    assert message is not None
    assert message.startswith('Error creating: pods "web-')
    assert "is forbidden: violates AdmissionPolicy" in message, message
    assert 'AdmissionPolicy "no-privileged": denyPrivileged' in message, message
    assert plane.pods_of(rs) == []
    # The policy goes: the retry (within the workers' cache of 2 s) makes the pods.
    plane.db.execute("DELETE FROM admissionpolicies")
    plane.wait(lambda: len(plane.pods_of(rs)) == 2, what="the pods once the policy went")


def test_a_jobs_pods_are_refused_and_warn_or_unselected_policies_let_pods_be_made(
    plane: Plane,
) -> None:
    policy(plane, "strict", selector={"matchLabels": {"policy": "strict"}})
    policy(plane, "advice", mode="Warn")
    plane.db.execute(
        "INSERT INTO namespaces (uid, name, labels) VALUES (%s, %s, %s)",
        (str(uuid.uuid4()), NS, json.dumps({"policy": "relaxed"})),
    )
    job = job_obj("batch", parallelism=2, completions=2)
    job["spec"]["template"]["spec"]["containers"] = [PRIVILEGED]
    uid = insert(plane, "Job", job)
    start(plane)
    plane.wait(lambda: len(plane.pods_of(uid)) == 2, what="the Job's pods (warn, unselected)")
    assert failed_create(plane, uid) is None
    # The namespace is labelled into the enforcing policy: the next Job is refused.
    plane.db.execute("UPDATE namespaces SET labels = '{\"policy\": \"strict\"}' WHERE name = %s",
                     (NS,))  # fmt: skip
    time.sleep(2.5)  # the workers' policy cache
    job = job_obj("batch2", parallelism=2, completions=2)
    job["spec"]["template"]["spec"]["containers"] = [PRIVILEGED]
    uid2 = insert(plane, "Job", job)
    plane.wait(lambda: failed_create(plane, uid2) is not None, what="FailedCreate on the Job")
    message = failed_create(plane, uid2)
    assert message is not None and 'violates AdmissionPolicy "strict": denyPrivileged' in message
    assert plane.pods_of(uid2) == []
