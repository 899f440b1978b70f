"""The typed verbs (get, create, replace, patch, delete ...) once, for every transport.

A verb is a request from :mod:`app.client.build` handed to the transport's :meth:`Verbs.call`.
The synchronous client's ``call`` returns the object, the asynchronous one's an awaitable of
it, so ``Verbs`` is generic in what ``call`` returns and the same lines serve both:
``api.get(...)`` in the agent, ``await api.get(...)`` in the hollow nodes.
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar, Unpack

from app.core.kinds import Kind

from . import build

R = TypeVar("R")
Obj = dict[str, Any]


class Verbs(Generic[R]):
    """Typed requests over :meth:`call`, which a transport provides."""

    def call(self, request: build.Request) -> R:
        raise NotImplementedError

    def get(self, kind: Kind, namespace: str | None, name: str, sub: str = "") -> R:
        return self.call(build.get(kind, namespace, name, sub))

    def create(self, kind: Kind, namespace: str | None, body: Obj) -> R:
        return self.call(build.create(kind, namespace, body))

    def replace(self, kind: Kind, namespace: str | None, body: Obj, sub: str = "") -> R:
        """PUT ``body``; conditional on its ``metadata.resourceVersion``."""
        return self.call(build.replace(kind, namespace, body, sub))

    def patch(
        self,
        kind: Kind,
        namespace: str | None,
        name: str,
        body: Any,
        content_type: str = build.MERGE_PATCH,
    ) -> R:
        return self.call(build.patch(kind, namespace, name, body, content_type))

    def delete(
        self, kind: Kind, namespace: str | None, name: str, **options: Unpack[build.DeleteOptions]
    ) -> R:
        """Delete one object; the answer is the success ``Status`` or the now-terminating
        object."""
        return self.call(build.delete(kind, namespace, name, **options))

    def evict(self, namespace: str, name: str, options: Obj | None = None) -> R:
        return self.call(build.evict(namespace, name, options))

    def report_usage(self, node: str, body: Obj) -> R:
        return self.call(build.usage_sample(node, body))

    def version(self) -> R:
        return self.call(build.version())
