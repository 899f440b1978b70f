"""Bad input against a real API server: every rejection is a clear ``kind: Status`` with the
right code, reason and field causes, and leaves the database exactly as it was.

Also covers conditional writes under contention, hostile query parameters and list paging.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import psycopg
import pytest

from app.core.kinds import KINDS

API = "/apis/quaymaster.io/v1"
NS = "api-errors"
NS_PAGING = "api-errors-paging"
NS_RACE = "api-errors-race"
CM = f"{API}/namespaces/{NS}/configmaps"
MERGE = {"Content-Type": "application/merge-patch+json"}
JSONPATCH = {"Content-Type": "application/json-patch+json"}


# ---------------------------------------------------------------------------- helpers


def _ensure_namespace(http: httpx.Client, name: str) -> None:
    r = http.post(
        f"{API}/namespaces",
        json={"apiVersion": "quaymaster.io/v1", "kind": "Namespace", "metadata": {"name": name}},
    )
    assert r.status_code in (201, 409), r.text


@pytest.fixture(scope="module")
def http(api_server) -> Iterator[httpx.Client]:  # type: ignore[no-untyped-def]
    headers = {"Authorization": f"Bearer {api_server.token}"}
    with httpx.Client(base_url=api_server.url, headers=headers, timeout=30.0) as c:
        for name in (NS, NS_PAGING, NS_RACE):
            _ensure_namespace(c, name)
        yield c


@pytest.fixture(scope="module")
def db(pg_url: str) -> Iterator[psycopg.Connection]:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        yield conn


def status_of(r: httpx.Response, code: int, reason: str) -> dict[str, Any]:
    """The response must be a failure ``Status`` with this code and reason."""
    assert r.status_code == code, f"expected {code}, got {r.status_code}: {r.text}"
    assert r.headers["content-type"].startswith("application/json")
    body = r.json()
    assert body["kind"] == "Status", body
    assert body["apiVersion"] == "v1"
    assert body["status"] == "Failure"
    assert body["code"] == code
    assert body["reason"] == reason, body
    assert isinstance(body["message"], str) and body["message"].strip()
    return body


def causes_of(body: dict[str, Any]) -> dict[str, list[dict[str, str]]]:
    """Causes grouped by field path."""
    out: dict[str, list[dict[str, str]]] = {}
    for cause in body["details"]["causes"]:
        assert set(cause) == {"field", "reason", "message"}, cause
        assert cause["message"]
        out.setdefault(cause["field"], []).append(cause)
    return out


def _snapshot(db: psycopg.Connection, namespace: str) -> tuple[list[tuple[Any, ...]], int]:
    rows: list[tuple[Any, ...]] = []
    for k in KINDS:
        rows += db.execute(
            f"SELECT '{k.table}', name, row_version FROM {k.table} WHERE namespace = %s",
            (namespace,),
        ).fetchall()
    audit = db.execute(
        "SELECT count(*) FROM qm_history WHERE namespace = %s", (namespace,)
    ).fetchone()
    assert audit is not None
    return sorted(rows), int(audit[0])


@contextmanager
def nothing_written(db: psycopg.Connection, namespace: str = NS) -> Iterator[None]:
    """Assert that no object row in ``namespace`` changed and no audit row was added."""
    before = _snapshot(db, namespace)
    yield
    assert _snapshot(db, namespace) == before, "a rejected request changed the database"


def cm(name: str, data: dict[str, str] | None = None, **meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": "quaymaster.io/v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, **meta},
        "data": data if data is not None else {"k": "v"},
    }


def pod(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "quaymaster.io/v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}], **spec},
    }


def deployment(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "quaymaster.io/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]},
            },
        },
    }


def create_cm(http: httpx.Client, name: str, **kw: Any) -> dict[str, Any]:
    r = http.post(CM, json=cm(name, **kw))
    assert r.status_code == 201, r.text
    return r.json()


def post_raw(http: httpx.Client, path: str, content: bytes) -> httpx.Response:
    return http.post(path, content=content, headers={"Content-Type": "application/json"})


# ---------------------------------------------------------------------------- body decoding


def test_malformed_json_is_bad_request(http, db) -> None:
    with nothing_written(db):
        for raw in (b'{"apiVersion": "quaymaster.io/v1", "kind": ', b"{'a': 1}", b"\xff\xfe{"):
            body = status_of(post_raw(http, CM, raw), 400, "BadRequest")
            assert "not valid JSON" in body["message"]


@pytest.mark.parametrize("raw", [b"[1, 2]", b'"configmap"', b"42", b"null", b"true"])
def test_non_object_body_is_bad_request(http, db, raw: bytes) -> None:
    with nothing_written(db):
        body = status_of(post_raw(http, CM, raw), 400, "BadRequest")
        assert "must be a JSON object" in body["message"]


@pytest.mark.parametrize("raw", [b"", b"   \n\t "])
def test_empty_body_is_bad_request(http, db, raw: bytes) -> None:
    with nothing_written(db):
        body = status_of(post_raw(http, CM, raw), 400, "BadRequest")
        assert "empty" in body["message"]


def test_metadata_not_an_object_is_invalid(http, db) -> None:
    with nothing_written(db):
        bad = {"apiVersion": "quaymaster.io/v1", "kind": "ConfigMap", "metadata": ["x"]}
        body = status_of(http.post(CM, json=bad), 422, "Invalid")
        assert set(causes_of(body)) == {"metadata"}


# ---------------------------------------------------------------------------- type meta and shape


def test_wrong_api_version_and_kind(http, db) -> None:
    with nothing_written(db):
        body = status_of(http.post(CM, json={**cm("tm-a"), "apiVersion": "v1"}), 422, "Invalid")
        causes = causes_of(body)
        assert set(causes) == {"apiVersion"}
        assert causes["apiVersion"][0]["reason"] == "FieldValueNotSupported"
        assert "quaymaster.io/v1" in causes["apiVersion"][0]["message"]

        body = status_of(http.post(CM, json={**cm("tm-b"), "kind": "Pod"}), 422, "Invalid")
        causes = causes_of(body)
        assert set(causes) == {"kind"}
        assert causes["kind"][0]["reason"] == "FieldValueNotSupported"
        assert '"ConfigMap"' in causes["kind"][0]["message"]

        both = {**cm("tm-c"), "apiVersion": "apps/v1", "kind": "Secret"}
        body = status_of(http.post(CM, json=both), 422, "Invalid")
        assert set(causes_of(body)) == {"apiVersion", "kind"}
        assert body["details"]["name"] == "tm-c"
        assert "apiVersion" in body["message"] and "kind" in body["message"]


def test_unknown_top_level_field(http, db) -> None:
    with nothing_written(db):
        obj = deployment("unknown-field")
        obj["spce"] = obj["spec"]
        body = status_of(http.post(f"{API}/namespaces/{NS}/deployments", json=obj), 422, "Invalid")
        causes = causes_of(body)
        assert set(causes) == {"spce"}
        assert causes["spce"][0]["reason"] == "FieldValueNotSupported"
        assert 'unknown field "spce"' in causes["spce"][0]["message"]


@pytest.mark.parametrize(
    ("meta", "field", "fragment"),
    [
        ({"name": "UpperCase"}, "metadata.name", "lower case"),
        ({"name": "a" * 254}, "metadata.name", "no more than 253"),
        ({"name": "under_score"}, "metadata.name", "RFC 1123"),
        ({"name": "-leading"}, "metadata.name", "RFC 1123"),
        ({"name": "../../etc/passwd"}, "metadata.name", "RFC 1123"),
        ({"generateName": "Bad_Prefix-"}, "metadata.generateName", "RFC 1123"),
        ({}, "metadata.name", "name or generateName is required"),
        ({"name": 42}, "metadata.name", "must be a string"),
    ],
)
def test_invalid_names(http, db, meta: dict[str, Any], field: str, fragment: str) -> None:
    obj = cm("placeholder")
    obj["metadata"] = meta
    with nothing_written(db):
        body = status_of(http.post(CM, json=obj), 422, "Invalid")
        causes = causes_of(body)
        assert set(causes) == {field}, causes
        assert any(fragment in c["message"] for c in causes[field]), causes


def test_namespace_names_are_dns_labels(http, db) -> None:
    before = db.execute("SELECT count(*) FROM namespaces").fetchone()
    for name in ("n" * 64, "has.dot", "UPPER"):
        body = status_of(
            http.post(
                f"{API}/namespaces",
                json={
                    "apiVersion": "quaymaster.io/v1",
                    "kind": "Namespace",
                    "metadata": {"name": name},
                },
            ),
            422,
            "Invalid",
        )
        assert set(causes_of(body)) == {"metadata.name"}
    assert db.execute("SELECT count(*) FROM namespaces").fetchone() == before


def test_missing_container_image(http, db) -> None:
    obj = pod("no-image")
    del obj["spec"]["containers"][0]["image"]
    with nothing_written(db):
        body = status_of(http.post(f"{API}/namespaces/{NS}/pods", json=obj), 422, "Invalid")
        causes = causes_of(body)
        assert set(causes) == {"spec.containers[0].image"}
        assert causes["spec.containers[0].image"][0]["reason"] == "FieldValueRequired"


def test_bad_quantity(http, db) -> None:
    obj = pod("bad-quantity")
    obj["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "lots", "memory": "64Mi"}}
    with nothing_written(db):
        body = status_of(http.post(f"{API}/namespaces/{NS}/pods", json=obj), 422, "Invalid")
        causes = causes_of(body)
        path = "spec.containers[0].resources.requests.cpu"
        assert set(causes) == {path}
        assert causes[path][0]["reason"] == "FieldValueInvalid"
        assert '"lots"' in causes[path][0]["message"]


def test_wrong_types_report_every_field(http, db) -> None:
    obj = deployment("wrong-types")
    obj["metadata"]["labels"] = ["app", "web"]
    obj["metadata"]["annotations"] = {"note": 7}
    obj["spec"]["replicas"] = "3"
    obj["spec"]["minReadySeconds"] = True
    tmpl = obj["spec"]["template"]["spec"]
    tmpl["containers"] = {"name": "c", "image": "busybox"}
    tmpl["terminationGracePeriodSeconds"] = "30"
    tmpl["nodeSelector"] = {"disk": ["ssd"]}
    with nothing_written(db):
        body = status_of(http.post(f"{API}/namespaces/{NS}/deployments", json=obj), 422, "Invalid")
    causes = causes_of(body)
    expected = {
        "metadata.labels": "must be an object, got array",
        "metadata.annotations.note": "must be a string, got integer",
        "spec.replicas": "must be an integer, got string",
        "spec.minReadySeconds": "must be an integer, got boolean",
        "spec.template.spec.containers": "must be an array, got object",
        "spec.template.spec.terminationGracePeriodSeconds": "must be an integer, got string",
        "spec.template.spec.nodeSelector.disk": "must be a string, got array",
    }
    assert set(causes) == set(expected), causes
    for field, fragment in expected.items():
        (cause,) = causes[field]
        assert cause["reason"] == "FieldValueTypeInvalid", cause
        assert fragment in cause["message"], cause
    assert body["details"]["kind"] == "Deployment"
    assert body["details"]["name"] == "wrong-types"
    for field in expected:
        assert field in body["message"]


def test_configmap_with_non_string_values(http, db) -> None:
    obj = cm("cm-types")
    obj["data"] = {"a": 1, "b": "ok", "bad key!": "x"}
    obj["binaryData"] = "not-a-map"
    with nothing_written(db):
        body = status_of(http.post(CM, json=obj), 422, "Invalid")
    assert set(causes_of(body)) == {"data.a", "binaryData"}


# ---------------------------------------------------------------------------- sizes


def test_oversized_body_is_413(http, db) -> None:
    obj = cm("huge", {"k": "x" * (3 * 1024 * 1024 + 10)})
    with nothing_written(db):
        body = status_of(post_raw(http, CM, json.dumps(obj).encode()), 413, "RequestEntityTooLarge")
        assert "limit" in body["message"]
        # Beyond the server's hard cap too: still a Status.
        bigger = b'{"a":"' + b"x" * (9 * 1024 * 1024) + b'"}'
        status_of(post_raw(http, CM, bigger), 413, "RequestEntityTooLarge")


def test_oversized_annotations_are_invalid(http, db) -> None:
    obj = cm("big-annotations", annotations={"example.com/blob": "x" * (256 * 1024 + 1)})
    with nothing_written(db):
        body = status_of(http.post(CM, json=obj), 422, "Invalid")
        causes = causes_of(body)
        assert set(causes) == {"metadata.annotations"}
        assert causes["metadata.annotations"][0]["reason"] == "FieldValueTooLong"


# ---------------------------------------------------------------------------- namespaces


def test_create_in_missing_namespace_is_404(http, db) -> None:
    with nothing_written(db, "no-such-namespace"):
        r = http.post(f"{API}/namespaces/no-such-namespace/configmaps", json=cm("orphan"))
        body = status_of(r, 404, "NotFound")
        assert body["details"] == {"name": "no-such-namespace", "kind": "namespaces"}
        assert body["message"] == 'namespaces "no-such-namespace" not found'


def test_namespace_in_body_must_match_url(http, db) -> None:
    with nothing_written(db), nothing_written(db, NS_PAGING):
        r = http.post(CM, json=cm("elsewhere", namespace=NS_PAGING))
        body = status_of(r, 400, "BadRequest")
        assert NS_PAGING in body["message"] and NS in body["message"]


# ---------------------------------------------------------------------------- conditional writes


def test_duplicate_create_is_already_exists(http, db) -> None:
    first = create_cm(http, "dup", data={"n": "1"})
    with nothing_written(db):
        body = status_of(http.post(CM, json=cm("dup", {"n": "2"})), 409, "AlreadyExists")
        assert body["details"] == {"name": "dup", "kind": "configmaps"}
    got = http.get(f"{CM}/dup").json()
    assert got["data"] == {"n": "1"}
    assert got["metadata"]["uid"] == first["metadata"]["uid"]


def test_put_with_stale_resource_version_conflicts(http, db) -> None:
    v1 = create_cm(http, "stale-put", data={"n": "1"})
    v2 = dict(v1, data={"n": "2"})
    r = http.put(f"{CM}/stale-put", json=v2)
    assert r.status_code == 200, r.text
    current = r.json()
    assert current["metadata"]["resourceVersion"] != v1["metadata"]["resourceVersion"]
    with nothing_written(db):
        r = http.put(f"{CM}/stale-put", json=dict(v1, data={"n": "stale"}))
        body = status_of(r, 409, "Conflict")
        assert "has been modified" in body["message"]
        assert body["details"] == {"name": "stale-put", "kind": "configmaps"}
    assert http.get(f"{CM}/stale-put").json() == current


def test_put_requires_resource_version(http, db) -> None:
    obj = create_cm(http, "put-no-rv")
    for rv in (None, ""):
        sent = json.loads(json.dumps(obj))
        sent["data"] = {"k": "changed"}
        if rv is None:
            del sent["metadata"]["resourceVersion"]
        else:
            sent["metadata"]["resourceVersion"] = rv
        with nothing_written(db):
            body = status_of(http.put(f"{CM}/put-no-rv", json=sent), 422, "Invalid")
            causes = causes_of(body)
            assert set(causes) == {"metadata.resourceVersion"}
            assert causes["metadata.resourceVersion"][0]["reason"] == "FieldValueRequired"
    assert http.get(f"{CM}/put-no-rv").json() == obj


@pytest.mark.parametrize("rv", ["abc", "1.5", "-3", "0x10"])
def test_put_with_non_numeric_resource_version(http, db, rv: str) -> None:
    name = "put-bad-rv"
    r = http.post(CM, json=cm(name))
    assert r.status_code in (201, 409)
    obj = http.get(f"{CM}/{name}").json()
    sent = json.loads(json.dumps(obj))
    sent["metadata"]["resourceVersion"] = rv
    sent["data"] = {"k": "changed"}
    with nothing_written(db):
        body = status_of(http.put(f"{CM}/{name}", json=sent), 400, "BadRequest")
        assert "resourceVersion" in body["message"]
    assert http.get(f"{CM}/{name}").json() == obj


def test_put_with_namespace_mismatch(http, db) -> None:
    obj = create_cm(http, "put-ns")
    sent = dict(obj, metadata={**obj["metadata"], "namespace": NS_PAGING}, data={"k": "moved"})
    with nothing_written(db), nothing_written(db, NS_PAGING):
        body = status_of(http.put(f"{CM}/put-ns", json=sent), 400, "BadRequest")
        assert NS_PAGING in body["message"] and NS in body["message"]
    assert http.get(f"{CM}/put-ns").json() == obj


def test_put_with_name_mismatch(http, db) -> None:
    obj = create_cm(http, "put-name-a")
    sent = dict(obj, metadata={**obj["metadata"], "name": "put-name-b"})
    with nothing_written(db):
        body = status_of(http.put(f"{CM}/put-name-a", json=sent), 400, "BadRequest")
        assert "put-name-b" in body["message"] and "put-name-a" in body["message"]
    assert http.get(f"{CM}/put-name-a").json() == obj
    assert http.get(f"{CM}/put-name-b").status_code == 404


def test_missing_objects_are_404(http, db) -> None:
    with nothing_written(db):
        body = status_of(http.get(f"{CM}/does-not-exist"), 404, "NotFound")
        assert body["message"] == 'configmaps "does-not-exist" not found'
        assert body["details"] == {"name": "does-not-exist", "kind": "configmaps"}
        status_of(http.delete(f"{CM}/does-not-exist"), 404, "NotFound")
        status_of(http.patch(f"{CM}/does-not-exist", content=b"{}", headers=MERGE), 404, "NotFound")
        sent = cm("does-not-exist")
        sent["metadata"]["resourceVersion"] = "1"
        status_of(http.put(f"{CM}/does-not-exist", json=sent), 404, "NotFound")
        status_of(http.get(f"{API}/namespaces/{NS}/pods/nope/status"), 404, "NotFound")


def test_unknown_paths_and_methods_are_status(http) -> None:
    body = status_of(http.get(f"{API}/namespaces/{NS}/widgets"), 404, "NotFound")
    assert body["message"]
    r = http.post(f"{CM}/x", json=cm("x"))
    assert r.status_code == 405
    assert r.json()["kind"] == "Status"


# ---------------------------------------------------------------------------- patch


def test_strategic_merge_patch_is_unsupported(http, db) -> None:
    obj = create_cm(http, "smp")
    with nothing_written(db):
        r = http.patch(
            f"{CM}/smp",
            content=b'{"data": {"k": "x"}}',
            headers={"Content-Type": "application/strategic-merge-patch+json"},
        )
        body = status_of(r, 415, "UnsupportedMediaType")
        assert "application/merge-patch+json" in body["message"]
        r = http.patch(f"{CM}/smp", content=b'{"data": {}}', headers={"Content-Type": "text/plain"})
        status_of(r, 415, "UnsupportedMediaType")
    assert http.get(f"{CM}/smp").json() == obj


def test_malformed_patches_are_bad_request(http, db) -> None:
    obj = create_cm(http, "bad-patch")
    with nothing_written(db):
        status_of(http.patch(f"{CM}/bad-patch", content=b"{", headers=MERGE), 400, "BadRequest")
        status_of(http.patch(f"{CM}/bad-patch", content=b"", headers=MERGE), 400, "BadRequest")
        body = status_of(
            http.patch(f"{CM}/bad-patch", content=b'{"op": "add"}', headers=JSONPATCH),
            400,
            "BadRequest",
        )
        assert "list of operations" in body["message"]
        body = status_of(
            http.patch(
                f"{CM}/bad-patch",
                content=b'[{"op": "frobnicate", "path": "/data"}]',
                headers=JSONPATCH,
            ),
            400,
            "BadRequest",
        )
        assert "frobnicate" in body["message"]
        body = status_of(
            http.patch(f"{CM}/bad-patch", content=b'"just a string"', headers=MERGE),
            400,
            "BadRequest",
        )
        assert "not a JSON object" in body["message"]
    assert http.get(f"{CM}/bad-patch").json() == obj


def test_json_patch_failing_test_op(http, db) -> None:
    obj = create_cm(http, "jp-test", data={"k": "v"})
    ops = [
        {"op": "replace", "path": "/data/k", "value": "new"},
        {"op": "test", "path": "/data/k", "value": "something-else"},
    ]
    with nothing_written(db):
        r = http.patch(f"{CM}/jp-test", content=json.dumps(ops).encode(), headers=JSONPATCH)
        body = status_of(r, 422, "Invalid")
        causes = causes_of(body)
        assert set(causes) == {"/data/k"}
        assert "test operation failed" in causes["/data/k"][0]["message"]
        ops = [{"op": "remove", "path": "/data/missing"}]
        r = http.patch(f"{CM}/jp-test", content=json.dumps(ops).encode(), headers=JSONPATCH)
        assert set(causes_of(status_of(r, 422, "Invalid"))) == {"/data/missing"}
    assert http.get(f"{CM}/jp-test").json() == obj
    # The same patch with a passing test applies.
    ops = [
        {"op": "test", "path": "/data/k", "value": "v"},
        {"op": "replace", "path": "/data/k", "value": "new"},
    ]
    r = http.patch(f"{CM}/jp-test", content=json.dumps(ops).encode(), headers=JSONPATCH)
    assert r.status_code == 200, r.text
    assert r.json()["data"] == {"k": "new"}


def test_merge_patch_to_invalid_value(http, db) -> None:
    obj = create_cm(http, "mp-invalid", labels={"tier": "web"})
    with nothing_written(db):
        patch = {"metadata": {"labels": {"tier": "not valid!"}}, "data": {"n": 5}}
        r = http.patch(f"{CM}/mp-invalid", content=json.dumps(patch).encode(), headers=MERGE)
        body = status_of(r, 422, "Invalid")
        assert set(causes_of(body)) == {"metadata.labels", "data.n"}
        for patch in ({"metadata": "oops"}, {"metadata": ["x"]}):
            r = http.patch(f"{CM}/mp-invalid", content=json.dumps(patch).encode(), headers=MERGE)
            assert set(causes_of(status_of(r, 422, "Invalid"))) == {"metadata"}
        ops = [{"op": "replace", "path": "/metadata", "value": 5}]
        r = http.patch(f"{CM}/mp-invalid", content=json.dumps(ops).encode(), headers=JSONPATCH)
        assert set(causes_of(status_of(r, 422, "Invalid"))) == {"metadata"}
        r = http.patch(f"{CM}/mp-invalid", content=b"[]", headers=MERGE)
        assert "not a JSON object" in status_of(r, 400, "BadRequest")["message"]
    assert http.get(f"{CM}/mp-invalid").json() == obj


def test_patch_cannot_change_identity(http, db) -> None:
    """A patch that renames, moves or re-identifies an object is refused, never ignored."""
    obj = create_cm(http, "mp-identity")
    with nothing_written(db):
        patch = {"metadata": {"name": "renamed"}, "data": {"k": "changed"}}
        r = http.patch(f"{CM}/mp-identity", content=json.dumps(patch).encode(), headers=MERGE)
        body = status_of(r, 400, "BadRequest")
        assert "renamed" in body["message"] and "mp-identity" in body["message"]
        patch = {"metadata": {"namespace": NS_PAGING}, "data": {"k": "changed"}}
        r = http.patch(f"{CM}/mp-identity", content=json.dumps(patch).encode(), headers=MERGE)
        body = status_of(r, 400, "BadRequest")
        assert NS_PAGING in body["message"]
        ops = [{"op": "replace", "path": "/metadata/uid", "value": "1234"}]
        r = http.patch(f"{CM}/mp-identity", content=json.dumps(ops).encode(), headers=JSONPATCH)
        body = status_of(r, 422, "Invalid")
        assert set(causes_of(body)) == {"metadata.uid"}
    assert http.get(f"{CM}/mp-identity").json() == obj
    assert http.get(f"{CM}/renamed").status_code == 404
    # Restating the identity it already has is fine.
    patch = {"metadata": {"name": "mp-identity", "namespace": NS}, "data": {"k": "ok"}}
    r = http.patch(f"{CM}/mp-identity", content=json.dumps(patch).encode(), headers=MERGE)
    assert r.status_code == 200, r.text
    assert r.json()["data"] == {"k": "ok"}


def test_patch_with_stale_resource_version_conflicts(http, db) -> None:
    v1 = create_cm(http, "mp-stale", data={"n": "1"})
    r = http.patch(f"{CM}/mp-stale", content=b'{"data": {"n": "2"}}', headers=MERGE)
    assert r.status_code == 200, r.text
    current = r.json()
    stale = {"metadata": {"resourceVersion": v1["metadata"]["resourceVersion"]}, "data": {"n": "3"}}
    with nothing_written(db):
        r = http.patch(f"{CM}/mp-stale", content=json.dumps(stale).encode(), headers=MERGE)
        status_of(r, 409, "Conflict")
        ops = [
            {"op": "replace", "path": "/metadata/resourceVersion", "value": "1"},
            {"op": "replace", "path": "/data/n", "value": "3"},
        ]
        r = http.patch(f"{CM}/mp-stale", content=json.dumps(ops).encode(), headers=JSONPATCH)
        status_of(r, 409, "Conflict")
    assert http.get(f"{CM}/mp-stale").json() == current
    # The current resourceVersion in a patch is accepted.
    fresh = {
        "metadata": {"resourceVersion": current["metadata"]["resourceVersion"]},
        "data": {"n": "3"},
    }
    r = http.patch(f"{CM}/mp-stale", content=json.dumps(fresh).encode(), headers=MERGE)
    assert r.status_code == 200, r.text
    assert r.json()["data"] == {"n": "3"}


# ---------------------------------------------------------------------------- contention


async def test_concurrent_puts_from_one_version(api_server, http, db) -> None:
    base = create_cm(http, "race-put", data={"n": "0"})
    headers = {"Authorization": f"Bearer {api_server.token}"}
    async with httpx.AsyncClient(base_url=api_server.url, headers=headers, timeout=30) as c:
        rs = await asyncio.gather(
            *(c.put(f"{CM}/race-put", json=dict(base, data={"n": str(i)})) for i in range(1, 21))
        )
    codes = sorted(r.status_code for r in rs)
    assert codes == [200] + [409] * 19, [r.text for r in rs if r.status_code not in (200, 409)]
    for r in rs:
        if r.status_code == 409:
            status_of(r, 409, "Conflict")
    (winner,) = [r.json() for r in rs if r.status_code == 200]
    assert http.get(f"{CM}/race-put").json() == winner
    audits = db.execute(
        "SELECT verb FROM qm_history WHERE namespace = %s AND name = 'race-put' ORDER BY id",
        (NS,),
    ).fetchall()
    assert [a[0] for a in audits] == ["create", "update"]


async def test_concurrent_creates_of_one_name(api_server, http, db) -> None:
    headers = {"Authorization": f"Bearer {api_server.token}"}
    async with httpx.AsyncClient(base_url=api_server.url, headers=headers, timeout=30) as c:
        rs = await asyncio.gather(
            *(c.post(CM, json=cm("race-create", {"n": str(i)})) for i in range(20))
        )
    codes = sorted(r.status_code for r in rs)
    assert codes == [201] + [409] * 19, [r.text for r in rs]
    for r in rs:
        if r.status_code == 409:
            status_of(r, 409, "AlreadyExists")
    (winner,) = [r.json() for r in rs if r.status_code == 201]
    assert http.get(f"{CM}/race-create").json() == winner
    rows = db.execute(
        "SELECT spec FROM configmaps WHERE namespace = %s AND name = 'race-create'", (NS,)
    ).fetchall()
    assert rows == [({"data": winner["data"]},)]
    audits = db.execute(
        "SELECT count(*) FROM qm_history WHERE namespace = %s AND name = 'race-create'", (NS,)
    ).fetchone()
    assert audits == (1,)


async def test_concurrent_merge_patches_all_apply(api_server, http, db) -> None:
    create_cm(http, "race-patch")
    headers = {"Authorization": f"Bearer {api_server.token}", **MERGE}
    async with httpx.AsyncClient(base_url=api_server.url, headers=headers, timeout=60) as c:
        rs = await asyncio.gather(
            *(
                c.patch(
                    f"{CM}/race-patch",
                    content=json.dumps({"metadata": {"labels": {f"l{i}": str(i)}}}).encode(),
                )
                for i in range(50)
            )
        )
    assert [r.status_code for r in rs] == [200] * 50, [r.text for r in rs if r.status_code != 200]
    labels = http.get(f"{CM}/race-patch").json()["metadata"]["labels"]
    assert labels == {f"l{i}": str(i) for i in range(50)}
    for i, r in enumerate(rs):
        assert r.json()["metadata"]["labels"][f"l{i}"] == str(i), "a response shows its write"
    audits = db.execute(
        "SELECT verb, count(*) FROM qm_history WHERE namespace = %s AND name = 'race-patch'"
        " GROUP BY verb ORDER BY verb",
        (NS,),
    ).fetchall()
    assert audits == [("create", 1), ("patch", 50)], "each patch is its own write"


# ---------------------------------------------------------------------------- hostile input


def test_path_traversal_names(http, db) -> None:
    with nothing_written(db):
        for name in ("..%2F..%2Fetc%2Fpasswd", "%2E%2E", "a%00b", "%2e%2e%2fsecrets"):
            r = http.get(f"{CM}/{name}")
            status_of(r, 404, "NotFound")
            r = http.delete(f"{CM}/{name}")
            status_of(r, 404, "NotFound")
        r = http.get(f"{API}/namespaces/%2E%2E/configmaps/x")
        status_of(r, 404, "NotFound")
        body = status_of(http.post(CM, json=cm("../secrets")), 422, "Invalid")
        assert set(causes_of(body)) == {"metadata.name"}


def test_label_selector_garbage(http) -> None:
    for garbage in (
        "!" * 10_000,
        "a" * 60_000,
        "a=(b",
        "x in (",
        "=" * 5000,
        "tier notin",
        "a,,b===c",
    ):
        body = status_of(http.get(CM, params={"labelSelector": garbage}), 400, "BadRequest")
        assert "selector" in body["message"]
        assert len(body["message"]) < 1000, "the message must stay readable"


def test_field_selector_on_unsupported_field(http) -> None:
    body = status_of(http.get(CM, params={"fieldSelector": "data.k=v"}), 400, "BadRequest")
    assert body["message"] == "field label not supported: data.k"
    body = status_of(
        http.get(f"{API}/namespaces/{NS}/pods", params={"fieldSelector": "spec.restartPolicy=x"}),
        400,
        "BadRequest",
    )
    assert "field label not supported" in body["message"]
    body = status_of(
        http.get(CM, params={"watch": "1", "fieldSelector": "status.phase=Running"}),
        400,
        "BadRequest",
    )
    assert "field label not supported" in body["message"]
    ok = http.get(f"{API}/namespaces/{NS}/pods", params={"fieldSelector": "spec.nodeName="})
    assert ok.status_code == 200, ok.text


@pytest.mark.parametrize(
    ("params", "fragment"),
    [
        ({"limit": "-1"}, "limit"),
        ({"limit": "ten"}, "limit"),
        ({"resourceVersion": "abc"}, "resourceVersion"),
        ({"watch": "1", "resourceVersion": "abc"}, "resourceVersion"),
        ({"watch": "1", "resourceVersion": "-5"}, "resourceVersion"),
        ({"watch": "1", "timeoutSeconds": "-1"}, "timeoutSeconds"),
    ],
)
def test_bad_list_parameters(http, params: dict[str, str], fragment: str) -> None:
    body = status_of(http.get(CM, params=params), 400, "BadRequest")
    assert fragment in body["message"]


def _watchers(http: httpx.Client) -> int:
    for line in http.get("/metrics").text.splitlines():
        if line.startswith("qm_watch_cache_watchers "):
            return int(line.split()[1])
    raise AssertionError("no watcher gauge in /metrics")


def test_rejected_watches_leave_no_watcher_behind(http) -> None:
    before = _watchers(http)
    for params in (
        {"watch": "1", "timeoutSeconds": "-1"},
        {"watch": "1", "timeoutSeconds": "soon"},
        {"watch": "1", "resourceVersion": "abc"},
        {"watch": "1", "labelSelector": "a in ("},
    ):
        status_of(http.get(CM, params=params), 400, "BadRequest")
    assert _watchers(http) == before


def test_watch_from_the_future_times_out(http) -> None:
    current = int(http.get(CM).json()["metadata"]["resourceVersion"])
    started = time.monotonic()
    r = http.get(CM, params={"watch": "1", "resourceVersion": str(current + 1_000_000)})
    elapsed = time.monotonic() - started
    body = status_of(r, 504, "Timeout")
    assert "too large resource version" in body["message"]
    assert elapsed >= 2.5, "the server waits for the revision before giving up"


def test_watch_from_too_old_revision_is_gone_or_replays(http) -> None:
    # Revision 0 means "from now"; a tiny revision is either replayed or Gone, never a 500.
    r = http.get(CM, params={"watch": "1", "resourceVersion": "1", "timeoutSeconds": "1"})
    assert r.status_code in (200, 410), r.text
    if r.status_code == 410:
        status_of(r, 410, "Expired")


# ---------------------------------------------------------------------------- paging


def test_list_paging_returns_everything_once_in_order(http) -> None:
    path = f"{API}/namespaces/{NS_PAGING}/configmaps"
    names = [f"page-{i:02d}" for i in range(25)]
    for name in reversed(names):
        r = http.post(path, json=cm(name))
        assert r.status_code in (201, 409), r.text
    seen: list[str] = []
    pages: list[int] = []
    revisions: set[str] = set()
    params: dict[str, str] = {"limit": "10"}
    while True:
        page = http.get(path, params=params)
        assert page.status_code == 200, page.text
        body = page.json()
        assert body["kind"] == "ConfigMapList"
        pages.append(len(body["items"]))
        seen += [i["metadata"]["name"] for i in body["items"]]
        revisions.add(body["metadata"]["resourceVersion"])
        token = body["metadata"].get("continue")
        if not token:
            break
        params = {"limit": "10", "continue": token}
    assert pages == [10, 10, 5]
    assert seen == names
    assert len(revisions) == 1, "every page reports the revision of the first"
    full = http.get(path).json()
    assert [i["metadata"]["name"] for i in full["items"]] == names
    assert "continue" not in full["metadata"]


@pytest.mark.parametrize("token", ["garbage", "!!!", "eyJucyI6MX0", "e30"])
def test_bogus_continue_token(http, token: str) -> None:
    path = f"{API}/namespaces/{NS_PAGING}/configmaps"
    body = status_of(http.get(path, params={"limit": "10", "continue": token}), 400, "BadRequest")
    assert "continue" in body["message"]


def test_a_status_that_is_not_an_object_is_refused(http, db) -> None:  # type: ignore[no-untyped-def]
    pod = {
        "metadata": {"name": "status-shape"},
        "spec": {"containers": [{"name": "c", "image": "x"}]},
    }
    r = http.post(f"{API}/namespaces/{NS}/pods", json=pod)
    assert r.status_code == 201, r.text
    with nothing_written(db):
        bad = http.patch(
            f"{API}/namespaces/{NS}/pods/status-shape/status",
            content=b'{"status": "running"}',
            headers={"Content-Type": "application/merge-patch+json"},
        )
        body = status_of(bad, 422, "Invalid")
    assert "status" in causes_of(body)
    assert http.get(f"{API}/namespaces/{NS}/pods/status-shape").json()["status"] == {
        "phase": "Pending"
    }
