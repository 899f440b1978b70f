"""Node credentials over the API: bootstrap tokens, joins, token reviews, and the API server's
own credential for agents.

All under ``/apis/authentication.quaymaster.io/v1`` (ADR 0045):

- ``POST .../bootstraptokens`` (``create bootstraptokens``: the cluster's administrators)
  with ``{"spec": {"ttlSeconds", "uses", "nodeName", "description"}}`` answers a
  ``BootstrapToken`` whose ``status.token`` is shown this once.
- ``GET .../bootstraptokens`` and ``DELETE .../bootstraptokens/{id}`` (``list``/``delete
  bootstraptokens``): what is outstanding, never a secret; a deleted token joins nothing.
- ``POST .../nodecredentials`` with the bootstrap token as the bearer and ``{"spec":
  {"nodeName": n}}``: spends one use and answers a ``NodeCredential`` whose ``status.token``
  is user ``system:node:<n>`` in group ``system:nodes``. The bootstrap token authenticates
  nothing else. A token bound to no node may not join as a node that holds a live credential
  (403 saying how to re-join it; nothing is spent).
- ``POST .../tokenreviews`` with ``{"spec": {"token": t}}``: who ``t`` is
  (``status.authenticated``, ``status.user``), as Kubernetes' TokenReview. An agent's log
  server asks it who calls (``agent.server``); the caller needs ``create tokenreviews``
  (nodes have it through the node authorizer).

Each API server mints a credential of its own at start (user ``system:apiserver``, group
``system:apiservers``, two days, renewed every twelve hours; each one revoked when replaced and
the last when the server stops) and presents it to agents' log servers
(:func:`agent_credential`, ``app.api.logs``); agents accept that principal and no shared
secret.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import asyncpg
from litestar import Litestar, Request, Response, delete, get, post
from litestar.handlers import HTTPRouteHandler

from app.api.nodegraph import NodeAuthorizer
from app.api.responses import error_response, json_response
from app.api.routes import guarded
from app.api.service import decode_body
from app.core import errors
from app.core.authz import Attributes
from app.core.authz import node as node_authz
from app.core.errors import Cause
from app.core.kinds import Kind
from app.core.names import validate_dns1123_subdomain
from app.core.objects import format_time
from app.store import bootstrap
from app.store.tokens import User
from app.stream.cache import WatchCache

log = logging.getLogger(__name__)
GROUP = node_authz.AUTHN_GROUP
PREFIX = f"/apis/{GROUP}/v1"
API_VERSION = f"{GROUP}/v1"
DEFAULT_TTL_S = 24 * 3600
MAX_TTL_S = 30 * 24 * 3600
CREDENTIAL_TTL_S = 2 * 24 * 3600
RENEW_EVERY_S = 12 * 3600


def _body(raw: bytes) -> dict[str, Any]:
    parsed = decode_body(raw)
    if not isinstance(parsed, dict):
        raise errors.BadRequest("the request body must be a JSON object")
    spec = parsed.get("spec")
    return spec if isinstance(spec, dict) else {}


def _int(spec: dict[str, Any], key: str, default: int, low: int, high: int) -> int:
    value = spec.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise errors.invalid(
            "BootstrapToken", None,
            [Cause(f"spec.{key}", "FieldValueInvalid", f"must be an integer in [{low}, {high}]")],
        )  # fmt: skip
    return value


def _node_name(spec: dict[str, Any], kind: str, required: bool) -> str | None:
    name = spec.get("nodeName")
    if name is None and not required:
        return None
    problems = validate_dns1123_subdomain(name) if isinstance(name, str) else ["must be a string"]
    if problems:
        raise errors.invalid(kind, None, [Cause("spec.nodeName", "FieldValueInvalid",
                                                "; ".join(problems))])  # fmt: skip
    return str(name)


@post(f"{PREFIX}/bootstraptokens", operation_id="createBootstrapToken", tags=["BootstrapToken"],
      summary="Create a one-time token an agent joins with", status_code=201)  # fmt: skip
async def create_bootstrap_token(request: Request[Any, Any, Any]) -> Response[Any]:
    async def run(user: User) -> Response[Any]:
        spec = _body(await request.body())
        created = await bootstrap.create_bootstrap_token(
            _pool(request),
            _int(spec, "ttlSeconds", DEFAULT_TTL_S, 1, MAX_TTL_S),
            uses=_int(spec, "uses", 1, 1, 100_000),
            node_name=_node_name(spec, "BootstrapToken", required=False),
            description=str(spec.get("description") or ""),
            created_by=user.name,
        )
        return json_response({
            "kind": "BootstrapToken", "apiVersion": API_VERSION,
            "metadata": {"name": created.token_id},
            "spec": {"uses": created.uses, "nodeName": created.node_name},
            "status": {"token": created.token, "expiresAt": created.expires_at},
        }, 201)  # fmt: skip

    return await guarded(request, run, attrs=Attributes("create", "bootstraptokens", group=GROUP))


def _record(row: dict[str, Any]) -> dict[str, Any]:
    """A bootstrap token as the API shows it: never its secret."""
    return {
        "kind": "BootstrapToken", "apiVersion": API_VERSION,
        "metadata": {"name": row["token_id"], "creationTimestamp": format_time(row["created_at"])},
        "spec": {"nodeName": row["node_name"], "description": row["description"]},
        "status": {"usesLeft": row["uses_left"], "expiresAt": format_time(row["expires_at"]),
                   "expired": row["expired"], "lastUsedAt": format_time(row["last_used_at"]),
                   "createdBy": row["created_by"]},
    }  # fmt: skip


@get(f"{PREFIX}/bootstraptokens", operation_id="listBootstrapTokens", tags=["BootstrapToken"],
     summary="List bootstrap tokens (never their secrets)")  # fmt: skip
async def list_bootstrap_tokens(request: Request[Any, Any, Any]) -> Response[Any]:
    async def run(user: User) -> Response[Any]:
        rows = await bootstrap.list_bootstrap_tokens(_pool(request))
        return json_response({"kind": "BootstrapTokenList", "apiVersion": API_VERSION,
                              "metadata": {}, "items": [_record(r) for r in rows]})  # fmt: skip

    return await guarded(request, run, attrs=Attributes("list", "bootstraptokens", group=GROUP))


@delete(f"{PREFIX}/bootstraptokens/{{name:str}}", operation_id="deleteBootstrapToken",
        tags=["BootstrapToken"], summary="Delete a bootstrap token before it is used",
        status_code=200)  # fmt: skip
async def delete_bootstrap_token(request: Request[Any, Any, Any], name: str) -> Response[Any]:
    async def run(user: User) -> Response[Any]:
        if not await bootstrap.delete_bootstrap_token(_pool(request), name):
            raise errors.NotFound(
                f'bootstraptokens "{name}" not found', kind="bootstraptokens", name=name
            )
        return json_response({"kind": "Status", "apiVersion": "v1", "metadata": {},
                              "status": "Success", "details": {"name": name,
                              "kind": "bootstraptokens"}})  # fmt: skip

    attrs = Attributes("delete", "bootstraptokens", name=name, group=GROUP)
    return await guarded(request, run, attrs=attrs)


@post(f"{PREFIX}/nodecredentials", operation_id="createNodeCredential",
      tags=["NodeCredential"], status_code=201,
      summary="Exchange a bootstrap token for the credential of one node")  # fmt: skip
async def create_node_credential(request: Request[Any, Any, Any]) -> Response[Any]:
    try:
        header = request.headers.get("authorization") or ""
        token = header[len("Bearer ") :].strip() if header.startswith("Bearer ") else ""
        if not token:
            raise errors.Unauthorized("Unauthorized: a bootstrap token is required")
        node = _node_name(_body(await request.body()), "NodeCredential", required=True)
        assert node is not None
        try:
            credential = await bootstrap.join(_pool(request), token, node)
        except bootstrap.NodeHeld as held:
            raise errors.Forbidden(_held_message(held), kind="nodecredentials", name=node) from None
        if credential is None:
            raise errors.Unauthorized(
                "Unauthorized: the bootstrap token is not valid (unknown, expired, used up, "
                "or bound to another node)"
            )
    except errors.StatusError as exc:
        return error_response(exc)
    log.info("node %s joined", node)
    return json_response({
        "kind": "NodeCredential", "apiVersion": API_VERSION, "metadata": {"name": node},
        "status": {"token": credential, "username": bootstrap.node_user(node),
                   "groups": [bootstrap.NODES_GROUP]},
    }, 201)  # fmt: skip


def _held_message(held: bootstrap.NodeHeld) -> str:
    user = bootstrap.node_user(held.node)
    return (
        f'node "{held.node}" already holds a live credential, and bootstrap token '
        f"{held.token_id} is bound to no node, so it may not join under that name (the token "
        "was not spent). To re-join that machine, use a token bound to its name (qm node "
        f"bootstrap-token create --node {held.node}), or first revoke its credential (qm token "
        f"list --user {user}, then qm token revoke ID) or delete the Node, which revokes it"
    )


@post(f"{PREFIX}/tokenreviews", operation_id="createTokenReview", tags=["TokenReview"],
      summary="Who a bearer token is", status_code=201)  # fmt: skip
async def create_token_review(request: Request[Any, Any, Any]) -> Response[Any]:
    async def run(user: User) -> Response[Any]:
        token = _body(await request.body()).get("token")
        status: dict[str, Any] = {"authenticated": False}
        if isinstance(token, str) and token:
            with contextlib.suppress(errors.Unauthorized):
                who = await request.app.state.auth.user_for(f"Bearer {token}")
                status = {"authenticated": True,
                          "user": {"username": who.name, "groups": list(who.groups)}}  # fmt: skip
        return json_response({"kind": "TokenReview", "apiVersion": API_VERSION,
                              "status": status}, 201)  # fmt: skip

    return await guarded(request, run, attrs=Attributes("create", "tokenreviews", group=GROUP))


def _pool(request: Request[Any, Any, Any]) -> asyncpg.Pool:
    pool: asyncpg.Pool = request.app.state.objects.store.pool
    return pool


Guard = Callable[[Kind, dict[str, Any], User], None]


def node_restriction(cache: WatchCache) -> Guard:
    """The store's guard for nodes' writes (as Kubernetes' NodeRestriction admission): a node
    writes only its own Node, Lease and lease namespace, and of its own Node it may not change
    what administrators steer workloads with (restricted labels, cordon, others' taints: see
    :func:`app.core.authz.node.self_change`). An update's object carries the stored uid
    (creates have none); the stored object it is compared with is the cache's, which is the
    very version the write is conditional on (nothing awaits between the service reading it and
    calling the guards)."""

    def guard(kind: Kind, obj: dict[str, Any], user: User) -> None:
        if node_authz.node_of(user) is None:
            return
        old = _stored(cache, kind, obj) if kind.kind == "Node" else None
        refusal = node_authz.admission_refusal(user, kind.kind, obj, old)
        if refusal is not None:
            name = (obj.get("metadata") or {}).get("name")
            raise errors.Forbidden(refusal, kind=kind.plural, name=name)

    return guard


def _stored(cache: WatchCache, kind: Kind, obj: dict[str, Any]) -> dict[str, Any] | None:
    """The stored object an update of ``obj`` replaces; None for a create."""
    meta = obj.get("metadata") or {}
    uid = meta.get("uid")
    if not uid:
        return None
    cached = cache.get(kind, meta.get("namespace") or "", str(meta.get("name") or ""))
    if cached is None or cached.uid != uid:
        raise errors.Conflict(
            f'{kind.plural} "{meta.get("name")}" changed meanwhile: read it again and retry',
            kind=kind.plural,
        )
    return cached.obj()


# -- this API server's own credential, for agents ----------------------------------------------


def agent_credential(state: Any) -> str | None:
    """The token this server presents to agents' log servers (None before it is minted)."""
    token: str | None = getattr(state, "agent_credential", None)
    return token


async def _renew(app: Litestar, pool: asyncpg.Pool) -> None:
    while True:
        await asyncio.sleep(RENEW_EVERY_S)
        try:
            old = app.state.agent_credential
            app.state.agent_credential = await bootstrap.mint_apiserver_credential(
                pool, CREDENTIAL_TTL_S
            )
            await bootstrap.retire_apiserver_credential(pool, old)
        except (OSError, asyncpg.PostgresError) as exc:
            log.warning("the API server's agent credential was not renewed: %s", exc)


@contextlib.asynccontextmanager
async def credential_lifespan(app: Litestar) -> AsyncIterator[None]:
    """Mints this server's credential once the store is up, and renews it while it runs."""
    pool: asyncpg.Pool = app.state.objects.store.pool
    app.state.agent_credential = await bootstrap.mint_apiserver_credential(pool, CREDENTIAL_TTL_S)
    app.state.node_authorizer = NodeAuthorizer(app.state.objects.cache)
    app.state.node_authorizer.graph.current()  # built now, not on a node's first request
    chain = getattr(getattr(app.state, "authz", None), "chain", None)
    if chain is not None:
        chain.append(app.state.node_authorizer)
    app.state.objects.guards.append(node_restriction(app.state.objects.cache))
    renew = asyncio.create_task(_renew(app, pool))
    try:
        yield
    finally:
        renew.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await renew
        with contextlib.suppress(OSError, asyncpg.PostgresError, asyncpg.InterfaceError):
            await bootstrap.retire_apiserver_credential(pool, app.state.agent_credential)


HANDLERS: list[HTTPRouteHandler] = [
    create_bootstrap_token,
    list_bootstrap_tokens,
    delete_bootstrap_token,
    create_node_credential,
    create_token_review,
]
