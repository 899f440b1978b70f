"""The API server's authorisation: a chain of authorizers, RBAC read from the watch cache.

``app.state.authz`` is one :class:`Authorization`. Its ``chain`` is a plain list of
``authorize(user, attrs) -> Decision`` callables; the first that allows wins (other
authorizers, such as the node authorizer, append themselves to it). RBAC is the first entry:
its :class:`~app.core.authz.rbac.Policy` is rebuilt from the watch cache whenever a Role,
ClusterRole or binding changes (watchers on those four kinds queue the changes; the next check
applies them, in O(the changed object's subjects), so a binding is in force on this server as
soon as its cache shows it; a full rebuild only when the cache reloads).

Handlers call :meth:`Authorization.check`: it returns :data:`ALLOWED`, or :data:`HIDDEN`
when the principal holds no permission at all in the request's namespace (the request is then
answered exactly as if the namespace did not exist, see :class:`ScopedCache`), or raises a
403 that names the missing permission.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any, cast

from app.core import errors
from app.core.authz import Attributes, Decision, forbidden_message
from app.core.authz.builtin import METRICS_GROUP
from app.core.authz.rbac import Policy
from app.core.kinds import BY_KIND, BY_PLURAL, GROUP, Kind
from app.store.tokens import User
from app.stream.cache import Cached, WatchCache, Watcher

RBAC_KINDS = ("Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding")
ALLOWED = "allowed"
HIDDEN = "hidden"


class RBAC:
    """The RBAC authorizer of one API server, current with its watch cache."""

    def __init__(self, cache: WatchCache) -> None:
        self.cache = cache
        self.policy = Policy()
        self.generation = 0
        self._watchers: list[Watcher] = []
        self._delivering = False

    def current(self) -> Policy:
        """The policy, with every RBAC change the cache has shown applied to it."""
        stale = not self._watchers or any(
            w.overflowed or w not in self.cache.watchers for w in self._watchers
        )  # a reloaded cache drops its watchers; an overflowed one stops receiving
        if stale:
            if self._delivering:  # inside the cache's event delivery: its watcher set is
                return self.policy  # being iterated; the next request rebuilds
            self._rewatch()
            self._rebuild()
            return self.policy
        for w in self._watchers:
            while not w.queue.empty():
                item = w.queue.get_nowait()
                if item is None:  # overflowed (w.overflowed): the next call rebuilds
                    return self.current() if not self._delivering else self.policy
                event, c = item
                obj = None if event == "DELETED" else c.obj()
                self.policy.apply(c.kind.kind, c.namespace, c.name, obj)
                self.generation += 1
        return self.policy

    @contextlib.contextmanager
    def delivering(self) -> Iterator[None]:
        """Checks made while the cache offers an event to its watchers (a watch's namespace
        filter) apply queued changes but never re-register watchers."""
        was, self._delivering = self._delivering, True
        try:
            yield
        finally:
            self._delivering = was

    def _rewatch(self) -> None:
        for w in self._watchers:
            self.cache.unwatch(w)
        self._watchers = []
        for name in RBAC_KINDS:
            kind = BY_KIND.get(name)
            if kind is None:
                continue
            w = Watcher(kind, None, None, None)
            self.cache.watchers.add(w)  # only changes from now on: the rebuild reads the rest
            self._watchers.append(w)

    def _rebuild(self) -> None:
        def objs(name: str) -> list[dict[str, Any]]:
            kind = BY_KIND.get(name)
            return [c.obj() for c in self.cache.iter(kind, None)] if kind else []

        self.policy = Policy(
            objs("Role"), objs("ClusterRole"), objs("RoleBinding"), objs("ClusterRoleBinding")
        )
        self.generation += 1

    def authorize(self, user: User, attrs: Attributes) -> Decision:
        return self.current().authorize(user, attrs)


@dataclass
class Authorization:
    """The chain of authorizers (``app.state.authz``)."""

    rbac: RBAC
    chain: list[Any] = field(default_factory=list)  # Authorizer, or has .authorize

    def __post_init__(self) -> None:
        if not self.chain:
            self.chain.append(self.rbac.authorize)

    def authorize(self, user: User, attrs: Attributes) -> Decision:
        """The first allowing decision of the chain, else a denial."""
        for authorizer in self.chain:
            decide = getattr(authorizer, "authorize", authorizer)  # a callable or an object
            decision: Decision = decide(user, attrs)
            if decision.allowed:
                return decision
        return Decision(False, forbidden_message(user, attrs))

    def allowed(self, user: User, attrs: Attributes) -> bool:
        return self.authorize(user, attrs).allowed

    def visible(self, user: User, namespace: str) -> bool:
        return self.rbac.current().visible(user, namespace)

    def check(self, user: User, attrs: Attributes) -> str:
        """:data:`ALLOWED`; :data:`HIDDEN` when ``user`` holds nothing in the namespace
        (namespaced requests only); otherwise raise 403 Forbidden naming the permission."""
        decision = self.authorize(user, attrs)
        if decision.allowed:
            return ALLOWED
        ns = attrs.namespace or (attrs.name if attrs.resource == "namespaces" else "")
        if ns and not self.visible(user, ns):
            return HIDDEN
        raise errors.Forbidden(decision.reason, kind=attrs.resource, name=attrs.name or None)

    def require(self, user: User, attrs: Attributes) -> None:
        """Allowed, or 403 (for requests with no namespace to hide, such as nodes)."""
        decision = self.authorize(user, attrs)
        if not decision.allowed:
            raise errors.Forbidden(decision.reason, kind=attrs.resource, name=attrs.name or None)

    def namespaces(self, user: User, attrs: Attributes) -> list[str] | None:
        """Namespaces where ``attrs`` is allowed (None: cluster-wide)."""
        if self.authorize(user, replace(attrs, namespace="", name="")).allowed:
            return None
        return self.rbac.current().namespaces_allowing(user, attrs)

    def namespace_filter(self, user: User, attrs: Attributes) -> Callable[[str], bool] | None:
        """A predicate on namespaces for long-running watches, current with RBAC changes;
        None when ``attrs`` is allowed cluster-wide."""
        if self.authorize(user, replace(attrs, namespace="", name="")).allowed:
            return None
        memo: dict[str, bool] = {}
        seen = [self.rbac.generation]

        def allowed(ns: str) -> bool:
            with self.rbac.delivering():  # called from the cache's event delivery
                self.rbac.current()
                if seen[0] != self.rbac.generation:
                    memo.clear()
                    seen[0] = self.rbac.generation
                hit = memo.get(ns)
                if hit is None:
                    name = ns if attrs.resource == "namespaces" else attrs.name
                    hit = memo[ns] = self.allowed(user, replace(attrs, namespace=ns, name=name))
                return hit

        return allowed


class ScopedCache:
    """The watch cache as a principal with limited reach sees it: objects in namespaces it
    may not see (and those namespaces themselves) are absent. Handlers run unchanged over it,
    so a hidden namespace takes exactly the path of a missing one."""

    def __init__(self, cache: WatchCache, namespaces: list[str]) -> None:
        self._cache = cache
        self._namespaces = namespaces
        self._allowed = frozenset(namespaces)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cache, name)

    def get(self, kind: Kind, namespace: str, name: str) -> Cached | None:
        if kind.namespaced and namespace not in self._allowed:
            return None
        if kind.kind == "Namespace" and name not in self._allowed:
            return None
        return self._cache.get(kind, namespace, name)

    def iter(
        self, kind: Kind, namespace: str | None, after: tuple[str, str] | None = None
    ) -> Iterator[Cached]:
        if namespace is not None:
            if namespace in self._allowed or not kind.namespaced:
                yield from self._cache.iter(kind, namespace, after)
            return
        if kind.kind == "Namespace":
            for ns in self._namespaces:
                c = self._cache.get(kind, "", ns)
                if c is not None and (after is None or ("", ns) > after):
                    yield c
            return
        if not kind.namespaced:
            yield from self._cache.iter(kind, None, after)
            return
        for ns in self._namespaces:
            if after is not None and ns < after[0]:
                continue
            yield from self._cache.iter(kind, ns, after if after and after[0] == ns else None)


def scoped(cache: WatchCache, namespaces: list[str]) -> WatchCache:
    """:class:`ScopedCache` typed as the cache it stands in for."""
    return cast(WatchCache, ScopedCache(cache, namespaces))


def authorize_request(request: Any, user: User, attrs: Attributes) -> None:
    """Authorise one request to a kind's endpoint, scoping what its handler sees.

    Allowed: nothing changes. A namespace the principal holds nothing in: the handler runs
    over a :class:`ScopedCache` in which that namespace does not exist (same status, body and
    work as a missing namespace). A list or watch across namespaces (and the list of
    namespaces itself) without a cluster-wide grant: the handler sees only the namespaces
    where the principal may list, and a watch's events are filtered the same way as RBAC
    changes (``request.state.namespace_filter``). Otherwise 403 naming the permission.
    """
    objects, namespace_filter = scope(request.app.state, user, attrs)
    if namespace_filter is not None:
        request.state.objects = objects
        request.state.namespace_filter = namespace_filter


def objects_of(request: Any) -> Any:
    """The ``Objects`` a handler authorised by :func:`authorize_request` should use."""
    return getattr(request.state, "objects", None) or request.app.state.objects


def in_reach(request: Any, namespace: str) -> bool:
    """Whether ``namespace`` is one the request's principal may see (for handlers that answer
    from somewhere other than the watch cache, such as the usage store)."""
    allowed = getattr(request.state, "namespace_filter", None)
    return allowed is None or bool(allowed(namespace))


def scope(state: Any, user: User, attrs: Attributes) -> tuple[Any, Callable[[str], bool] | None]:
    """The objects (``app.api.service.Objects``) ``user`` may see for ``attrs``, and the
    namespace predicate for its watch events (None when nothing is narrowed); see
    :func:`authorize_request`."""
    authz: Authorization = state.authz
    kind = BY_PLURAL.get(attrs.resource) if attrs.group in (GROUP, METRICS_GROUP) else None
    across = (
        attrs.verb in ("list", "watch")
        and kind is not None
        and ((kind.namespaced and not attrs.namespace) or kind.kind == "Namespace")
    )
    if across:
        namespaces = authz.namespaces(user, attrs)
        if namespaces is None:
            return state.objects, None
        outcome = HIDDEN
    else:
        outcome = authz.check(user, attrs)
        namespaces = []
    objects = state.objects
    if outcome == ALLOWED:
        return objects, None
    narrowed = dataclasses.replace(objects, cache=scoped(objects.cache, namespaces))
    allowed = authz.namespace_filter(user, attrs)
    return narrowed, allowed or (lambda ns: True)


def escalation_guard(authz: Authorization) -> Callable[[Kind, dict[str, Any], User], None]:
    """The check that a Role, ClusterRole or binding being stored grants nothing its writer
    does not hold (or may ``escalate``/``bind``), as Kubernetes does; 403 otherwise."""

    def guard(kind: Kind, obj: dict[str, Any], user: User) -> None:
        if kind.kind not in RBAC_KINDS:
            return
        missing = authz.rbac.current().escalation(user, kind.kind, obj)
        if not missing:
            return
        name = str((obj.get("metadata") or {}).get("name") or "")
        raise errors.Forbidden(
            f'{kind.plural} "{name}" is forbidden: User "{user.name}" is attempting to grant '
            f"permissions it does not hold: {'; '.join(missing[:20])}",
            kind=kind.plural,
            name=name or None,
        )

    return guard


__all__ = [
    "ALLOWED",
    "HIDDEN",
    "RBAC",
    "Authorization",
    "ScopedCache",
    "authorize_request",
    "escalation_guard",
    "scope",
    "scoped",
]
