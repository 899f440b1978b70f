"""Refusals raised by the database, as the error taxonomy's ``StatusError``s: the one place a
trigger's ``RAISE`` becomes an API answer.

A trigger that refuses a write (the Service IP allocator of migration 0007, for one) raises a
dedicated SQLSTATE of class ``QM``, so no other database error can be mistaken for a refusal:

* ``QM422``: the object is invalid. ``COLUMN`` names the field (``spec.clusterIP``),
  ``DETAIL`` the cause's reason (``FieldValueInvalid``), ``MESSAGE`` the cause's message. It
  becomes ``errors.Invalid`` (422) with that cause, worded as admission words its own.
* ``QM503``: the write cannot be served now (no virtual IP is free). It becomes
  ``errors.ServiceUnavailable`` (503, retryable: deletes free room).

The store runs its creates and spec updates inside :func:`refusals`; any other database error
passes through unchanged. The statement that raised was rolled back whole, so nothing of the
refused write remains.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import asyncpg

from app.core import errors
from app.core.kinds import Kind

INVALID = "QM422"
UNAVAILABLE = "QM503"
DEFAULT_REASON = "FieldValueInvalid"


def status_of(exc: BaseException, kind: Kind, name: str | None) -> errors.StatusError | None:
    """The ``StatusError`` a database refusal stands for; None for any other error."""
    if not isinstance(exc, asyncpg.PostgresError):
        return None
    code = getattr(exc, "sqlstate", None)
    message = str(getattr(exc, "message", None) or exc)
    if code == INVALID:
        field = str(getattr(exc, "column_name", None) or "")
        reason = str(getattr(exc, "detail", None) or DEFAULT_REASON)
        return errors.invalid(kind.kind, name, [errors.Cause(field, reason, message)])
    if code == UNAVAILABLE:
        return errors.ServiceUnavailable(message, kind=kind.plural, name=name)
    return None


@contextlib.contextmanager
def refusals(kind: Kind, name: str | None) -> Iterator[None]:
    """Run a write of ``kind`` named ``name`` (None: several) with its refusals mapped."""
    try:
        yield
    except asyncpg.PostgresError as exc:
        mapped = status_of(exc, kind, name)
        if mapped is None:
            raise
        raise mapped from exc
