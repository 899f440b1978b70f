from __future__ import annotations

import copy

import pytest

from app.core.admission import DEFAULT_MAX_BYTES, admit
from app.core.errors import BadRequest, Invalid, RequestEntityTooLarge
from app.core.kinds import API_VERSION, BY_KIND, KINDS


@pytest.mark.parametrize("kind", [k.kind for k in KINDS])
def test_every_kind_has_a_valid_manifest_that_is_admitted(kind, valid, accept) -> None:
    obj = valid(kind)
    before = copy.deepcopy(obj)
    out = accept(kind, obj)
    assert obj == before, "admission must not modify its input"
    assert out is not obj
    assert out["apiVersion"] == API_VERSION and out["kind"] == kind
    # Admission is idempotent: admitting the result again changes nothing.
    assert accept(kind, copy.deepcopy(out)) == out


@pytest.mark.parametrize("kind", [k.kind for k in KINDS])
def test_every_kind_accepts_an_update_to_itself(kind, valid, accept) -> None:
    stored = accept(kind, valid(kind))
    stored["metadata"].update(uid="u-1", creationTimestamp="2024-01-01T00:00:00Z")
    assert accept(kind, copy.deepcopy(stored), stored) == stored


def test_missing_type_meta_is_filled_in(valid, accept) -> None:
    obj = valid("ConfigMap")
    del obj["apiVersion"], obj["kind"]
    out = accept("ConfigMap", obj)
    assert out["apiVersion"] == API_VERSION and out["kind"] == "ConfigMap"


@pytest.mark.parametrize(
    ("field", "value"),
    [("apiVersion", "v1"), ("apiVersion", "apps/v1"), ("kind", "Deployment"), ("kind", 5)],
)
def test_wrong_type_meta(field, value, valid, reject) -> None:
    obj = valid("Pod")
    obj[field] = value
    causes = reject("Pod", obj)
    assert [c.field for c in causes] == [field]
    assert causes[0].reason == "FieldValueNotSupported"


def test_unknown_top_level_fields_are_rejected(valid, reject) -> None:
    obj = valid("Pod")
    obj["sepc"] = {}
    obj["extra"] = 1
    causes = reject("Pod", obj)
    assert {c.field for c in causes} == {"sepc", "extra"}
    assert all(c.reason == "FieldValueNotSupported" for c in causes)
    assert any("unknown field" in c.message for c in causes)


@pytest.mark.parametrize("kind", ["ConfigMap", "Secret", "EndpointSlice", "PriorityClass", "Event"])
def test_status_is_unknown_for_kinds_without_status(kind, valid, fields_of) -> None:
    obj = valid(kind)
    obj["status"] = {}
    assert fields_of(kind, obj) == {"status"}


def test_top_level_spec_fields_are_allowed_for_flat_kinds(valid, accept) -> None:
    obj = valid("ConfigMap")
    obj["binaryData"] = {"bin": "AAE="}
    obj["immutable"] = True
    assert accept("ConfigMap", obj)["immutable"] is True


def test_body_must_be_an_object() -> None:
    bodies: list[object] = [[], "x", None, 5]
    for body in bodies:
        with pytest.raises(BadRequest):
            admit(BY_KIND["Pod"], body, None)


@pytest.mark.parametrize(
    ("kind", "edit_path", "value", "field"),
    [
        ("Pod", ("metadata",), [], "metadata"),
        ("Pod", ("metadata",), "x", "metadata"),
        ("Pod", ("metadata", "name"), "Web", "metadata.name"),
        ("Pod", ("metadata", "name"), "web_0", "metadata.name"),
        ("Pod", ("metadata", "name"), "a" * 254, "metadata.name"),
        ("Pod", ("metadata", "name"), 5, "metadata.name"),
        ("Service", ("metadata", "name"), "web.x", "metadata.name"),
        ("Service", ("metadata", "name"), "a" * 64, "metadata.name"),
        ("Namespace", ("metadata", "name"), "a.b", "metadata.name"),
        ("Pod", ("metadata", "namespace"), "Default", "metadata.namespace"),
        ("Pod", ("metadata", "namespace"), "", "metadata.namespace"),
        ("Pod", ("metadata", "namespace"), ["default"], "metadata.namespace"),
        ("Node", ("metadata", "namespace"), "default", "metadata.namespace"),
        ("Pod", ("metadata", "labels"), ["a"], "metadata.labels"),
        ("Pod", ("metadata", "labels"), {"a": 1}, "metadata.labels.a"),
        ("Pod", ("metadata", "labels"), {"bad key": "v"}, "metadata.labels"),
        ("Pod", ("metadata", "labels"), {"k": "bad value!"}, "metadata.labels"),
        ("Pod", ("metadata", "labels"), {"k": "v" * 64}, "metadata.labels"),
        ("Pod", ("metadata", "labels"), {"a/b/c": "v"}, "metadata.labels"),
        ("Pod", ("metadata", "annotations"), "x", "metadata.annotations"),
        ("Pod", ("metadata", "annotations"), {"a": {"b": 1}}, "metadata.annotations.a"),
        ("Pod", ("metadata", "annotations"), {"bad key": "v"}, "metadata.annotations"),
        ("Pod", ("metadata", "annotations"), {"a": "x" * 300_000}, "metadata.annotations"),
        ("Pod", ("metadata", "ownerReferences"), {}, "metadata.ownerReferences"),
        ("Pod", ("metadata", "ownerReferences"), ["x"], "metadata.ownerReferences[0]"),
        ("Pod", ("metadata", "ownerReferences"),
         [{"apiVersion": "quaymaster.io/v1", "kind": "ReplicaSet", "name": "rs"}],
         "metadata.ownerReferences[0].uid"),
        ("Pod", ("metadata", "ownerReferences"),
         [{"apiVersion": "v", "kind": "K", "name": "n", "uid": "u", "controller": "yes"}],
         "metadata.ownerReferences[0].controller"),
        ("Pod", ("metadata", "finalizers"), "x", "metadata.finalizers"),
        ("Pod", ("metadata", "finalizers"), [1], "metadata.finalizers[0]"),
        ("Pod", ("metadata", "finalizers"), ["bad finalizer"], "metadata.finalizers[0]"),
        ("Pod", ("metadata", "finalizers"), ["a.io/x", "a.io/x"], "metadata.finalizers[1]"),
        ("Pod", ("metadata", "creationTimestamp"), "yesterday", "metadata.creationTimestamp"),
        ("Pod", ("metadata", "creationTimestamp"), "2024-13-01T00:00:00Z",
         "metadata.creationTimestamp"),
        ("Pod", ("metadata", "generation"), -1, "metadata.generation"),
        ("Pod", ("metadata", "resourceVersion"), 5, "metadata.resourceVersion"),
    ],
)  # fmt: skip
def test_metadata_errors(kind, edit_path, value, field, valid, edit, fields_of) -> None:
    obj = edit(valid(kind), edit_path, value)
    assert field in fields_of(kind, obj)


def test_multiple_controllers_rejected(valid, edit, fields_of) -> None:
    ref = {"apiVersion": "v", "kind": "K", "name": "n", "uid": "u", "controller": True}
    obj = edit(valid("Pod"), ("metadata", "ownerReferences"), [ref, {**ref, "uid": "v"}])
    assert fields_of("Pod", obj) == {"metadata.ownerReferences"}


def test_name_or_generate_name(valid, accept, fields_of, remove, edit) -> None:
    obj = remove(valid("Pod"), ("metadata", "name"))
    assert fields_of("Pod", obj) == {"metadata.name"}
    edit(obj, ("metadata", "generateName"), "web-")
    out = accept("Pod", obj)
    assert "name" not in out["metadata"] and out["metadata"]["generateName"] == "web-"
    edit(obj, ("metadata", "generateName"), "Web-")
    assert fields_of("Pod", obj) == {"metadata.generateName"}


def test_namespace_required_for_namespaced_kinds(valid, remove, fields_of) -> None:
    assert fields_of("Pod", remove(valid("Pod"), ("metadata", "namespace"))) == {
        "metadata.namespace"
    }


def test_cluster_scoped_empty_namespace_is_dropped(valid, edit, accept) -> None:
    out = accept("Node", edit(valid("Node"), ("metadata", "namespace"), ""))
    assert "namespace" not in out["metadata"]


def test_null_members_mean_unset(valid, edit, accept) -> None:
    obj = edit(valid("Pod"), ("metadata", "creationTimestamp"), None)
    edit(obj, ("spec", "nodeName"), None)
    out = accept("Pod", obj)
    assert "creationTimestamp" not in out["metadata"]
    assert "nodeName" not in out["spec"]


def test_every_problem_is_reported(valid, edit, reject) -> None:
    obj = valid("Pod")
    edit(obj, ("metadata", "name"), "Bad_Name")
    edit(obj, ("metadata", "labels"), {"ok": "bad value!"})
    edit(obj, ("spec", "containers", 0, "image"), "")
    edit(obj, ("spec", "restartPolicy"), "Sometimes")
    edit(obj, ("spec", "containers", 0, "resources"), {"requests": {"cpu": "lots"}})
    causes = reject("Pod", obj)
    assert {c.field for c in causes} == {
        "metadata.name",
        "metadata.labels",
        "spec.containers[0].image",
        "spec.restartPolicy",
        "spec.containers[0].resources.requests.cpu",
    }
    with pytest.raises(Invalid) as info:
        admit(BY_KIND["Pod"], obj, None)
    assert info.value.name == "Bad_Name" and info.value.kind == "Pod"
    for c in causes:
        assert c.field in info.value.message
    status = info.value.to_status()
    assert status["code"] == 422 and len(status["details"]["causes"]) == len(causes)


def test_size_limit(valid, edit) -> None:
    obj = edit(valid("ConfigMap"), ("data",), {"big": "x" * 2_000})
    with pytest.raises(RequestEntityTooLarge) as info:
        admit(BY_KIND["ConfigMap"], obj, None, max_bytes=1_000)
    assert info.value.code == 413
    huge = edit(valid("ConfigMap"), ("data",), {"big": "x" * (DEFAULT_MAX_BYTES + 1)})
    with pytest.raises(RequestEntityTooLarge):
        admit(BY_KIND["ConfigMap"], huge, None)


# ---------------------------------------------------------------------------- updates


def _stored(kind, valid, accept):
    out = accept(kind, valid(kind))
    out["metadata"].update(
        uid="uid-1", creationTimestamp="2024-01-01T00:00:00Z", resourceVersion="7"
    )
    return out


def test_update_carries_identity(valid, accept) -> None:
    old = _stored("ConfigMap", valid, accept)
    new = valid("ConfigMap")
    new["data"] = {"key": "changed"}
    out = accept("ConfigMap", new, old)
    assert out["metadata"]["uid"] == "uid-1"
    assert out["metadata"]["creationTimestamp"] == "2024-01-01T00:00:00Z"
    assert out["data"] == {"key": "changed"}


def test_update_cannot_change_creation_or_deletion_time(valid, accept) -> None:
    old = _stored("ConfigMap", valid, accept)
    old["metadata"]["deletionTimestamp"] = "2024-02-01T00:00:00Z"
    new = copy.deepcopy(old)
    new["metadata"]["creationTimestamp"] = "2030-01-01T00:00:00Z"
    del new["metadata"]["deletionTimestamp"]
    out = accept("ConfigMap", new, old)
    assert out["metadata"]["creationTimestamp"] == "2024-01-01T00:00:00Z"
    assert out["metadata"]["deletionTimestamp"] == "2024-02-01T00:00:00Z"


@pytest.mark.parametrize(
    ("field", "value"), [("name", "other"), ("namespace", "other"), ("uid", "uid-2")]
)
def test_update_identity_is_immutable(field, value, valid, accept, fields_of) -> None:
    old = _stored("ConfigMap", valid, accept)
    new = copy.deepcopy(old)
    new["metadata"][field] = value
    assert f"metadata.{field}" in fields_of("ConfigMap", new, old)


def test_update_keeps_status_when_omitted(valid, accept) -> None:
    old = _stored("Pod", valid, accept)
    old["status"] = {"phase": "Running"}
    new = copy.deepcopy(old)
    del new["status"]
    assert accept("Pod", new, old)["status"] == {"phase": "Running"}
