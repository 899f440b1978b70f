"""Object ``PUT``s answered by the fast write path (:mod:`app.api.fastpath`) on a real API
server: the same answers as the routes give, streamed and oversized bodies, and the requests it
must leave to Litestar."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from app.api.service import MAX_BODY

API = "/apis/quaymaster.io/v1"
NS = "fastpath"
LEASES = f"{API}/namespaces/{NS}/leases"


@pytest.fixture(scope="module")
def http(api_server) -> Iterator[httpx.Client]:  # type: ignore[no-untyped-def]
    headers = {"Authorization": f"Bearer {api_server.token}"}
    with httpx.Client(base_url=api_server.url, headers=headers, timeout=30.0) as c:
        r = c.post(f"{API}/namespaces", json={"metadata": {"name": NS}})
        assert r.status_code in (201, 409), r.text
        yield c


def lease(http: httpx.Client, name: str) -> dict[str, Any]:
    r = http.post(LEASES, json={"metadata": {"name": name}, "spec": {"holderIdentity": name}})
    assert r.status_code == 201, r.text
    return r.json()


def status_of(r: httpx.Response, code: int, reason: str) -> dict[str, Any]:
    assert r.status_code == code, r.text
    assert r.headers["content-type"] == "application/json"
    body = r.json()
    assert (body["kind"], body["code"], body["reason"]) == ("Status", code, reason), body
    return body


def test_a_put_answers_the_object_as_a_get_then_reads_it(http: httpx.Client) -> None:
    obj = lease(http, "same")
    obj["spec"]["renewTime"] = "2026-11-29T12:00:00.000000Z"
    r = http.put(f"{LEASES}/same", json=obj)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "application/json"
    assert int(r.headers["content-length"]) == len(r.content)
    got = http.get(f"{LEASES}/same")
    assert got.content == r.content
    assert r.json()["metadata"]["resourceVersion"] != obj["metadata"]["resourceVersion"]


def test_a_streamed_body_is_read_whole(http: httpx.Client) -> None:
    obj = lease(http, "streamed")
    obj["spec"]["renewTime"] = "2026-11-29T12:00:01.000000Z"
    raw = httpx.Response(200, json=obj).content

    def chunks() -> Iterator[bytes]:
        for i in range(0, len(raw), 7):
            yield raw[i : i + 7]

    r = http.put(f"{LEASES}/streamed", content=chunks())
    assert r.status_code == 200, r.text
    assert r.json()["spec"]["renewTime"] == "2026-11-29T12:00:01.000000Z"


def test_an_oversized_streamed_body_is_refused_unread_and_changes_nothing(
    http: httpx.Client,
) -> None:
    obj = lease(http, "big")

    def endless() -> Iterator[bytes]:
        yield b'{"metadata":{"name":"big"},"spec":{"x":"'
        for _ in range(MAX_BODY // 65536 + 2):
            yield b"a" * 65536

    status_of(http.put(f"{LEASES}/big", content=endless()), 413, "RequestEntityTooLarge")
    assert http.get(f"{LEASES}/big").json() == obj


def test_without_a_valid_token_nothing_is_read_or_written(api_server, http) -> None:  # type: ignore[no-untyped-def]
    obj = lease(http, "anon")
    changed = dict(obj, spec={"holderIdentity": "someone-else"})
    with httpx.Client(base_url=api_server.url, timeout=10) as anon:
        status_of(anon.put(f"{LEASES}/anon", json=changed), 401, "Unauthorized")
        bad = {"Authorization": "Bearer not-a-token"}
        status_of(anon.put(f"{LEASES}/anon", json=changed, headers=bad), 401, "Unauthorized")
    assert http.get(f"{LEASES}/anon").json() == obj


def test_a_stale_version_is_a_conflict_and_bad_input_has_causes(http: httpx.Client) -> None:
    obj = lease(http, "stale")
    fresh = http.put(f"{LEASES}/stale", json=dict(obj, spec={"holderIdentity": "b"})).json()
    status_of(http.put(f"{LEASES}/stale", json=obj), 409, "Conflict")
    bad = dict(fresh, spec={"holderIdentity": "c", "leaseDurationSeconds": "long"})
    body = status_of(http.put(f"{LEASES}/stale", json=bad), 422, "Invalid")
    fields = [c["field"] for c in body["details"]["causes"]]
    assert any(f.startswith("spec.leaseDurationSeconds") for f in fields), fields
    missing = dict(obj, metadata={"name": "missing", "resourceVersion": "1"})
    status_of(http.put(f"{LEASES}/missing", json=missing), 404, "NotFound")


def test_paths_it_does_not_answer_still_get_litestars_answers(http: httpx.Client) -> None:
    obj = lease(http, "other")
    status_of(http.put(f"{API}/namespaces/{NS}/widgets/w", json=obj), 404, "NotFound")
    status_of(http.put(f"{API}/leases/other", json=obj), 404, "NotFound")
    cm = f"{API}/namespaces/{NS}/configmaps"
    assert http.post(cm, json={"metadata": {"name": "c"}}).status_code == 201
    r = http.put(f"{cm}/c/status", json={"metadata": {"name": "c"}})
    assert r.status_code in (404, 405) and r.json()["kind"] == "Status"
