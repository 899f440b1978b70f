"""The start-up schema check's decision, and the revision chain the code says it knows."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from app.core.schema_compat import CODE_REVISION, KNOWN_REVISIONS, refusal

VERSIONS = Path(__file__).resolve().parents[2] / "migrations" / "versions"
KNOWN = ("0001", "0002", "0003")


@pytest.mark.parametrize(
    ("db_revision", "oldest_code", "refused", "names"),
    [
        ("0003", None, False, ()),  # the code's own revision
        ("0003", "0002", False, ()),
        ("0002", None, True, ("0002", "0003", "alembic upgrade head")),  # older schema
        ("0002", "0001", True, ("0002", "0003")),  # older schema, whatever it serves
        ("0004", "0003", False, ()),  # newer, expanded only: serves this code
        ("0004", "0001", False, ()),
        ("0005", "0005", True, ("0005", "0003", "from revision 0005")),  # contracted
        ("0004", None, True, ("0004", "0003", "does not declare")),
        ("abc123", "zzz", True, ("abc123", "0003")),
        (None, None, True, ("no schema revision", "0003")),
    ],
)
def test_refusal(db_revision, oldest_code, refused, names):
    reason = refusal(db_revision, oldest_code, known=KNOWN)
    assert (reason is not None) is refused
    for name in names:
        assert name in (reason or "")


def _chain() -> list[str]:
    """The revision ids of ``migrations/versions``, oldest first, following down_revision."""
    parents: dict[str | None, str] = {}
    for path in VERSIONS.glob("*.py"):
        text = path.read_text()
        rev = re.search(r'^revision = "([^"]+)"', text, re.M)
        down = re.search(r'^down_revision = (?:"([^"]+)"|None)', text, re.M)
        assert rev and down, path
        parents[down.group(1)] = rev.group(1)
    chain, rev = [], parents.get(None)
    while rev is not None:
        chain.append(rev)
        rev = parents.get(rev)
    return chain


def test_known_revisions_are_the_migrations_chain():
    assert list(KNOWN_REVISIONS) == _chain()
    assert KNOWN_REVISIONS[-1] == CODE_REVISION
