"""The tokens API: ``authentication.quaymaster.io/v1`` ``tokens`` (list, get, create, delete).

A token's record is served without its digest; the plain token is in ``status.token`` of the
create's answer only, once. Who may do what, in RBAC terms (``app.state.authz``):

* create a token of a service account: ``create serviceaccounts/token`` on that account
  (as Kubernetes' TokenRequest); the same is served as ``POST .../serviceaccounts/NAME/token``;
  where the caller holds nothing in the namespace, the answer is a missing namespace's;
* create a token of oneself with a subset of one's own groups: anyone but ``system:``
  principals (it grants nothing new), expiring no later than the token that asks;
* create a token of another user, or with other groups: ``create tokens`` in this group;
* list, get and revoke (delete): one's own tokens always; a service account's tokens with
  ``create serviceaccounts/token`` on it; any token with ``list``/``get``/``delete tokens``.

A record not visible to the caller answers 404, as a missing one does.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from litestar import Request, Response, delete, get, post

from app.api.request_context import write_context
from app.api.responses import json_response
from app.api.routes import PREFIX, guarded
from app.api.service import decode_body
from app.core import errors
from app.core.authz import Attributes
from app.core.principals import (
    AUTHENTICATED,
    AUTHN_GROUP,
    AUTHN_VERSION,
    MASTERS,
    TokenRequest,
    check_request,
)
from app.store import tokens
from app.store.tokens import User

TOKENS = f"/apis/{AUTHN_VERSION}/tokens"
MAX_BODY = 64 * 1024


def _can(request: Request[Any, Any, Any], user: User, attrs: Attributes) -> bool:
    if MASTERS in user.groups:
        return True
    authz = getattr(request.app.state, "authz", None)
    return bool(authz is not None and authz.allowed(user, attrs))


def _may_mint_for_account(request: Request[Any, Any, Any], user: User, ns: str, name: str) -> bool:
    attrs = Attributes("create", "serviceaccounts", ns, name, subresource="token")
    return _can(request, user, attrs)


def _may_see(request: Request[Any, Any, Any], user: User, obj: dict[str, Any], verb: str) -> bool:
    spec = obj.get("spec") or {}
    if spec.get("user") == user.name:
        return True
    sa = spec.get("serviceAccount")
    if sa and _may_mint_for_account(request, user, sa.get("namespace", ""), sa.get("name", "")):
        return True
    return _can(request, user, Attributes(verb, "tokens", name=obj["metadata"]["name"],
                                          group=AUTHN_GROUP))  # fmt: skip


def _check_account(request: Request[Any, Any, Any], user: User, ns: str, name: str) -> None:
    """May ``user`` mint tokens of the account ``ns/name``: nothing (allowed), a 403 naming the
    permission, or, where ``user`` holds nothing in ``ns``, the 404 a missing namespace gets."""
    if _may_mint_for_account(request, user, ns, name):
        return
    attrs = Attributes("create", "serviceaccounts", ns, name, subresource="token")
    authz = getattr(request.app.state, "authz", None)
    if authz is not None and authz.check(user, attrs) == "hidden":
        raise errors.NotFound(f'namespaces "{ns}" not found', kind="namespaces", name=ns)
    raise errors.Forbidden(
        f'serviceaccounts/token "{name}" is forbidden: User "{user.name}" cannot create'
        f' resource "serviceaccounts/token" in API group "quaymaster.io" in the namespace'
        f' "{ns}"'
    )


def _check_create(request: Request[Any, Any, Any], user: User, req: TokenRequest) -> TokenRequest:
    """``req`` if ``user`` may make it, shortened to the caller's own token's lifetime when only
    the self-service rule allows it (a token cannot outlive the one that minted it); else 403."""
    if req.service_account is not None:
        _check_account(request, user, *req.service_account)
        return req
    if _can(request, user, Attributes("create", "tokens", group=AUTHN_GROUP)):
        return req
    own = set(user.groups) - {AUTHENTICATED}
    if req.user == user.name and not user.name.startswith("system:") and set(req.groups) <= own:
        if user.expires_at is None:
            return req
        left = int((user.expires_at - datetime.now(UTC)).total_seconds())
        return replace(req, ttl_s=max(1, min(req.ttl_s, left)))
    raise errors.Forbidden(
        f'tokens is forbidden: User "{user.name}" cannot create resource "tokens" in API'
        f' group "{AUTHN_GROUP}" at the cluster scope (a token of another user, or with'
        " groups you are not in)"
    )


async def _create(request: Request[Any, Any, Any], user: User, body: Any) -> Response[Any]:
    req = _check_create(request, user, check_request(body, user.name))
    pool = request.app.state.objects.store.pool
    if req.service_account is not None:
        ns, name = req.service_account
        try:
            minted = await tokens.create_service_account_token(
                pool, ns, name, req.ttl_s, req.description, created_by=user.actor,
                ctx=write_context(user),
            )  # fmt: skip
        except errors.NotFound:
            raise errors.invalid(
                "Token",
                None,
                [
                    errors.Cause(
                        "spec.serviceAccount.name",
                        "FieldValueNotFound",
                        f'serviceaccounts "{name}" not found in namespace "{ns}"',
                    )
                ],
            ) from None
    else:
        minted = await tokens.mint(
            pool, req.user, req.groups, req.ttl_s, req.description, created_by=user.actor,
            minted_by=user.token_id if req.user == user.name else None, ctx=write_context(user),
        )  # fmt: skip
    obj = minted.obj
    obj["status"] = {**(obj.get("status") or {}), "token": minted.token}
    return json_response(obj, 201)


async def _body(request: Request[Any, Any, Any]) -> Any:
    raw = await request.body()
    if len(raw) > MAX_BODY:
        raise errors.RequestEntityTooLarge(f"a token request is at most {MAX_BODY} bytes")
    return decode_body(raw)


@post(TOKENS, operation_id="createToken", tags=["Token"], summary="Create a token (shown once)",
      status_code=201)  # fmt: skip
async def create_token(request: Request[Any, Any, Any]) -> Response[Any]:
    async def run(user: User) -> Response[Any]:
        return await _create(request, user, await _body(request))

    return await guarded(request, run)


@post(
    PREFIX + "/namespaces/{namespace:str}/serviceaccounts/{name:str}/token",
    operation_id="createServiceAccountToken",
    tags=["ServiceAccount"],
    summary="Create a token of a service account (shown once)",
    status_code=201,
)
async def create_sa_token(
    request: Request[Any, Any, Any], namespace: str, name: str
) -> Response[Any]:
    async def run(user: User) -> Response[Any]:
        # A TokenRequest-shaped body: only its spec matters (expirationSeconds, description).
        body = await _body(request) if (await request.body()).strip() else {}
        spec = body.get("spec") if isinstance(body, dict) else body
        if spec is None:
            spec = {}
        if isinstance(spec, dict):
            spec = {**spec, "serviceAccount": {"namespace": namespace, "name": name}}
        return await _create(request, user, {"spec": spec})

    return await guarded(request, run)


@get(TOKENS, operation_id="listTokens", tags=["Token"], summary="List the tokens one may see")
async def list_tokens(request: Request[Any, Any, Any]) -> Response[Any]:
    async def run(user: User) -> Response[Any]:
        pool = request.app.state.objects.store.pool
        everyone = _can(request, user, Attributes("list", "tokens", group=AUTHN_GROUP))
        items = await tokens.list_tokens(pool)
        if not everyone:
            items = [o for o in items if _may_see(request, user, o, "list")]
        wanted = request.query_params.get("user")
        if wanted:
            items = [o for o in items if (o.get("spec") or {}).get("user") == wanted]
        body = {"apiVersion": AUTHN_VERSION, "kind": "TokenList", "metadata": {}, "items": items}
        return json_response(body)

    return await guarded(request, run)


async def _visible(request: Request[Any, Any, Any], user: User, name: str, verb: str) -> Any:
    obj = await tokens.get_token(request.app.state.objects.store.pool, name)
    if obj is None or not _may_see(request, user, obj, verb):
        raise errors.NotFound(f'tokens "{name}" not found', kind="tokens", name=name)
    return obj


@get(TOKENS + "/{name:str}", operation_id="readToken", tags=["Token"], summary="Read a token")
async def read_token(request: Request[Any, Any, Any], name: str) -> Response[Any]:
    async def run(user: User) -> Response[Any]:
        return json_response(await _visible(request, user, name, "get"))

    return await guarded(request, run)


@delete(TOKENS + "/{name:str}", operation_id="deleteToken", tags=["Token"],
        summary="Revoke a token", status_code=200)  # fmt: skip
async def revoke_token(request: Request[Any, Any, Any], name: str) -> Response[Any]:
    async def run(user: User) -> Response[Any]:
        await _visible(request, user, name, "delete")
        pool = request.app.state.objects.store.pool
        obj = await tokens.revoke(pool, name, write_context(user))
        if obj is None:
            raise errors.NotFound(f'tokens "{name}" not found', kind="tokens", name=name)
        return json_response(obj)

    return await guarded(request, run)


async def _who(request: Request[Any, Any, Any], api_version: str) -> Response[Any]:
    async def run(user: User) -> Response[Any]:
        info: dict[str, Any] = {"username": user.name, "groups": list(user.groups)}
        if user.token_id:
            info["extra"] = {"authentication.quaymaster.io/token-id": [user.token_id]}
        body = {"apiVersion": api_version, "kind": "SelfSubjectReview", "metadata": {},
                "status": {"userInfo": info}}  # fmt: skip
        return json_response(body, 201)

    return await guarded(request, run)


@post(
    f"/apis/{AUTHN_VERSION}/selfsubjectreviews",
    operation_id="createSelfSubjectReview",
    tags=["Token"],
    summary="Who the caller is (Kubernetes' SelfSubjectReview)",
    status_code=201,
)
async def self_subject_review(request: Request[Any, Any, Any]) -> Response[Any]:
    return await _who(request, AUTHN_VERSION)


@post(
    "/apis/authentication.k8s.io/v1/selfsubjectreviews",
    operation_id="createSelfSubjectReviewK8s",
    tags=["Token"],
    summary="Who the caller is, where kubectl auth whoami asks",
    status_code=201,
)
async def self_subject_review_k8s(request: Request[Any, Any, Any]) -> Response[Any]:
    return await _who(request, "authentication.k8s.io/v1")


HANDLERS = [
    create_token,
    create_sa_token,
    list_tokens,
    read_token,
    revoke_token,
    self_subject_review,
    self_subject_review_k8s,
]
