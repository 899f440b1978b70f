"""The OpenAPI document built from the route table and the kind registry: every kind has its
paths with GVK extensions, every error code is a ``Status``, the split documents are what
kubectl's field-validation check looks for, and the example manifests validate."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import jsonschema_rs  # schemathesis' validator
import pytest
import yaml

from app.api.app import create_litestar
from app.api.openapi import routes_of
from app.core.admission import admit
from app.core.kinds import API_VERSION, KINDS, Kind
from app.core.openapi import document, index, index_key, split
from app.core.openapi.examples import BODIES
from app.core.openapi.operations import Route, operation
from app.core.openapi.schemas import GVK, STATUS, kind_schema_name

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
PREFIX = f"/apis/{API_VERSION}"


@pytest.fixture(scope="module")
def doc() -> dict[str, Any]:
    return document(routes_of(create_litestar()), "Quaymaster", "test")


def _collection(kind: Kind) -> str:
    ns = "/namespaces/{namespace}" if kind.namespaced else ""
    return f"{PREFIX}{ns}/{kind.plural}"


def _operations(doc: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [(p, m, op) for p, item in doc["paths"].items() for m, op in item.items()]


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.kind)
def test_every_kind_has_its_paths_with_gvk(doc: dict[str, Any], kind: Kind) -> None:
    coll = _collection(kind)
    item = coll + "/{name}"
    expected = {coll: {"get", "post"}, item: {"get", "put", "patch", "delete"}}
    if kind.has_status:
        expected[item + "/status"] = {"get", "put", "patch"}
    if kind.namespaced:
        expected[f"{PREFIX}/{kind.plural}"] = {"get"}
    want_gvk = {"group": "quaymaster.io", "version": "v1", "kind": kind.kind}
    for path, methods in expected.items():
        assert methods <= set(doc["paths"][path]), path
        for method in methods:
            assert doc["paths"][path][method][GVK] == want_gvk, (path, method)
    schema = doc["components"]["schemas"][kind_schema_name(kind)]
    assert schema[GVK] == [want_gvk]
    assert schema["additionalProperties"] is False
    lst = doc["paths"][coll]["get"]["responses"]["200"]["content"]["application/json"]["schema"]
    assert lst["$ref"].endswith(f".{kind.list_kind}")


def test_every_error_code_is_a_status(doc: dict[str, Any]) -> None:
    seen = 0
    for path, method, op in _operations(doc):
        for code, answer in op["responses"].items():
            if int(code) >= 400:
                seen += 1
                schema = answer["content"]["application/json"]["schema"]
                assert schema == {"$ref": f"#/components/schemas/{STATUS}"}, (path, method, code)
                if code == "429":
                    assert "Retry-After" in answer["headers"]
        assert any(int(c) < 400 for c in op["responses"]), (path, method)
    assert seen > 1000


def test_no_framework_error_shape_anywhere(doc: dict[str, Any]) -> None:
    text = str(doc)
    assert "status_code" not in text and "'detail'" not in text


@pytest.mark.parametrize(
    ("verb", "codes"),
    [
        ("list", {"200", "400", "401", "403", "404", "410", "429", "500", "503"}),
        ("create", {"200", "201", "409", "413", "422", "429"}),
        ("patch", {"200", "409", "413", "415", "422"}),
        ("delete", {"200", "202", "409"}),
    ],
)
def test_kind_operations_document_their_codes(
    doc: dict[str, Any], verb: str, codes: set[str]
) -> None:
    pod = next(k for k in KINDS if k.kind == "Pod")
    method = {"list": "get", "create": "post", "patch": "patch", "delete": "delete"}[verb]
    path = _collection(pod) + ("" if verb in ("list", "create") else "/{name}")
    assert codes <= set(doc["paths"][path][method]["responses"])


def test_parameters_each_operation_accepts(doc: dict[str, Any]) -> None:
    pods = _collection(next(k for k in KINDS if k.kind == "Pod"))

    def names(path: str, method: str) -> set[str]:
        return {p["name"] for p in doc["paths"][path][method]["parameters"]}

    assert {"labelSelector", "fieldSelector", "limit", "continue", "resourceVersion", "watch",
            "timeoutSeconds", "namespace"} <= names(pods, "get")  # fmt: skip
    assert {"dryRun", "fieldValidation"} <= names(pods, "post")
    assert {"dryRun", "propagationPolicy", "gracePeriodSeconds"} <= names(
        pods + "/{name}", "delete"
    )
    patch_body = doc["paths"][pods + "/{name}"]["patch"]["requestBody"]["content"]
    assert set(patch_body) == {"application/merge-patch+json", "application/json-patch+json"}


def test_kubectl_finds_field_validation_on_every_patch_of_a_kind(doc: dict[str, Any]) -> None:
    """kubectl validates on the server when the first ``PATCH`` carrying the kind's GVK in
    the group-version document lists ``fieldValidation`` among its query parameters."""
    gv = split(doc)[f"apis/{API_VERSION}"]
    patched = set()
    for _path, method, op in _operations(gv):
        if method == "patch" and GVK in op:
            params = {(p["name"], p["in"]) for p in op["parameters"]}
            assert ("fieldValidation", "query") in params
            patched.add(op[GVK]["kind"])
    assert {k.kind for k in KINDS} <= patched


def test_index_and_split_documents(doc: dict[str, Any]) -> None:
    parts = split(doc)
    idx = index(parts)
    url = idx["paths"][f"apis/{API_VERSION}"]["serverRelativeURL"]
    assert url.startswith(f"/openapi/v3/apis/{API_VERSION}?hash=")
    assert "version" in idx["paths"] and "apis/metrics.quaymaster.io/v1" in idx["paths"]
    gv = parts[f"apis/{API_VERSION}"]
    assert all(index_key(p) == f"apis/{API_VERSION}" for p in gv["paths"])
    assert STATUS in gv["components"]["schemas"]
    assert "io.quaymaster.v1.Pod" in gv["components"]["schemas"]
    assert "io.quaymaster.v1.Pod" not in parts["version"]["components"]["schemas"]


@pytest.mark.parametrize(
    ("path", "key"),
    [
        (f"{PREFIX}/namespaces/{{namespace}}/pods", f"apis/{API_VERSION}"),
        ("/apis", "apis"),
        ("/apis/quaymaster.io", "apis"),
        ("/version", "version"),
        ("/openapi/v3/{key}", "openapi"),
    ],
)
def test_index_key(path: str, key: str) -> None:
    assert index_key(path) == key


def test_a_route_nobody_described_still_gets_status_errors() -> None:
    op = operation(
        Route("/apis/example.io/v1/widgets", "post", "createWidgetThing", status_code=201)
    )
    assert {"201", "400", "401", "403", "409", "413", "415", "422", "429", "500"} <= set(
        op["responses"]
    )
    assert op["requestBody"]["content"]["application/json"]


def _manifests() -> list[dict[str, Any]]:
    out = []
    for f in sorted(EXAMPLES.glob("*.yaml")):
        out += [d for d in yaml.safe_load_all(f.read_text()) if isinstance(d, dict)]
    return out


def test_example_manifests_validate_and_unknown_top_level_fields_do_not(
    doc: dict[str, Any],
) -> None:
    schemas = doc["components"]["schemas"]
    manifests = _manifests()
    assert manifests
    for manifest in manifests:
        name = f"io.quaymaster.v1.{manifest['kind']}"
        root = {**schemas[name], "components": {"schemas": schemas}}
        jsonschema_rs.validate(root, manifest)
        with pytest.raises(jsonschema_rs.ValidationError):
            jsonschema_rs.validate(root, {**manifest, "spek": {}})


def test_scale_subresources_speak_autoscaling_scale() -> None:
    path = f"{PREFIX}/namespaces/{{namespace}}/deployments/{{name}}/scale"
    for method, opid in (("get", "readDeploymentScale"), ("patch", "patchDeploymentScale")):
        op = operation(Route(path, method, opid))
        assert op[GVK] == {"group": "autoscaling", "version": "v1", "kind": "Scale"}
        ok = op["responses"]["200"]["content"]["application/json"]["schema"]
        assert ok["$ref"].endswith("autoscaling.v1.Scale")
    assert "422" in operation(Route(path, "put", "replaceDeploymentScale"))["responses"]


def test_operation_ids_are_unique(doc: dict[str, Any]) -> None:
    ids = [op["operationId"] for _p, _m, op in _operations(doc)]
    assert len(ids) == len(set(ids))
    twice = document([Route("/a", "get", "same"), Route("/b", "get", "same")], "t", "1")
    assert {
        twice["paths"]["/a"]["get"]["operationId"],
        twice["paths"]["/b"]["get"]["operationId"],
    } == {"same", "same2"}


def test_core_group_paths_have_their_own_document() -> None:
    assert index_key("/api/v1/namespaces/{namespace}/events") == "api/v1"


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.kind)
def test_every_example_in_the_document_is_admitted(doc: dict[str, Any], kind: Kind) -> None:
    body = doc["paths"][_collection(kind)]["post"]["requestBody"]["content"]["application/json"]
    if kind.kind not in BODIES:
        assert "example" not in body
        return
    sample = body["example"]
    admit(kind, copy.deepcopy(sample), None)
    schemas = doc["components"]["schemas"]
    jsonschema_rs.validate(
        {**schemas[kind_schema_name(kind)], "components": {"schemas": schemas}}, sample
    )
