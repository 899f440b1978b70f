"""Authorisation, pure: who may do what to which object.

A request is described by its :class:`Attributes` (Kubernetes' resource attributes: verb,
API group, resource, subresource, namespace, name); an *authorizer* is any callable
``authorize(user, attrs) -> Decision``. The API server (``app.api.authz``) holds a chain of
them; the first that allows wins. A denial with an empty reason means "no opinion".

Nothing here does I/O: RBAC objects come in as plain dicts (``app.core.authz.rbac.Policy``),
so the evaluation is table-tested without a database.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from app.core.kinds import GROUP

MASTERS = "system:masters"
AUTHENTICATED = "system:authenticated"
RBAC_GROUP = GROUP  # Role, ClusterRole and their bindings live in our own group
AUTHZ_GROUP = f"authorization.{GROUP}"


class Principal(Protocol):
    """Who asks: ``app.store.tokens.User`` (the core cannot import the store)."""

    @property
    def name(self) -> str: ...

    @property
    def groups(self) -> tuple[str, ...]: ...


@dataclass(frozen=True, slots=True)
class Attributes:
    """What a request does, as Kubernetes' authorizers see it."""

    verb: str
    resource: str
    namespace: str = ""
    name: str = ""
    subresource: str = ""
    group: str = GROUP

    @property
    def combined(self) -> str:
        """``pods`` or ``pods/log``: the form RBAC rules name resources in."""
        return f"{self.resource}/{self.subresource}" if self.subresource else self.resource


@dataclass(frozen=True, slots=True)
class Decision:
    allowed: bool
    reason: str = ""


Authorizer = Callable[[Principal, Attributes], Decision]
ALLOW = Decision(True, "")
NO_OPINION = Decision(False, "")


def forbidden_message(user: Principal, attrs: Attributes) -> str:
    """Kubernetes' wording of a refusal, naming the permission that is missing."""
    what = f'{attrs.combined} "{attrs.name}"' if attrs.name else attrs.combined
    where = f'in the namespace "{attrs.namespace}"' if attrs.namespace else "at the cluster scope"
    return (
        f'{what} is forbidden: User "{user.name}" cannot {attrs.verb} resource '
        f'"{attrs.combined}" in API group "{attrs.group}" {where}'
    )


__all__ = [
    "ALLOW",
    "AUTHENTICATED",
    "AUTHZ_GROUP",
    "MASTERS",
    "NO_OPINION",
    "RBAC_GROUP",
    "Attributes",
    "Authorizer",
    "Decision",
    "Principal",
    "forbidden_message",
]
