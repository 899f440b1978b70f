"""Config rollouts in the Deployment controller's pure core: references found, templates pinned
to content-named snapshots, a content change rolling out, an old template bringing its config
back, and unused snapshots deleted with the history they belonged to."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from app.core.controllers.deployment import reconcile, template_hash
from app.core.controllers.deployment.config import (
    SNAPSHOT_LABEL,
    SOURCE_ANNOTATION,
    Configs,
    Source,
    digest,
    pin,
    references,
)

T0 = 1_800_000_000.0
NS = "default"


def dep(template_spec: dict[str, Any] | None = None) -> dict[str, Any]:
    spec = template_spec or {
        "containers": [{"name": "app", "image": "v1",
                        "envFrom": [{"configMapRef": {"name": "settings"}}]}],
    }  # fmt: skip
    return {
        "apiVersion": "quaymaster.io/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": NS, "uid": "dep-uid", "generation": 1},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}}, "spec": spec}},
        "status": {},
    }  # fmt: skip


def cm(name: str, data: dict[str, str], **labels: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": NS, "uid": f"uid-{name}"}
    if labels:
        meta["labels"] = labels
    return {"apiVersion": "quaymaster.io/v1", "kind": "ConfigMap", "metadata": meta, "data": data}


def configs(*objs: dict[str, Any], snapshots: tuple[dict[str, Any], ...] = ()) -> Configs:
    return Configs({(o["kind"], o["metadata"]["name"]): Source(o, digest(o)) for o in objs},
                   snapshots)  # fmt: skip


def test_every_kind_of_reference_is_found() -> None:
    spec = {
        "volumes": [{"name": "a", "configMap": {"name": "cm-vol"}},
                    {"name": "b", "secret": {"secretName": "s-vol"}},
                    {"name": "c", "emptyDir": {}}],
        "initContainers": [{"name": "i", "image": "x",
                            "env": [{"name": "E", "valueFrom": {"secretKeyRef":
                                     {"name": "s-env", "key": "k"}}}]}],
        "containers": [{"name": "app", "image": "x",
                        "env": [{"name": "F", "valueFrom": {"configMapKeyRef":
                                 {"name": "cm-env", "key": "k"}}},
                                {"name": "G", "valueFrom": {"fieldRef":
                                 {"fieldPath": "metadata.name"}}}],
                        "envFrom": [{"configMapRef": {"name": "cm-from"}},
                                    {"secretRef": {"name": "s-from"}}]}],
    }  # fmt: skip
    assert references({"spec": spec}) == {
        ("ConfigMap", "cm-vol"), ("ConfigMap", "cm-env"), ("ConfigMap", "cm-from"),
        ("Secret", "s-vol"), ("Secret", "s-env"), ("Secret", "s-from"),
    }  # fmt: skip


def test_a_template_is_pinned_to_a_content_named_snapshot() -> None:
    d = dep()
    out = pin(d, d["spec"]["template"], configs(cm("settings", {"mode": "a"})))
    (snap,) = out.creates
    name = out.template["spec"]["containers"][0]["envFrom"][0]["configMapRef"]["name"]
    assert name == snap["metadata"]["name"] and name.startswith("settings-") and len(name) == 19
    assert snap["data"] == {"mode": "a"} and snap["immutable"] is True
    assert snap["metadata"]["labels"] == {SNAPSHOT_LABEL: "true"}
    assert snap["metadata"]["annotations"] == {SOURCE_ANNOTATION: "settings"}
    assert snap["metadata"]["ownerReferences"][0]["uid"] == "dep-uid"
    # The caller's template is untouched; the same content pins to the same name.
    assert d["spec"]["template"]["spec"]["containers"][0]["envFrom"][0]["configMapRef"] == {
        "name": "settings"
    }
    again = pin(d, d["spec"]["template"], configs(cm("settings", {"mode": "a"}),
                                                  snapshots=(snap,)))  # fmt: skip
    assert again.template == out.template and again.creates == ()
    changed = pin(d, d["spec"]["template"], configs(cm("settings", {"mode": "b"})))
    assert template_hash(changed.template) != template_hash(out.template)


@pytest.mark.parametrize(
    "sources",
    [
        (),  # not there (yet): the reference stays as written
        (cm("settings", {"mode": "a"}, **{SNAPSHOT_LABEL: "true"}),),  # a snapshot already
    ],
)
def test_missing_sources_and_snapshots_are_left_as_written(sources: tuple[Any, ...]) -> None:
    d = dep()
    out = pin(d, d["spec"]["template"], configs(*sources))
    assert out.template == d["spec"]["template"] and out.creates == ()


def test_the_same_content_for_another_deployment_gets_a_snapshot_of_its_own() -> None:
    a, b = dep(), dep()
    b["metadata"]["uid"] = "other-uid"
    src = configs(cm("settings", {"mode": "a"}))
    (sa,), (sb,) = pin(a, a["spec"]["template"], src).creates, pin(b, b["spec"]["template"],
                                                                   src).creates  # fmt: skip
    assert sa["metadata"]["name"] != sb["metadata"]["name"]


def _apply(plan: Any, store: dict[tuple[str, str], dict[str, Any]]) -> None:
    for obj in plan.creates:
        obj = copy.deepcopy(obj)
        obj["metadata"].setdefault("uid", f"uid-{obj['metadata']['name']}")
        obj["metadata"].setdefault("creationTimestamp", "2027-01-15T08:00:00Z")
        store[(obj["kind"], obj["metadata"]["name"])] = obj
    for d in plan.deletes:
        store.pop((d.kind, d.name), None)
    for obj in plan.updates:
        store[(obj["kind"], obj["metadata"]["name"])] = copy.deepcopy(obj)


def _configs(store: dict[tuple[str, str], dict[str, Any]]) -> Configs:
    snaps = tuple(o for o in store.values() if o["kind"] == "ConfigMap"
                  and (o["metadata"].get("labels") or {}).get(SNAPSHOT_LABEL))  # fmt: skip
    return configs(*[o for o in store.values() if o["kind"] == "ConfigMap"], snapshots=snaps)


def _ready(store: dict[tuple[str, str], dict[str, Any]]) -> None:
    """The ReplicaSet controller and kubelets, instantly: every ReplicaSet's pods available."""
    for obj in store.values():
        if obj["kind"] == "ReplicaSet":
            n = obj["spec"]["replicas"]
            obj["status"] = {"replicas": n, "readyReplicas": n, "availableReplicas": n,
                             "observedGeneration": 1}  # fmt: skip


def _converge(d: dict[str, Any], store: dict[tuple[str, str], dict[str, Any]]) -> None:
    for i in range(20):
        rss = [o for o in store.values() if o["kind"] == "ReplicaSet"]
        plan = reconcile(d, rss, [], T0 + i, _configs(store))
        _apply(plan, store)
        _ready(store)
        if plan.status is not None:
            d["status"] = plan.status
        if not plan.creates and not plan.deletes and not plan.updates:
            return
    raise AssertionError("the Deployment did not settle")


def _active(store: dict[tuple[str, str], dict[str, Any]]) -> list[str]:
    """The config each ReplicaSet with pods reads, as the content of its snapshot."""
    out = []
    for rs in store.values():
        if rs["kind"] == "ReplicaSet" and rs["spec"]["replicas"] > 0:
            ref = rs["spec"]["template"]["spec"]["containers"][0]["envFrom"][0]["configMapRef"]
            out.append(store[("ConfigMap", ref["name"])]["data"]["mode"])
    return out


def test_a_config_change_rolls_out_and_the_old_template_brings_the_old_config_back() -> None:
    d = dep()
    store = {("ConfigMap", "settings"): cm("settings", {"mode": "a"})}
    _converge(d, store)
    assert _active(store) == ["a"]
    first = next(o for o in store.values() if o["kind"] == "ReplicaSet")

    store[("ConfigMap", "settings")] = cm("settings", {"mode": "b"})
    _converge(d, store)
    assert _active(store) == ["b"]
    assert len([o for o in store.values() if o["kind"] == "ReplicaSet"]) == 2

    # The undo: the old ReplicaSet's template (which names the old snapshot) is put back.
    d["spec"]["template"] = copy.deepcopy(first["spec"]["template"])
    d["spec"]["template"]["metadata"]["labels"].pop("pod-template-hash")
    _converge(d, store)
    assert _active(store) == ["a"]
    rss = [o for o in store.values() if o["kind"] == "ReplicaSet"]
    assert len(rss) == 2  # the old ReplicaSet is the new one again: no third


def test_unused_snapshots_go_with_the_history_that_used_them() -> None:
    d = dep()
    d["spec"]["revisionHistoryLimit"] = 0
    store = {("ConfigMap", "settings"): cm("settings", {"mode": "a"})}
    _converge(d, store)
    for mode in ("b", "c"):
        store[("ConfigMap", "settings")] = cm("settings", {"mode": mode})
        _converge(d, store)
    snaps = [o for o in store.values() if (o["metadata"].get("labels") or {}).get(SNAPSHOT_LABEL)]
    assert [s["data"]["mode"] for s in snaps] == ["c"]
    assert [o["metadata"]["name"] for o in store.values() if o["kind"] == "ReplicaSet"] == [
        f"web-{template_hash(reconcile_template(d, store))}"
    ]


def reconcile_template(d: dict[str, Any], store: dict[tuple[str, str], dict[str, Any]]) -> Any:
    return pin(d, d["spec"]["template"], _configs(store)).template


def test_without_configs_nothing_changes() -> None:
    d = dep()
    plan = reconcile(d, [], [], T0)
    (rs,) = plan.creates
    assert rs["kind"] == "ReplicaSet"
    assert rs["spec"]["template"]["spec"]["containers"][0]["envFrom"][0]["configMapRef"] == {
        "name": "settings"
    }


def test_a_deleted_source_keeps_the_snapshot_the_pods_read_and_rolls_nothing_out() -> None:
    d = dep()
    store = {("ConfigMap", "settings"): cm("settings", {"mode": "a"})}
    _converge(d, store)
    before = {k: v["metadata"]["name"] for k, v in store.items() if k[0] == "ReplicaSet"}
    del store[("ConfigMap", "settings")]
    _converge(d, store)
    assert {k: v["metadata"]["name"] for k, v in store.items() if k[0] == "ReplicaSet"} == before
    assert _active(store) == ["a"]
    # Put back with new content: that is a change, and it rolls out.
    store[("ConfigMap", "settings")] = cm("settings", {"mode": "b"})
    _converge(d, store)
    assert _active(store) == ["b"]
