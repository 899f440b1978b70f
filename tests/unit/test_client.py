"""The shared REST client's pure parts: the path of every kind and subresource, the requests
the verbs build, answers and ``Status`` bodies decoded (through ``from_status``, with the
retry hint), paging that refuses a repeated continue token, and watch stream decoding; and the
asynchronous client over a fake byte transport giving the same requests and errors."""

from __future__ import annotations

import json
from typing import Any

import pytest

from app.client import AsyncRestClient, QueueTimeout, Unreachable, build, decode
from app.core import errors
from app.core.kinds import BY_KIND

POD = BY_KIND["Pod"]
NODE = BY_KIND["Node"]
LEASE = BY_KIND["Lease"]
BASE = "/apis/quaymaster.io/v1"


@pytest.mark.parametrize(
    ("got", "want"),
    [
        (build.path(POD, "prod"), f"{BASE}/namespaces/prod/pods"),
        (build.path(POD, None), f"{BASE}/pods"),
        (build.path(POD, "prod", "web", "status"), f"{BASE}/namespaces/prod/pods/web/status"),
        (build.path(NODE, "ignored", "n1"), f"{BASE}/nodes/n1"),
        (build.path(NODE, None, "n1", "drain"), f"{BASE}/nodes/n1/drain"),
        (build.path(POD, "a b", "x/y"), f"{BASE}/namespaces/a%20b/pods/x%2Fy"),
        (build.metrics_path("nodes"), "/apis/metrics.quaymaster.io/v1/nodes"),
        (build.metrics_path("pods", "ns", "p"),
         "/apis/metrics.quaymaster.io/v1/namespaces/ns/pods/p"),
        (build.metrics_path("nodes", None, "n1", "samples"),
         "/apis/metrics.quaymaster.io/v1/nodes/n1/samples"),
    ],
)  # fmt: skip
def test_paths(got: str, want: str) -> None:
    assert got == want


def body(request: build.Request) -> Any:
    assert request.body is not None
    return json.loads(request.body)


def test_verbs_build_method_path_and_body() -> None:
    lease = {"metadata": {"name": "n1", "resourceVersion": "7"}}
    put = build.replace(LEASE, "ns", lease, "status")
    assert (put.method, put.path, body(put)) == ("PUT", f"{BASE}/namespaces/ns/leases/n1/status",
                                                 lease)  # fmt: skip
    patch = build.patch(NODE, None, "n1", {"spec": {"unschedulable": True}})
    assert patch.content_type == build.MERGE_PATCH and patch.method == "PATCH"
    assert build.delete(POD, "ns", "p").body is None
    confirm = build.delete(POD, "ns", "p", grace_seconds=0, uid="u1")
    assert body(confirm) == {"kind": "DeleteOptions", "apiVersion": "v1",
                             "gracePeriodSeconds": 0, "preconditions": {"uid": "u1"}}  # fmt: skip
    evict = build.evict("ns", "p", {"gracePeriodSeconds": 5})
    assert evict.path == f"{BASE}/namespaces/ns/pods/p/eviction"
    assert body(evict)["metadata"] == {"name": "p", "namespace": "ns"}
    assert body(evict)["deleteOptions"] == {"gracePeriodSeconds": 5}
    log = build.log("ns", "p", {"container": "c", "follow": "true"})
    assert log.target == f"{BASE}/namespaces/ns/pods/p/log?container=c&follow=true"
    sample = build.usage_sample("n1", {"pods": []})
    assert (sample.method, sample.path) == ("POST", build.metrics_path("nodes", None, "n1",
                                                                       "samples"))  # fmt: skip


def test_list_and_watch_queries() -> None:
    first = build.list_page(POD, None, field_selector="spec.nodeName=n1")
    assert dict(first.params) == {"limit": "500", "fieldSelector": "spec.nodeName=n1"}
    nxt = build.list_page(POD, "ns", label_selector="app=web", limit=10, token="t2")
    assert dict(nxt.params) == {"limit": "10", "labelSelector": "app=web", "continue": "t2"}
    watch = build.watch(POD, None, "42", field_selector="spec.nodeName=n1", timeout_seconds=60)
    assert dict(watch.params) == {"watch": "1", "allowWatchBookmarks": "true",
                                  "resourceVersion": "42", "fieldSelector": "spec.nodeName=n1",
                                  "timeoutSeconds": "60"}  # fmt: skip
    assert "resourceVersion" not in dict(build.watch(POD, None, "").params)


class TestAnswers:
    def test_status_bodies_map_through_from_status(self) -> None:
        status = {"kind": "Status", "code": 409, "reason": "AlreadyExists", "message": "taken",
                  "details": {"name": "web", "kind": "pods"}}  # fmt: skip
        err = decode.error(409, json.dumps(status).encode())
        assert type(err) is errors.AlreadyExists and err.name == "web"
        assert type(decode.error(409, b'{"reason": "Conflict"}')) is errors.Conflict

    def test_an_error_page_that_is_not_json_keeps_its_text(self) -> None:
        err = decode.error(502, b"<h1>bad gateway</h1>\n")
        assert (type(err), err.code, err.message) == (
            errors.StatusError,
            502,
            "<h1>bad gateway</h1>",
        )
        assert len(decode.error(503, b"x" * 5000).message) == 500

    def test_retry_after_from_the_body_else_the_header(self) -> None:
        limited = {"reason": "TooManyRequests", "details": {"retryAfterSeconds": 3}}
        raw = json.dumps(limited).encode()
        assert decode.error(429, raw, "9").retry_after == 3
        err = decode.error(429, b"slow down", "7")
        assert isinstance(err, errors.TooManyRequests) and err.retryable and err.retry_after == 7
        assert decode.error(503, b"", "soon").retry_after is None

    def test_success_bodies(self) -> None:
        assert decode.answer(200, b'{"a": 1}') == {"a": 1}
        assert decode.answer(200, b"") == {}
        assert decode.answer(200, b"plain text") == "plain text"
        with pytest.raises(errors.NotFound):
            decode.answer(404, b"")


class TestPager:
    def test_pages_follow_continue_tokens_and_keep_the_first_version(self) -> None:
        pager = decode.Pager(POD, "ns", label_selector="app=web", limit=2)
        pages = [
            {"kind": "PodList", "metadata": {"resourceVersion": "10", "continue": "p2"},
             "items": [{"n": 1}, {"n": 2}]},
            {"metadata": {"resourceVersion": "11"}, "items": [{"n": 3}, "not an object"]},
        ]  # fmt: skip
        tokens = []
        for page in pages:
            tokens.append(dict(pager.request().params).get("continue"))
            more = pager.add(page)
        assert tokens == [None, "p2"] and more is False
        listed = pager.result()
        assert [i["n"] for i in listed["items"]] == [1, 2, 3]
        assert listed["metadata"] == {"resourceVersion": "10"} and listed["kind"] == "PodList"
        assert all(i["kind"] == "Pod" for i in listed["items"])

    def test_a_repeated_continue_token_is_refused(self) -> None:
        pager = decode.Pager(POD, None)
        assert pager.add({"metadata": {"continue": "a"}, "items": []})
        assert pager.add({"metadata": {"continue": "b"}, "items": []})
        with pytest.raises(errors.StatusError, match="repeated a continue token"):
            pager.add({"metadata": {"continue": "a"}, "items": []})

    def test_a_page_that_is_not_an_object_is_refused(self) -> None:
        with pytest.raises(errors.StatusError, match="not a JSON object"):
            decode.Pager(POD, None).add(["x"])

    def test_an_empty_list_has_the_kinds_list_name(self) -> None:
        pager = decode.Pager(NODE, None)
        assert not pager.add({"metadata": {}, "items": None})
        assert pager.result()["kind"] == "NodeList" and pager.result()["items"] == []


def test_watch_events_raise_errors_and_broken_lines() -> None:
    lines = [json.dumps({"type": "ADDED", "object": {}}), "",
             json.dumps({"type": "ERROR", "object": {"message": "too old"}})]  # fmt: skip
    events = decode.watch_events(lines)
    assert next(events)["type"] == "ADDED"
    with pytest.raises(errors.Gone, match="too old"):  # no code in the body: 410 is assumed
        next(events)
    with pytest.raises(Unreachable, match="malformed"):
        list(decode.watch_events(['{"type": "ADD']))


class FakeTransport:
    """Answers from a script; records what it was asked."""

    def __init__(self, *answers: tuple[int, bytes] | Exception) -> None:
        self.answers = list(answers)
        self.sent: list[tuple[str, str, bytes | None, str]] = []

    async def send(
        self, method: str, target: str, body: bytes | None = None, content_type: str = build.JSON
    ) -> tuple[int, bytes]:
        self.sent.append((method, target, body, content_type))
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    async def close(self) -> None:
        pass


async def test_the_async_client_builds_and_maps_as_the_sync_one() -> None:
    conflict = json.dumps({"kind": "Status", "code": 409, "reason": "Conflict"}).encode()
    transport = FakeTransport((200, b'{"ok": true}'), (409, conflict), Unreachable("reset"),
                              QueueTimeout("no turn"))  # fmt: skip
    api = AsyncRestClient(transport)
    lease = {"metadata": {"name": "n1"}}
    assert await api.get(LEASE, "ns", "n1") == {"ok": True}
    with pytest.raises(errors.Conflict):
        await api.replace(LEASE, "ns", lease)
    with pytest.raises(Unreachable):
        await api.patch(NODE, None, "n1", {"spec": {}})
    with pytest.raises(QueueTimeout):
        await api.get(LEASE, "ns", "n1")
    get, put, patch, _ = transport.sent
    assert get == ("GET", f"{BASE}/namespaces/ns/leases/n1", None, build.JSON)
    assert put[:2] == ("PUT", f"{BASE}/namespaces/ns/leases/n1") and json.loads(put[2] or b"")
    assert patch[3] == build.MERGE_PATCH
    assert api.codes == {"200": 1, "409": 1, "unreachable": 1, "queue-timeout": 1}
