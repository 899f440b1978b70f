"""``dryRun=All`` on a write: admitted and answered as if stored, and not stored.

``kubectl diff`` and ``kubectl apply --dry-run=server`` send it on creates, updates, patches
and deletes (ADR 0050); the handlers of ``app.api.routes`` and ``app.api.scale`` read it here
and pass it to ``Objects``, which stops right before the store.
"""

from __future__ import annotations

from typing import Any

from litestar import Request

from app.core import errors


def wants_dry_run(request: Request[Any, Any, Any], options: dict[str, Any] | None = None) -> bool:
    """Whether the request says ``dryRun=All``, in its query or (a delete) in its
    ``DeleteOptions``; any other value is refused, as Kubernetes does."""
    values = list(request.query_params.getall("dryRun", []))
    given = (options or {}).get("dryRun")
    values += given if isinstance(given, list) else [] if given is None else [given]
    if any(v != "All" for v in values):
        raise errors.BadRequest(f"dryRun must be All, got {values!r}")
    return bool(values)
