"""The HTTP client: Status -> exception mapping, paging, watch decoding, request shapes."""

from __future__ import annotations

import json
from collections.abc import Callable

import httpx
import pytest

from app.cli.client import ApiClient
from app.client import Unreachable, build
from app.core import errors
from app.core.errors import Cause
from app.core.kinds import BY_KIND

POD = BY_KIND["Pod"]
NODE = BY_KIND["Node"]


def client_for(handler: Callable[[httpx.Request], httpx.Response]) -> ApiClient:
    return ApiClient("http://qm.test/", "tok", transport=httpx.MockTransport(handler))


def status(code: int, reason: str, message: str = "boom", **details: object) -> dict:
    body: dict = {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details:
        body["details"] = details
    return body


class TestStatusMapping:
    @pytest.mark.parametrize(
        ("code", "reason", "cls"),
        [
            (400, "BadRequest", errors.BadRequest),
            (401, "Unauthorized", errors.Unauthorized),
            (403, "Forbidden", errors.Forbidden),
            (404, "NotFound", errors.NotFound),
            (405, "MethodNotAllowed", errors.MethodNotAllowed),
            (409, "AlreadyExists", errors.AlreadyExists),
            (409, "Conflict", errors.Conflict),
            (410, "Expired", errors.Gone),
            (410, "Gone", errors.Gone),
            (413, "RequestEntityTooLarge", errors.RequestEntityTooLarge),
            (415, "UnsupportedMediaType", errors.UnsupportedMediaType),
            (422, "Invalid", errors.Invalid),
            (429, "TooManyRequests", errors.TooManyRequests),
            (503, "ServiceUnavailable", errors.ServiceUnavailable),
            (504, "Timeout", errors.Timeout),
        ],
    )
    def test_reason_picks_class(self, code: int, reason: str, cls: type) -> None:
        err = errors.from_status(status(code, reason))
        assert type(err) is cls
        assert (err.code, err.reason, err.message) == (code, reason, "boom")

    def test_round_trip_of_server_errors(self) -> None:
        original = errors.invalid(
            "Pod", "web", [Cause("spec.containers[0].image", "FieldValueRequired", "Required")]
        )
        err = errors.from_status(original.to_status(), 422)
        assert isinstance(err, errors.Invalid)
        assert (err.kind, err.name, err.message) == ("Pod", "web", original.message)
        assert err.causes == original.causes
        assert err.retryable is False

    def test_conflict_is_retryable_and_keeps_retry_after(self) -> None:
        err = errors.from_status(status(429, "TooManyRequests", retryAfterSeconds=3))
        assert err.retryable and err.retry_after == 3

    def test_unknown_reason_falls_back_to_code(self) -> None:
        assert type(errors.from_status(status(404, "Weird"))) is errors.NotFound
        err = errors.from_status(status(500, "InternalError", "db down"))
        assert type(err) is errors.StatusError
        assert (err.code, err.reason, err.message) == (500, "InternalError", "db down")

    def test_non_status_body_uses_http_code_and_text(self) -> None:
        err = errors.from_status(None, 502, "Bad Gateway\n")
        assert (err.code, err.message) == (502, "Bad Gateway")
        assert type(errors.from_status(None, 404)) is errors.NotFound


class TestRequests:
    def test_paths_and_auth(self) -> None:
        seen: list[httpx.Request] = []

        def handler(request: httpx.Request) -> httpx.Response:
            seen.append(request)
            return httpx.Response(200, json={"metadata": {"name": "x"}})

        client = client_for(handler)
        client.get(POD, "prod", "web")
        client.get(NODE, "ignored", "n1")
        client.create(POD, "prod", {"kind": "Pod"})
        client.replace(POD, "prod", {"kind": "Pod", "metadata": {"name": "web"}})
        client.patch(POD, "prod", "web", {"metadata": {"labels": {"a": "b"}}})
        client.delete(POD, "prod", "web", propagation_policy="Foreground")
        client.delete(POD, "prod", "web")
        paths = [(r.method, r.url.path) for r in seen]
        assert paths == [
            ("GET", "/apis/quaymaster.io/v1/namespaces/prod/pods/web"),
            ("GET", "/apis/quaymaster.io/v1/nodes/n1"),
            ("POST", "/apis/quaymaster.io/v1/namespaces/prod/pods"),
            ("PUT", "/apis/quaymaster.io/v1/namespaces/prod/pods/web"),
            ("PATCH", "/apis/quaymaster.io/v1/namespaces/prod/pods/web"),
            ("DELETE", "/apis/quaymaster.io/v1/namespaces/prod/pods/web"),
            ("DELETE", "/apis/quaymaster.io/v1/namespaces/prod/pods/web"),
        ]
        assert all(r.headers["Authorization"] == "Bearer tok" for r in seen)
        assert seen[2].headers["Content-Type"] == "application/json"
        assert seen[4].headers["Content-Type"] == "application/merge-patch+json"
        assert json.loads(seen[5].content) == {
            "kind": "DeleteOptions",
            "apiVersion": "v1",
            "propagationPolicy": "Foreground",
        }
        assert seen[6].content == b""
        assert build.path(POD, None) == "/apis/quaymaster.io/v1/pods"
        assert build.path(POD, "a", "b", "status").endswith("/namespaces/a/pods/b/status")

    def test_error_body_raises_mapped_exception(self) -> None:
        def handler(request: httpx.Request) -> httpx.Response:
            body = status(404, "NotFound", 'pods "web" not found', name="web", kind="pods")
            return httpx.Response(404, json=body)

        with pytest.raises(errors.NotFound) as info:
            client_for(handler).get(POD, "default", "web")
        assert info.value.message == 'pods "web" not found'
        assert info.value.name == "web"

    def test_html_error_page(self) -> None:
        client = client_for(lambda r: httpx.Response(503, text="<h1>down</h1>"))
        with pytest.raises(errors.ServiceUnavailable, match="down"):
            client.version()

    def test_connection_failure(self) -> None:
        def handler(request: httpx.Request) -> httpx.Response:
            raise httpx.ConnectError("refused", request=request)

        with pytest.raises(Unreachable, match=r"http://qm\.test"):
            client_for(handler).version()


class TestPaging:
    def test_follows_continue_and_keeps_first_resource_version(self) -> None:
        seen: list[httpx.QueryParams] = []
        pages = {
            None: {"metadata": {"resourceVersion": "10", "continue": "p2"}, "items": [{"a": 1}]},
            "p2": {"metadata": {"resourceVersion": "11", "continue": "p3"}, "items": [{"a": 2}]},
            "p3": {"metadata": {"resourceVersion": "12"}, "items": [{"a": 3}]},
        }

        def handler(request: httpx.Request) -> httpx.Response:
            seen.append(request.url.params)
            page = dict(pages[request.url.params.get("continue")], kind="PodList")
            return httpx.Response(200, json=page)

        listed = client_for(handler).list(
            POD, "prod", label_selector="app=web", field_selector="spec.nodeName=n1"
        )
        assert [i["a"] for i in listed["items"]] == [1, 2, 3]
        assert listed["metadata"]["resourceVersion"] == "10"
        assert listed["kind"] == "PodList"
        assert all(i["kind"] == "Pod" and i["apiVersion"] for i in listed["items"])
        assert [p.get("continue") for p in seen] == [None, "p2", "p3"]
        for params in seen:
            assert params["limit"] == "500"
            assert params["labelSelector"] == "app=web"
            assert params["fieldSelector"] == "spec.nodeName=n1"

    def test_repeated_continue_token_stops(self) -> None:
        page = {"metadata": {"continue": "same"}, "items": []}
        client = client_for(lambda r: httpx.Response(200, json=page))
        with pytest.raises(errors.StatusError, match="repeated a continue token"):
            client.list(POD, "default")

    def test_empty_list(self) -> None:
        client = client_for(lambda r: httpx.Response(200, json={"metadata": {}, "items": None}))
        listed = client.list(NODE, None)
        assert listed["items"] == []
        assert listed["kind"] == "NodeList"


class TestWatch:
    def events(self, *lines: object) -> bytes:
        return b"".join(
            (json.dumps(line) if not isinstance(line, str) else line).encode() + b"\n"
            for line in lines
        )

    def test_decodes_events_and_sends_params(self) -> None:
        seen: list[httpx.Request] = []
        body = self.events(
            {"type": "ADDED", "object": {"metadata": {"name": "a", "resourceVersion": "5"}}},
            "",
            {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "6"}}},
        )

        def handler(request: httpx.Request) -> httpx.Response:
            seen.append(request)
            return httpx.Response(200, content=body)

        got = list(client_for(handler).watch(POD, None, "4", label_selector="app=x"))
        assert [e["type"] for e in got] == ["ADDED", "BOOKMARK"]
        params = seen[0].url.params
        assert seen[0].url.path == "/apis/quaymaster.io/v1/pods"
        assert params["watch"] == "1"
        assert params["resourceVersion"] == "4"
        assert params["allowWatchBookmarks"] == "true"
        assert params["labelSelector"] == "app=x"

    def test_error_event_raises_gone(self) -> None:
        body = self.events(
            {"type": "ADDED", "object": {"metadata": {"name": "a"}}},
            {"type": "ERROR", "object": status(410, "Expired", "too old resource version")},
        )
        stream = client_for(lambda r: httpx.Response(200, content=body)).watch(POD, "d", "1")
        assert next(stream)["type"] == "ADDED"
        with pytest.raises(errors.Gone, match="too old"):
            next(stream)

    def test_http_410_raises_gone(self) -> None:
        client = client_for(lambda r: httpx.Response(410, json=status(410, "Gone")))
        with pytest.raises(errors.Gone):
            list(client.watch(POD, "d", "1"))
