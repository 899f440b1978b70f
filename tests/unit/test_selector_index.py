"""The watch cache's selector index gives the same objects, in the same order, as walking the
kind and testing each, through adds, relabels, moves, renames and deletes."""

from __future__ import annotations

import json
import random

import pytest

from app.core.kinds import BY_KIND
from app.stream.cache import Cached, WatchCache
from app.stream.index import terms_of
from app.stream.log import LogEntry

POD = BY_KIND["Pod"]
ALLOWED = list(POD.field_columns)


def entry(rev: int, uid: str, ns: str, name: str, op: str, app: str, node: str) -> LogEntry:
    obj = {"kind": "Pod", "metadata": {"name": name, "namespace": ns, "uid": uid,
           "labels": {"app": app}}, "spec": {"nodeName": node} if node else {},
           "status": {"phase": "Running" if node else "Pending"}}  # fmt: skip
    return LogEntry(rev, POD, uid, ns, name, rev, op, json.dumps(obj))


def scan(cache: WatchCache, ns: str | None, after: tuple[str, str] | None, labels: str | None,
         fields: str | None) -> list[str]:  # fmt: skip
    from app.core.fields import parse_field_selector
    from app.core.labels import parse_selector

    lsel = parse_selector(labels) if labels else None
    fsel = parse_field_selector(fields, ALLOWED) if fields else None
    return [c.uid for c in cache.iter(POD, ns, after)
            if (lsel is None or lsel.matches(c.labels))
            and (fsel is None or fsel.matches(c.fields.get))]  # fmt: skip


def indexed(cache: WatchCache, ns: str | None, after: tuple[str, str] | None,
            labels: str | None, fields: str | None) -> list[str] | None:  # fmt: skip
    keys = cache.candidates(POD, ns, after, terms_of(labels, fields, ALLOWED))
    if keys is None:
        return None
    got = [cache.get(POD, *k) for k in keys]
    return [c.uid for c in got if isinstance(c, Cached)
            and scan_one(c, labels, fields)]  # fmt: skip


def scan_one(c: Cached, labels: str | None, fields: str | None) -> bool:
    from app.core.fields import parse_field_selector
    from app.core.labels import parse_selector

    return (not labels or parse_selector(labels).matches(c.labels)) and (
        not fields or parse_field_selector(fields, ALLOWED).matches(c.fields.get)
    )


def test_terms_take_only_single_value_equalities() -> None:
    assert terms_of("app=a,tier in (x),env in (p,q),!gone", "spec.nodeName=n1", ALLOWED) == [
        ("l", "app", "a"), ("l", "tier", "x"), ("f", "spec.nodeName", "n1")]  # fmt: skip
    assert terms_of(None, "spec.nodeName=,status.phase!=Running", ALLOWED) == []


@pytest.mark.parametrize("seed", range(5))
def test_the_index_agrees_with_a_walk(seed: int) -> None:
    rnd = random.Random(seed)
    cache = WatchCache()
    live: dict[str, tuple[str, str]] = {}
    rev = 0
    for _ in range(600):
        rev += 1
        uid = f"u{rnd.randrange(120)}"
        app, node = f"a{rnd.randrange(6)}", rnd.choice(["", "n1", "n2", "n3"])
        if uid in live and rnd.random() < 0.25:
            ns, name = live.pop(uid)
            cache.apply([entry(rev, uid, ns, name, "D", app, node)])
            continue
        ns, name = live.get(uid) or (f"ns{rnd.randrange(3)}", f"p{uid}")
        if uid in live and rnd.random() < 0.05:
            name = name + "x"  # renamed under it (SQL can)
        cache.apply([entry(rev, uid, ns, name, "M" if uid in live else "A", app, node)])
        live[uid] = (ns, name)
    used = 0
    queries = [("app=a1", None), (None, "spec.nodeName=n2"), ("app=a3", "spec.nodeName=n1"),
               (None, "status.phase=Pending"), (None, "metadata.name=pu7"),
               ("app=a2", "metadata.namespace=ns1")]  # fmt: skip
    for labels, fields in queries:
        for ns in (None, "ns1"):
            for after in (None, ("ns1", "pu5")):
                got = indexed(cache, ns, after, labels, fields)
                if got is not None:
                    used += 1
                    assert got == scan(cache, ns, after, labels, fields)
    assert used > 0


def test_a_term_holding_most_of_the_kind_walks_instead() -> None:
    cache = WatchCache()
    cache.apply([entry(i, f"u{i}", "ns", f"p{i}", "A", "same", "") for i in range(1, 11)])
    assert cache.candidates(POD, None, None, [("l", "app", "same")]) is None
    assert cache.candidates(POD, None, None, [("l", "app", "other")]) == []


def test_a_selectable_field_the_index_does_not_hold_walks_instead_of_finding_nothing() -> None:
    cache = WatchCache()
    cache.apply([entry(i, f"u{i}", "ns", f"p{i}", "A", f"a{i}", "") for i in range(1, 11)])
    assert cache.candidates(POD, None, None, terms_of(None, "metadata.name=p3", ALLOWED)) is None
    narrowed = cache.candidates(POD, None, None, terms_of("app=a3", "metadata.name=p3", ALLOWED))
    assert narrowed == [("ns", "p3")]


def test_with_a_limit_a_dense_term_walks_instead() -> None:
    cache = WatchCache()
    cache.apply([entry(i, f"u{i}", "ns", f"p{i}", "A", f"a{i % 5}", "") for i in range(1, 201)])
    term = [("l", "app", "a3")]  # 40 of 200: a walk for 3 finds them within ~15 objects
    assert cache.candidates(POD, None, None, term, limit=2) is None
    assert len(cache.candidates(POD, None, None, term, limit=50) or []) == 40
    assert len(cache.candidates(POD, None, None, term) or []) == 40
