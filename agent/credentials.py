"""The agent's own credential: joining with a bootstrap token, keeping the credential, and
checking who calls the agent's log server.

An agent joins once (ADR 0045): it presents a one-time bootstrap token to ``POST
.../nodecredentials`` and gets a token of its node (user ``system:node:<name>``, group
``system:nodes``), which it writes to ``<state dir>/credential.json`` (mode 0600) and uses for
every later call, across restarts. At start, :func:`credential` reuses the saved one unless
the API refuses it (401: revoked or expired, or its Node was deleted), in which case only a new
bootstrap token lets the agent in again. A token bound to no node does not join under the name
of a node that holds a live credential (403, :class:`JoinError` with the API's advice). An API
server that cannot be reached does not make the agent throw its credential away: it keeps it
and goes on as it would with any outage.

The other way round, the API server calls the agent's log server with a credential of its own.
The agent does not hold a secret to compare it with: :class:`ApiServerReviewer` asks the API
who the token is (a token review, made with the node's credential) and lets in only the API
servers (group ``system:apiservers``) and the cluster's administrators (``system:masters``),
remembering each answer for ten seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path

from agent.api import NODE, AgentApi, Unreachable
from app.client import build
from app.core import errors

log = logging.getLogger(__name__)
FILE = "credential.json"
ALLOWED_GROUPS = ("system:apiservers", "system:masters")
REVIEW_TTL_S = 10.0


class JoinError(Exception):
    """The agent has no usable credential and cannot get one."""


def join(server: str, bootstrap_token: str, node: str, *, ca_file: str | None = None) -> str:
    """Exchange ``bootstrap_token`` for ``node``'s credential."""
    api = AgentApi(server, bootstrap_token, ca_file=ca_file)
    try:
        answer = api.call(build.node_credential(node))
    except errors.Unauthorized as exc:
        raise JoinError(f"the bootstrap token was refused: {exc}") from None
    except errors.Forbidden as exc:  # a token bound to no node, for a node that holds one
        raise JoinError(f"the join as node {node} was refused: {exc}") from None
    finally:
        api.close()
    token = (answer.get("status") or {}).get("token")
    if not isinstance(token, str) or not token:
        raise JoinError("the API answered the join without a token")
    return token


def load(state_dir: Path, server: str, node: str) -> str | None:
    """The saved credential of ``node`` on ``server``; None if there is none."""
    try:
        saved = json.loads((state_dir / FILE).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(saved, dict) or (saved.get("server"), saved.get("node")) != (server, node):
        return None
    token = saved.get("token")
    return token if isinstance(token, str) and token else None


def save(state_dir: Path, server: str, node: str, token: str) -> None:
    """Write the credential readable by this user only, atomically."""
    state_dir.mkdir(parents=True, exist_ok=True)
    tmp = state_dir / f".{FILE}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump({"server": server, "node": node, "token": token}, f)
    os.replace(tmp, state_dir / FILE)


def refused(server: str, token: str, node: str, *, ca_file: str | None = None) -> bool:
    """Whether the API refuses ``token`` (401); an unreachable API refuses nothing."""
    api = AgentApi(server, token, ca_file=ca_file)
    try:
        api.get(NODE, None, node)
    except errors.Unauthorized:
        return True
    except (Unreachable, errors.StatusError):
        return False
    finally:
        api.close()
    return False


def credential(
    server: str,
    node: str,
    state_dir: Path,
    bootstrap_token: str | None,
    *,
    ca_file: str | None = None,
) -> str:
    """The token the agent of ``node`` uses: the saved one while the API accepts it, else a
    new one from ``bootstrap_token``; :class:`JoinError` when neither works."""
    saved = load(state_dir, server, node)
    if saved is not None and not refused(server, saved, node, ca_file=ca_file):
        return saved
    if not bootstrap_token:
        why = "was refused" if saved else "is missing"
        raise JoinError(
            f"the node credential in {state_dir / FILE} {why} and no bootstrap token is "
            "configured (--bootstrap-token, QM_AGENT_BOOTSTRAP_TOKEN)"
        )
    token = join(server, bootstrap_token, node, ca_file=ca_file)
    save(state_dir, server, node, token)
    log.info("node %s joined the cluster; its credential is in %s", node, state_dir / FILE)
    return token


class ApiServerReviewer:
    """Whether a bearer token presented to the log server is an API server's (see module)."""

    def __init__(
        self,
        api: AgentApi,
        ttl: float = REVIEW_TTL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.api, self.ttl, self.clock = api, ttl, clock
        self._seen: dict[str, tuple[float, bool]] = {}
        self._lock = asyncio.Lock()  # one review at a time on the one client

    async def allows(self, token: str) -> bool:
        if not token:
            return False
        key = hashlib.sha256(token.encode()).hexdigest()
        hit = self._seen.get(key)
        if hit is not None and self.clock() < hit[0]:
            return hit[1]
        async with self._lock:
            try:
                answer = await asyncio.to_thread(self.api.call, build.token_review(token))
            except (Unreachable, errors.StatusError) as exc:
                log.warning("token review failed, the caller is refused: %s", exc)
                return False  # not remembered: the next call asks again
        status = answer.get("status") or {}
        groups = (status.get("user") or {}).get("groups") or []
        allowed = bool(status.get("authenticated")) and any(g in ALLOWED_GROUPS for g in groups)
        if len(self._seen) > 1000:
            self._seen.clear()
        self._seen[key] = (self.clock() + self.ttl, allowed)
        return allowed

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.api.close()
