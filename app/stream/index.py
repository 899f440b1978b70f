"""Which cached objects can match a selector's equality terms, without walking them all.

A list with a selector used to test every object of the kind: at 300,000 pods,
``fieldSelector=spec.nodeName=<node>`` (what a node's page and the agents ask) or
``labelSelector=app=<name>`` across namespaces took most of a second for a few dozen matches.
The watch cache keeps an inverted index here: for each kind, each label ``key=value`` and each
promoted field ``path=value`` (the kind's ``field_columns``) maps to the keys
``(namespace, name)`` of the objects that have it. A list whose selector has equality terms
takes the smallest of their sets, sorts it, and still tests each candidate with the whole
selector; a set larger than a quarter of the kind is not worth sorting, and the list walks the
kind in order as before. A field compared with ``""`` also matches objects without the field,
which the index does not hold, so such a term is never used.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from app.core.fields import EQUALS as FIELD_EQUALS
from app.core.fields import parse_field_selector
from app.core.kinds import BY_KIND
from app.core.labels import EQUALS, IN, parse_selector

if TYPE_CHECKING:
    from app.stream.cache import Cached

Key = tuple[str, str]
Term = tuple[str, str, str]  # ("l" label | "f" field, key or path, value)
WORTH = 4  # use a set only when it holds at most 1/WORTH of the kind's objects


def terms_of(
    label_selector: str | None, field_selector: str | None, allowed: Iterable[str]
) -> list[Term]:
    """The equality terms of two selectors (already validated by the caller's matchers)."""
    terms: list[Term] = []
    if label_selector:
        for r in parse_selector(label_selector).requirements:
            if r.op in (EQUALS, IN) and len(r.values) == 1:
                terms.append(("l", r.key, r.values[0]))
    if field_selector:
        for f in parse_field_selector(field_selector, allowed).requirements:
            if f.op == FIELD_EQUALS and f.value:
                terms.append(("f", f.path, f.value))
    return terms


class SelectorIndex:
    """Term -> keys, per kind; fed by the cache on every put and drop."""

    def __init__(self) -> None:
        self._sets: dict[str, dict[Term, set[Key]]] = {}

    def _terms(self, c: Cached) -> Iterable[Term]:
        for k, v in c.labels.items():
            yield ("l", k, v)
        for path in c.kind.field_columns:
            value = c.fields.get(path)
            if value is not None:
                yield ("f", path, value)

    def add(self, c: Cached) -> None:
        sets = self._sets.setdefault(c.kind.kind, {})
        key = (c.namespace, c.name)
        for t in self._terms(c):
            s = sets.get(t)
            if s is None:
                s = sets[t] = set()
            s.add(key)

    def remove(self, c: Cached) -> None:
        sets = self._sets.get(c.kind.kind)
        if not sets:
            return
        key = (c.namespace, c.name)
        for t in self._terms(c):
            s = sets.get(t)
            if s is not None:
                s.discard(key)
                if not s:
                    del sets[t]

    def clear(self) -> None:
        self._sets.clear()

    def candidates(
        self,
        kind: str,
        total: int,
        terms: list[Term],
        namespace: str | None,
        after: Key | None,
        limit: int | None = None,
    ) -> list[Key] | None:
        """Sorted keys that may match (in ``namespace``, after ``after``), or None when no
        term narrows the kind enough and the caller should walk it in order. With a
        ``limit``, a walk stops after about ``limit * total / len(set)`` objects: when that
        is fewer than the set holds, the walk is the cheaper one."""
        known = BY_KIND.get(kind)
        indexed = known.field_columns if known is not None else {}
        # Only what _terms indexes narrows: a field such as metadata.name is selectable but
        # not indexed, and its missing set must not read as "no object has it".
        terms = [t for t in terms if t[0] == "l" or t[1] in indexed]
        if not terms:
            return None
        sets = self._sets.get(kind, {})
        best = min((sets.get(t, set()) for t in terms), key=len)
        if len(best) * WORTH > total:
            return None
        if limit and best and len(best) * len(best) > (limit + 1) * total:
            return None
        keys = (
            best
            if namespace is None and after is None
            else [
                k
                for k in best
                if (namespace is None or k[0] == namespace) and (after is None or k > after)
            ]
        )
        return sorted(keys)
