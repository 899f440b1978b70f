"""The OpenAPI document against the server it describes, by schemathesis.

A real API server (on a database of its own, so generated deletes touch nothing another test
made) serves ``/schema``; schemathesis generates requests for every operation in it, sends them
with the bootstrap admin token, and fails on any server error, any status code the document does
not list for that operation, any response whose content type or body does not match it.

Bounded for ``make test``: the examples and fuzzing phases with a fixed number of examples per
operation, derandomized (the same cases every run for the same route table); the coverage
phase's boundary and negative values in CI and on request (``QM_OPENAPI_COVERAGE=1``).
Watches and log follows are streams that end only on a timeout: their ``watch`` and ``follow``
parameters are dropped from the generated cases (the watch tests cover streams).
"""

from __future__ import annotations

import json
import os
import secrets
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.config import SchemathesisConfig
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from app import __version__
from app.api.app import create_litestar
from app.api.openapi import TITLE, routes_of
from app.core.kinds import BY_KIND
from app.core.openapi import document, examples
from app.devstack.apiserver import ApiServer
from app.devstack.supervise import free_port

REPO_ROOT = Path(__file__).resolve().parents[2]
EXAMPLES_PER_OPERATION = int(os.environ.get("QM_OPENAPI_EXAMPLES", "8"))
# The coverage phase (boundary and negative values of every parameter and body field: ~14x the
# cases, ~4 minutes on a busy 2-core machine) runs in CI and when asked: QM_OPENAPI_COVERAGE=1
# (0 turns it off in CI).
COVERAGE = os.environ.get("QM_OPENAPI_COVERAGE", "1" if os.environ.get("CI") else "0") == "1"
SEED = 14
STREAMING = ("watch", "follow")


@schemathesis.check
def not_a_server_error_but_too_new(ctx: Any, response: Any, case: Any) -> bool | None:
    """``not_a_server_error``, except the 504 Kubernetes defines for a list or watch at a
    resourceVersion newer than the server has seen ("too large resource version")."""
    if response.status_code == 504 and "resourceVersion" in (case.query or {}):
        body = response.json()
        if body.get("reason") == "Timeout" and "resource version" in body.get("message", ""):
            return None
    return not_a_server_error(ctx, response, case)


CHECKS = [
    not_a_server_error_but_too_new,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]
CASES: list[int] = []  # the status code of each case, for the summary at the end


@pytest.fixture(scope="module")
def conformance_server(
    make_database: Callable[[str], str], redis_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ApiServer]:
    url = make_database("qm_openapi")
    port = free_port()
    token = secrets.token_urlsafe(32)
    env = {
        **os.environ,
        "DATABASE_URL": url,
        "QM_STREAM_DATABASE_URL": url,
        "QM_BROKER_URL": redis_url,
        "QM_BOOTSTRAP_TOKEN": token,
        "QM_API_PORT": str(port),
        "QM_API_URL": f"http://127.0.0.1:{port}",
        "PYTHONUNBUFFERED": "1",
    }
    server = ApiServer(port, token, env, tmp_path_factory.mktemp("openapi") / "api.log", REPO_ROOT)
    server.start(timeout=60.0)
    try:
        yield server
    finally:
        server.stop()
        codes = ", ".join(f"{c}: {n}" for c, n in sorted(Counter(CASES).items()))
        sys.stderr.write(f"\nschemathesis: {len(CASES)} cases passed the checks ({codes})\n")


def _document() -> dict[str, Any]:
    """The document the server serves at ``/schema``, built by the same code from the same
    route table (``test_the_served_document_is_the_one_tested`` checks they are equal); the
    schema must exist when pytest collects, before any server runs."""
    return document(routes_of(create_litestar()), TITLE, __version__)


CONFIG = SchemathesisConfig.from_dict(
    {
        "seed": SEED,
        "request-timeout": 30,
        "generation": {"max-examples": EXAMPLES_PER_OPERATION, "deterministic": True},
        "phases": {
            "examples": {"enabled": True},
            "coverage": {"enabled": COVERAGE},
            "fuzzing": {"enabled": True},
            "stateful": {"enabled": False},
        },
    }
)
schema = schemathesis.openapi.from_dict(_document(), config=CONFIG)


def test_the_served_document_is_the_one_tested(conformance_server: ApiServer) -> None:
    served = httpx.get(f"{conformance_server.url}/schema", timeout=30).json()
    assert served == json.loads(json.dumps(_document()))


def test_malformed_options_and_metadata_are_client_errors(conformance_server: ApiServer) -> None:
    """Two server errors the coverage phase found: a delete's ``preconditions`` and a
    ``Scale``'s ``metadata`` that are not objects."""
    h = {"Authorization": f"Bearer {conformance_server.token}"}
    api = f"{conformance_server.url}/apis/quaymaster.io/v1/namespaces/default"
    deployment = examples.example(BY_KIND["Deployment"])
    assert deployment is not None
    deployment["metadata"]["name"] = "malformed"
    with httpx.Client(headers=h, timeout=30) as client:
        assert client.post(f"{api}/deployments", json=deployment).status_code == 201
        item = f"{api}/deployments/malformed"
        scale = client.put(f"{item}/scale", json={"metadata": [None], "spec": {"replicas": 2}})
        assert (scale.status_code, scale.json()["kind"]) == (400, "Status")
        gone = client.request("DELETE", item, json={"preconditions": [None]})
        assert (gone.status_code, gone.json()["reason"]) == (422, "Invalid")
        assert client.delete(item).status_code == 200


@schema.parametrize()
@settings(
    max_examples=EXAMPLES_PER_OPERATION,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)
def test_the_server_answers_as_its_document_says(case: Any, conformance_server: ApiServer) -> None:
    if case.query:
        for name in STREAMING:
            case.query.pop(name, None)
    response = case.call_and_validate(
        base_url=conformance_server.url,
        headers={"Authorization": f"Bearer {conformance_server.token}"},
        checks=CHECKS,
    )
    CASES.append(response.status_code)
