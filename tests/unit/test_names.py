from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.core.names import (
    NAME_ALPHABET,
    generate_name,
    max_name_length,
    validate_dns1123_label,
    validate_dns1123_subdomain,
    validate_name,
)


@pytest.mark.parametrize(
    ("name", "label_ok", "subdomain_ok"),
    [
        ("web", True, True),
        ("web-0", True, True),
        ("0web", True, True),
        ("a" * 63, True, True),
        ("a" * 64, False, True),
        ("a" * 253, False, True),
        ("a" * 254, False, False),
        ("web.example", False, True),
        ("Web", False, False),
        ("-web", False, False),
        ("web-", False, False),
        ("web..x", False, False),
        (".web", False, False),
        ("web_x", False, False),
        ("", False, False),
        ("we b", False, False),
        ("wéb", False, False),
        ("web\n", False, False),
    ],
)
def test_name_rules(name: str, label_ok: bool, subdomain_ok: bool) -> None:
    assert (validate_dns1123_label(name) == []) is label_ok
    assert (validate_dns1123_subdomain(name) == []) is subdomain_ok


@pytest.mark.parametrize(
    ("kind", "name", "ok"),
    [
        ("Namespace", "team-a", True),
        ("Namespace", "team.a", False),
        ("Service", "web.x", False),
        ("Pod", "web.x", True),
        ("ConfigMap", "a" * 200, True),
        ("Service", "a" * 64, False),
    ],
)
def test_validate_name_per_kind(kind: str, name: str, ok: bool) -> None:
    assert (validate_name(kind, name) == []) is ok


@pytest.mark.parametrize(
    ("prefix", "ok"), [("web-", True), ("web.", True), ("web", True), ("-", False), ("Web-", False)]
)
def test_generate_name_prefix_rules(prefix: str, ok: bool) -> None:
    assert (validate_name("Pod", prefix, prefix=True) == []) is ok


def test_max_name_length() -> None:
    assert max_name_length("Service") == 63
    assert max_name_length("Namespace") == 63
    assert max_name_length("Pod") == 253


def test_generate_name_is_deterministic_with_a_seed() -> None:
    a = generate_name("web-", random.Random(7))
    b = generate_name("web-", random.Random(7))
    assert a == b
    assert a.startswith("web-") and len(a) == len("web-") + 5
    assert all(c in NAME_ALPHABET for c in a[4:])


@given(st.from_regex(r"[a-z][a-z0-9-]{0,300}", fullmatch=True), st.integers(0, 2**32))
def test_generated_names_fit(prefix: str, seed: int) -> None:
    rand = random.Random(seed)
    for kind in ("Pod", "Service"):
        limit = max_name_length(kind)
        name = generate_name(prefix, rand, max_length=limit)
        assert len(name) <= limit
        assert name[:-5] == prefix[: limit - 5]
        assert validate_name(kind, name) == []
