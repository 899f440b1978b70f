"""Server-side tables (``kubectl get``), the ``scale`` subresource's conversions, and the core
Events search kubectl describe sends: pure, table-driven."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import msgspec
import pytest

from app.api.core_events import event_list, split_selector
from app.api.discovery import resources
from app.cli.printers import table_headers, table_row
from app.core import errors, scale, table
from app.core.kinds import BY_KIND, KINDS

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
POD = {
    "apiVersion": "quaymaster.io/v1",
    "kind": "Pod",
    "metadata": {"name": "web-1", "namespace": "shop", "labels": {"app": "web"},
                 "creationTimestamp": "2026-01-01T11:55:00Z"},
    "spec": {"nodeName": "local-a", "priority": 100},
    "status": {"phase": "Running"},
}  # fmt: skip


@pytest.mark.parametrize(
    ("accept", "version"),
    [
        ("application/json;as=Table;v=v1;g=meta.k8s.io,application/json", "v1"),
        ("application/json;as=Table;v=v1beta1;g=meta.k8s.io", "v1beta1"),
        ("application/json; as=Table; v=v1; g=meta.k8s.io", "v1"),
        ("application/json", None),
        ("", None),
        ("application/json;as=Table;v=v2;g=meta.k8s.io", None),
        ("application/json;as=Table;v=v1;g=other.io", None),
        ("application/yaml;as=Table;v=v1;g=meta.k8s.io", None),
    ],
)
def test_a_table_is_asked_for_by_accept(accept: str, version: str | None) -> None:
    assert table.wants_table(accept) == version


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.kind)
def test_the_columns_and_cells_are_qm_gets(kind: Any) -> None:
    """The same headers and the same cells as ``qm get`` prints, for every kind."""
    obj = {**POD, "kind": kind.kind}
    columns = table.column_definitions(kind)
    names = [c["name"].upper() for c in columns]
    assert [n for n, c in zip(names, columns, strict=True) if c["priority"] == 0] == (
        table_headers(kind)
    )
    assert names == table_headers(kind, wide=True)  # -o wide adds the priority-1 ones
    assert table.cells(kind, obj, NOW) == table_row(kind, obj, now=NOW, wide=True)


def test_a_pod_row_and_what_it_carries() -> None:
    pod = BY_KIND["Pod"]
    body = table.table(pod, [POD], NOW, resource_version="42", cont="abc")
    assert (body["kind"], body["apiVersion"]) == ("Table", "meta.k8s.io/v1")
    assert body["metadata"] == {"resourceVersion": "42", "continue": "abc"}
    (row,) = body["rows"]
    assert row["cells"] == ["web-1", "local-a", "Running", "100", "5m", "app=web"]
    assert row["object"]["kind"] == "PartialObjectMetadata"
    assert row["object"]["metadata"]["labels"] == {"app": "web"}
    whole = table.table(pod, [POD], NOW, include="Object")["rows"][0]["object"]
    assert whole == POD
    assert "object" not in table.table(pod, [POD], NOW, include="None")["rows"][0]
    assert table.table(pod, [], NOW)["rows"] == []


@pytest.mark.parametrize(
    ("given", "include"),
    [(None, "Metadata"), ("", "Metadata"), ("Object", "Object"), ("None", "None"), ("x", None)],
)
def test_include_object(given: str | None, include: str | None) -> None:
    assert table.include_object(given) == include


def _deployment(replicas: Any = 3) -> dict[str, Any]:
    return {
        "metadata": {"name": "web", "namespace": "shop", "uid": "u", "resourceVersion": "7",
                     "labels": {"x": "y"}},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web", "tier": "a"}}},
        "status": {"replicas": 2, "active": 9},
    }  # fmt: skip


@pytest.mark.parametrize(
    ("kind", "spec_field", "status_replicas"),
    [("Deployment", "replicas", 2), ("ReplicaSet", "replicas", 2), ("Job", "parallelism", 9)],
)
def test_a_scale_is_the_kinds_size(kind: str, spec_field: str, status_replicas: int) -> None:
    obj = _deployment()
    obj["spec"][spec_field] = 4
    got = scale.to_scale(kind, obj)
    assert (got["apiVersion"], got["kind"]) == ("autoscaling/v1", "Scale")
    assert got["metadata"] == {"name": "web", "namespace": "shop", "uid": "u",
                               "resourceVersion": "7"}  # fmt: skip
    assert got["spec"] == {"replicas": 4}
    assert got["status"] == {"replicas": status_replicas, "selector": "app=web,tier=a"}
    assert scale.object_patch(kind, 5) == {"spec": {spec_field: 5}}
    assert scale.object_patch(kind, 5, "7") == {
        "spec": {spec_field: 5},
        "metadata": {"resourceVersion": "7"},
    }


def test_an_unset_size_is_one_and_a_selector_with_expressions() -> None:
    obj = _deployment(None)
    obj["spec"]["selector"] = {
        "matchLabels": {"app": "web"},
        "matchExpressions": [
            {"key": "tier", "operator": "In", "values": ["a", "b"]},
            {"key": "env", "operator": "NotIn", "values": ["dev"]},
            {"key": "team", "operator": "Exists"},
            {"key": "old", "operator": "DoesNotExist"},
        ],
    }
    got = scale.to_scale("Deployment", obj)
    assert got["spec"]["replicas"] == 1
    assert got["status"]["selector"] == "app=web,tier in (a,b),env notin (dev),team,!old"


BAD_SCALES = [None, {}, {"spec": {}}, {"spec": {"replicas": -1}}, {"spec": {"replicas": "3"}},
              {"spec": {"replicas": True}}]  # fmt: skip


@pytest.mark.parametrize("bad", BAD_SCALES)
def test_a_scale_without_a_valid_size_is_invalid(bad: Any) -> None:
    with pytest.raises(errors.StatusError) as caught:
        scale.wanted_replicas(bad, "web")
    assert caught.value.code == 422
    assert caught.value.causes[0].field == "spec.replicas"


@pytest.mark.parametrize(
    ("selector", "kept", "matches"),
    [
        ("involvedObject.name=web,involvedObject.namespace=shop,involvedObject.kind=Deployment",
         "involvedObject.name=web,involvedObject.kind=Deployment", True),
        ("involvedObject.namespace=other", None, False),
        ("involvedObject.namespace!=shop", None, False),
        ("involvedObject.namespace==shop", None, True),
        (None, None, True),
        ("reason=Scheduled", "reason=Scheduled", True),
    ],
)  # fmt: skip
def test_the_describe_search_drops_the_namespace_term(
    selector: str | None, kept: str | None, matches: bool
) -> None:
    assert split_selector(selector, "shop") == (kept, matches)


def test_events_answer_as_a_core_event_list() -> None:
    raw = msgspec.json.encode({"apiVersion": "quaymaster.io/v1", "kind": "Event", "reason": "X"})
    body = msgspec.json.decode(event_list([raw], 12, None))
    assert (body["kind"], body["apiVersion"]) == ("EventList", "v1")
    assert body["metadata"] == {"resourceVersion": "12"}
    assert body["items"] == [{"apiVersion": "v1", "kind": "Event", "reason": "X"}]


def test_discovery_names_the_scale_subresources_and_the_all_category() -> None:
    listed = {r["name"]: r for r in resources()["resources"]}
    for plural in ("deployments", "replicasets", "jobs"):
        sub = listed[f"{plural}/scale"]
        assert (sub["group"], sub["version"], sub["kind"]) == ("autoscaling", "v1", "Scale")
        assert sorted(sub["verbs"]) == ["get", "patch", "update"]
    assert "pods/scale" not in listed
    in_all = {name for name, r in listed.items() if "all" in r.get("categories", [])}
    assert in_all == {"pods", "services", "deployments", "replicasets", "jobs", "cronjobs"}
