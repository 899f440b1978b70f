"""The access reviews kubectl posts as protobuf, read from bodies captured from kubectl 1.37
(``kubectl auth can-i create deployments -n kc --subresource=scale`` and ``--list -n kc``)."""

from __future__ import annotations

import pytest

from app.core import errors, k8s_protobuf

ACCESS = bytes.fromhex(
    "6b3873000a320a17617574686f72697a6174696f6e2e6b38732e696f2f7631121753656c665375626a6563"
    "7441636365737352657669657712530a100a0012001a0022002a0032003800420012350a330a026b631206"
    "6372656174651a0d717561796d61737465722e696f22002a0b6465706c6f796d656e747332057363616c65"
    "3a001a08080012001a0020001a002200"
)
RULES = bytes.fromhex(
    "6b3873000a310a17617574686f72697a6174696f6e2e6b38732e696f2f7631121653656c665375626a6563"
    "7452756c6573526576696577121e0a100a0012001a0022002a0032003800420012040a026b631a04180022"
    "001a002200"
)


def test_an_access_review_from_kubectl() -> None:
    assert k8s_protobuf.review(ACCESS) == {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview",
        "spec": {
            "resourceAttributes": {
                "namespace": "kc",
                "verb": "create",
                "group": "quaymaster.io",
                "version": "",
                "resource": "deployments",
                "subresource": "scale",
                "name": "",
            }
        },
    }


def test_a_rules_review_from_kubectl() -> None:
    assert k8s_protobuf.review(RULES) == {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectRulesReview",
        "spec": {"namespace": "kc"},
    }


@pytest.mark.parametrize("body", [b"{}", b"k8s\x00\x0a\xff", ACCESS[:-40], b""])
def test_what_is_not_a_review_is_a_bad_request(body: bytes) -> None:
    with pytest.raises(errors.StatusError) as caught:
        k8s_protobuf.review(body)
    assert caught.value.code in (400, 415)


def test_another_kind_is_refused() -> None:
    other = ACCESS.replace(b"SelfSubjectAccessReview", b"SelfSubjectAccessRevieX")
    with pytest.raises(errors.StatusError) as caught:
        k8s_protobuf.review(other)
    assert caught.value.code == 415
