"""``SelfSubjectAccessReview`` and ``SelfSubjectRulesReview``: a principal asks what it may do.

Served under ``authorization.quaymaster.io/v1`` and, with the same handlers, under
Kubernetes' ``authorization.k8s.io/v1`` (where ``kubectl auth can-i`` posts). Resource
attributes without a group, or naming Kubernetes' core group, are answered for our group's
resource of that name, so ``kubectl auth can-i create pods`` asks about our pods. Every
authenticated principal may ask (ClusterRole ``system:basic-user``); the answer comes from
the same chain that authorises requests (``app.state.authz``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from litestar import Request, Response, get, post
from litestar.handlers import HTTPRouteHandler

from app.api.authz import Authorization
from app.api.discovery import group as api_group
from app.api.responses import json_response
from app.api.review_body import review_body  # kubectl auth can-i posts protobuf
from app.api.routes import guarded
from app.api.service import decode_body
from app.core import errors
from app.core.authz import AUTHZ_GROUP, Attributes
from app.core.kinds import BY_PLURAL, GROUP, VERSION
from app.store.tokens import User

K8S_GROUP = "authorization.k8s.io"
ACCESS = "selfsubjectaccessreviews"
RULES = "selfsubjectrulesreviews"
# Paths every authenticated principal may read (Kubernetes' ``system:discovery``).
DISCOVERY_URLS = ("/apis", "/apis/*", "/version", "/healthz", "/readyz", "/livez", "/openapi/*")


def _spec(request_body: bytes, kind: str) -> tuple[dict[str, Any], str]:
    obj = decode_body(request_body)
    if not isinstance(obj, dict):
        raise errors.BadRequest(f"a {kind} must be a JSON object")
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        raise errors.invalid(kind, None, [errors.Cause("spec", "FieldValueRequired", "Required")])
    return spec, str(obj.get("apiVersion") or f"{AUTHZ_GROUP}/{VERSION}")


def attributes_of(ra: dict[str, Any]) -> Attributes:
    """A review's ``resourceAttributes`` as request attributes (our group by default)."""

    def text(key: str) -> str:
        value = ra.get(key)
        return value if isinstance(value, str) else ""

    group = text("group")
    if group in ("", "core") and text("resource") in BY_PLURAL:
        group = GROUP
    return Attributes(
        text("verb"), text("resource"), text("namespace"), text("name"), text("subresource"),
        group,
    )  # fmt: skip


def _non_resource(na: dict[str, Any]) -> tuple[bool, str]:
    path, verb = str(na.get("path") or ""), str(na.get("verb") or "")
    for url in DISCOVERY_URLS:
        if verb == "get" and (path == url or (url.endswith("*") and path.startswith(url[:-1]))):
            return True, "discovery documents are readable by every authenticated principal"
    return False, ""


def access_review(authz: Authorization, user: User, spec: dict[str, Any]) -> dict[str, Any]:
    ra, na = spec.get("resourceAttributes"), spec.get("nonResourceAttributes")
    if isinstance(ra, dict):
        decision = authz.authorize(user, attributes_of(ra))
        allowed, reason = decision.allowed, decision.reason if decision.allowed else ""
    elif isinstance(na, dict):
        allowed, reason = _non_resource(na)
    else:
        raise errors.invalid(
            "SelfSubjectAccessReview",
            None,
            [
                errors.Cause(
                    "spec", "FieldValueRequired",
                    "exactly one of resourceAttributes and nonResourceAttributes must be set",
                )
            ],
        )  # fmt: skip
    status: dict[str, Any] = {"allowed": allowed}
    if reason:
        status["reason"] = reason
    return status


def rules_review(authz: Authorization, user: User, namespace: str) -> dict[str, Any]:
    rules = authz.rbac.current().rules_review(user, namespace)
    return {
        "resourceRules": [r.to_dict() for r in rules],
        "nonResourceRules": [{"verbs": ["get"], "nonResourceURLs": list(DISCOVERY_URLS)}],
        # Other authorizers in the chain (the node authorizer) grant what rules cannot list.
        "incomplete": len(authz.chain) > 1,
    }


def _rules_in_namespace(authz: Authorization, user: User, spec: dict[str, Any]) -> dict[str, Any]:
    namespace = spec.get("namespace")
    return rules_review(authz, user, namespace if isinstance(namespace, str) else "")


Answer = Callable[[Authorization, User, dict[str, Any]], dict[str, Any]]
# (plural, kind, summary, the review's status from its spec)
REVIEWS: tuple[tuple[str, str, str, Answer], ...] = (
    (ACCESS, "SelfSubjectAccessReview", "Ask whether I may do something", access_review),
    (RULES, "SelfSubjectRulesReview", "Ask what I may do in a namespace", _rules_in_namespace),
)


def _review(
    api_group_name: str, plural: str, kind: str, summary: str, answer: Answer
) -> HTTPRouteHandler:
    suffix = "" if api_group_name == AUTHZ_GROUP else "K8s"

    @post(f"/apis/{api_group_name}/{VERSION}/{plural}", operation_id=f"create{kind}{suffix}",
          tags=[kind], summary=summary, status_code=201)  # fmt: skip
    async def create_review(request: Request[Any, Any, Any]) -> Response[Any]:
        async def run(user: User) -> Response[Any]:
            spec, version = _spec(await review_body(request), kind)
            status = answer(request.app.state.authz, user, spec)
            body = {"kind": kind, "apiVersion": version, "metadata": {}}
            return json_response(body | {"spec": spec, "status": status}, 201)

        return await guarded(request, run, attrs=Attributes("create", plural, group=AUTHZ_GROUP))

    return create_review


def resources(api_group_name: str) -> dict[str, Any]:
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{api_group_name}/{VERSION}",
        "resources": [
            {"name": name, "singularName": "", "namespaced": False, "kind": kind,
             "verbs": ["create"]}
            for name, kind, _, _ in REVIEWS
        ],
    }  # fmt: skip


def _discovery(api_group_name: str) -> list[HTTPRouteHandler]:
    suffix = "" if api_group_name == AUTHZ_GROUP else "K8s"

    @get(f"/apis/{api_group_name}", operation_id=f"getAuthorizationAPIGroup{suffix}",
         tags=["discovery"])  # fmt: skip
    async def read_group(request: Request[Any, Any, Any]) -> Response[Any]:
        async def run(user: User) -> Response[Any]:
            return json_response(api_group(api_group_name))

        return await guarded(request, run)

    @get(f"/apis/{api_group_name}/{VERSION}", operation_id=f"getAuthorizationAPIResources{suffix}",
         tags=["discovery"])  # fmt: skip
    async def read_resources(request: Request[Any, Any, Any]) -> Response[Any]:
        async def run(user: User) -> Response[Any]:
            return json_response(resources(api_group_name))

        return await guarded(request, run)

    return [read_group, read_resources]


HANDLERS: list[HTTPRouteHandler] = [
    *(_review(group, *review) for group in (AUTHZ_GROUP, K8S_GROUP) for review in REVIEWS),
    *_discovery(AUTHZ_GROUP),
    *_discovery(K8S_GROUP),
]
