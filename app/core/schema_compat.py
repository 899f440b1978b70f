"""Whether this code may run on the database's schema revision: a pure decision.

Every component asks at start (``app.store.schema_revision`` reads the two facts from the
database and calls :func:`refusal`). The code knows the chain of schema revisions it was built
with (:data:`KNOWN_REVISIONS`, checked against ``migrations/versions`` by a unit test); the
database says which revision it is at and, in ``qm_schema_compat`` (migration 0016), the oldest
code revision each schema revision still serves. An expand-only migration keeps serving the
previous release, so during a rolling upgrade the old code keeps running on the new schema;
one that contracts names its own revision, and older code then refuses.
"""

from __future__ import annotations

# Every schema revision this code's migrations define, oldest first; the last is the one the
# code is built for. A new migration appends its id here (a unit test compares the two).
KNOWN_REVISIONS: tuple[str, ...] = tuple(f"{n:04d}" for n in range(1, 21))
CODE_REVISION = KNOWN_REVISIONS[-1]

RUNBOOK = "docs/upgrades.md"


def refusal(
    db_revision: str | None,
    oldest_code: str | None,
    *,
    known: tuple[str, ...] = KNOWN_REVISIONS,
) -> str | None:
    """Why this code must not run on a schema at ``db_revision`` (``None``: it may run).

    ``oldest_code`` is what ``qm_schema_compat`` says of ``db_revision`` (``None``: no row).
    """
    code = known[-1]
    if db_revision is None:
        return (
            f"the database has no schema revision (no alembic_version row); this code needs "
            f"schema revision {code}: run `alembic upgrade head` first ({RUNBOOK})"
        )
    if db_revision == code:
        return None
    if db_revision in known:
        return (
            f"the database schema is at revision {db_revision}, older than revision {code} "
            f"this code is built for: run `alembic upgrade head` before starting it ({RUNBOOK})"
        )
    if oldest_code is not None and oldest_code in known:
        return None  # a newer schema that still serves this code (it only expanded)
    serves = (
        f"it serves code from revision {oldest_code} on"
        if oldest_code
        else "it does not declare which code revisions it serves"
    )
    return (
        f"the database schema is at revision {db_revision}, which this code (built for "
        f"schema revision {code}) does not know, and {serves}: run a release that knows "
        f"schema revision {db_revision} ({RUNBOOK})"
    )
