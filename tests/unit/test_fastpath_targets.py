"""Which requests the fast write path answers itself, and which it leaves to Litestar."""

from __future__ import annotations

import pytest

from app.api.fastpath import _sample_target, _target
from app.core.kinds import KINDS

V1 = "/apis/quaymaster.io/v1"


def scope(path: str, method: str = "PUT", kind: str = "http") -> dict[str, object]:
    return {"type": kind, "method": method, "path": path, "headers": []}


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        (f"{V1}/namespaces/a/leases/n1", ("Lease", "a", "n1", False)),
        (f"{V1}/namespaces/a/pods/p/status", ("Pod", "a", "p", True)),
        (f"{V1}/nodes/n1/status", ("Node", "", "n1", True)),
        (f"{V1}/nodes/n1", ("Node", "", "n1", False)),
        (f"{V1}/namespaces/team", ("Namespace", "", "team", False)),
        (f"{V1}/namespaces/team/status", ("Namespace", "", "team", True)),
    ],
)
def test_object_puts_are_answered_here(path: str, expected: tuple[str, str, str, bool]) -> None:
    target = _target(scope(path))
    assert target is not None
    kind, namespace, name, status = target
    assert (kind.kind, namespace, name, status) == expected


@pytest.mark.parametrize(
    "path",
    [
        f"{V1}/namespaces/a/leases",  # a collection
        f"{V1}/namespaces/a/widgets/w",  # no such kind
        f"{V1}/namespaces/a/nodes/n1",  # a cluster-scoped kind under a namespace
        f"{V1}/leases/n1",  # a namespaced kind without one
        f"{V1}/namespaces/a/configmaps/c/status",  # a kind without status
        f"{V1}/namespaces/a/pods/p/log",  # another subresource
        f"{V1}/namespaces/a/pods/p/status/extra",
        "/apis/metrics.quaymaster.io/v1/nodes/n1",
        "/api/v1/namespaces/a/pods/p",
    ],
)
def test_anything_else_goes_to_litestar(path: str) -> None:
    assert _target(scope(path)) is None


@pytest.mark.parametrize("method", ["GET", "POST", "PATCH", "DELETE"])
def test_only_put_is_answered_here(method: str) -> None:
    assert _target(scope(f"{V1}/namespaces/a/leases/n1", method)) is None


def test_lifespan_and_websocket_scopes_go_to_litestar() -> None:
    assert _target(scope(f"{V1}/nodes/n1", kind="lifespan")) is None
    assert _target(scope(f"{V1}/nodes/n1", kind="websocket")) is None


def test_every_kind_with_status_has_a_fast_status_put() -> None:
    for kind in (k for k in KINDS if k.has_status):
        ns = "namespaces/x/" if kind.namespaced else ""
        assert _target(scope(f"{V1}/{ns}{kind.plural}/o/status")) is not None, kind.kind


METRICS = "/apis/metrics.quaymaster.io/v1"


def test_usage_samples_are_answered_here() -> None:
    assert _sample_target(scope(f"{METRICS}/nodes/n1/samples", "POST")) == "n1"


@pytest.mark.parametrize(
    ("path", "method"),
    [
        (f"{METRICS}/nodes/n1/samples", "PUT"),
        (f"{METRICS}/nodes/n1/samples", "GET"),
        (f"{METRICS}/nodes/n1", "POST"),
        (f"{METRICS}/nodes/n1/samples/x", "POST"),
        (f"{METRICS}/nodes//samples", "POST"),
        (f"{V1}/nodes/n1/samples", "POST"),
    ],
)
def test_other_metrics_requests_go_to_litestar(path: str, method: str) -> None:
    assert _sample_target(scope(path, method)) is None
    assert _sample_target(scope(f"{METRICS}/nodes/n1/samples", "POST", "websocket")) is None
