"""The SQL quantity helpers against ``app.core.quantity``, on one Hypothesis corpus, in the real
PostgreSQL: every string either side accepts, the other accepts with the same value, and every
amount admission lets through is stored as the scheduler and quota code count it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from decimal import Decimal
from fractions import Fraction
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from app.core.admission._util import INT32_MAX, INT32_MIN, INT64_MAX, Errs
from app.core.admission.container import check_quantity_map, resource_name_errors
from app.core.admission.values import normalize_quantity
from app.core.quantity import cpu_millis, parse_quantity, to_bytes, to_int

SETTINGS = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
INT64_MIN = -(2**63)

SUFFIXES = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "n", "u", "m", "k", "M", "G", "T", "P", "E"]
digits = st.text("0123456789", min_size=1, max_size=40)
number = st.one_of(
    digits,
    st.builds(lambda a: a + ".", digits),
    st.builds(lambda a, b: f"{a}.{b}", digits, digits),
    st.builds(lambda b: "." + b, digits),
)
exponent = st.builds(
    lambda e, sign, zeros, n: f"{e}{sign}{'0' * zeros}{n}",
    st.sampled_from("eE"),
    st.sampled_from(["", "+", "-"]),
    st.integers(0, 30),
    st.integers(0, 40),
)
grammar = st.builds(
    lambda sign, num, tail: sign + num + tail,
    st.sampled_from(["", "+", "-"]),
    number,
    st.one_of(st.sampled_from(SUFFIXES), exponent),
)
# Near misses: a grammatical string with one character inserted, removed or replaced, padded,
# doubled, or plain text from the characters quantities are made of.
NEAR = "0123456789.+-eEKMGTPkmunib i_\n\t\u0663\uff11"  # and Arabic-Indic, full-width digits


@st.composite
def mutated(draw: st.DrawFn) -> str:
    text = draw(grammar)
    at = draw(st.integers(0, len(text)))
    ch = draw(st.sampled_from(NEAR))
    how = draw(st.sampled_from(["insert", "delete", "replace", "pad", "twice"]))
    if how == "insert":
        return text[:at] + ch + text[at:]
    if how == "delete":
        return text[:at] + text[at + 1 :]
    if how == "replace":
        return text[:at] + ch + text[at + 1 :]
    if how == "pad":
        return ch + text if at % 2 else text + ch
    return text + text


corpus = st.one_of(grammar, mutated(), st.text(NEAR, max_size=70))


@pytest.fixture(scope="module")
def db(pg_url: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        yield conn


def python(text: Any) -> Fraction | None:
    try:
        return parse_quantity(text, allow_negative=True)
    except ValueError:
        return None


def within(value: int, low: int, high: int) -> int | None:
    return value if low <= value <= high else None


def sql(db: psycopg.Connection[Any], texts: list[str]) -> list[tuple[Any, ...]]:
    return db.execute(
        "SELECT qm_quantity(v), qm_cpu_milli(v), qm_bytes(v), qm_count(v)"
        " FROM unnest(%s::text[]) WITH ORDINALITY AS t(v, i) ORDER BY i",
        (texts,),
    ).fetchall()


def admitted(name: str, text: str | int | float) -> str | None:
    """What admission stores for ``{name: text}`` in a container's requests, or None."""
    amounts = {name: text}
    e = Errs()
    check_quantity_map(e, amounts, "requests", resource_name_errors)
    return None if e.causes else str(amounts[name])


@SETTINGS
@given(st.lists(corpus, min_size=1, max_size=40))
@example(["1.", "8.", ".5", "+1", "-1", "1e3k", "1e030", "1e31", "1E-30", "0" * 65, "1" * 64])
@example(["1e3Ki", "1.5e+2", "-0", "5.e2", "1e", "e3", "1ki", "", "9223372036854775.808"])
def test_sql_reads_every_string_as_python_does(
    db: psycopg.Connection[Any], texts: list[str]
) -> None:
    for text, (value, milli, units, count) in zip(texts, sql(db, texts), strict=True):
        expected = python(text)
        if expected is None:
            assert (value, milli, units, count) == (None, None, None, None), text
            continue
        assert value is not None and Fraction(value) == expected, text
        assert milli == within(cpu_millis(text), INT64_MIN, INT64_MAX), text
        assert units == within(to_bytes(text), INT64_MIN, INT64_MAX), text
        assert count == within(to_int(text), INT32_MIN, INT32_MAX), text


@SETTINGS
@given(st.lists(st.one_of(grammar, mutated()), min_size=1, max_size=40))
def test_every_amount_admission_accepts_is_stored_as_python_counts_it(
    db: psycopg.Connection[Any], texts: list[str]
) -> None:
    cpu = [admitted("cpu", t) for t in texts]
    memory = [admitted("memory", t) for t in texts]
    stored = [t for t in cpu + memory if t is not None]
    rows = iter(sql(db, stored))
    for text in cpu:
        if text is not None:
            assert next(rows)[1] == cpu_millis(text), text
    for text in memory:
        if text is not None:
            assert next(rows)[2] == to_bytes(text), text


finite = st.floats(allow_nan=False, allow_infinity=False)
json_numbers = st.one_of(st.integers(INT64_MIN, INT64_MAX), finite)


@SETTINGS
@given(st.lists(json_numbers, min_size=1, max_size=40))
@example([8, 8.0, 0.1, 1e-7, 1e18, 1.5e300, 5e-324, -1])
def test_json_numbers_are_stored_as_text_both_sides_read_alike(
    db: psycopg.Connection[Any], numbers: list[int | float]
) -> None:
    """Admission turns a JSON number into its quantity text; a writer that bypasses admission
    leaves the number, which the SQL helpers read from its exact decimal text."""
    stored = [admitted("memory", n) for n in numbers]
    texts = [t for t in stored if t is not None]
    for text, row in zip(texts, sql(db, texts), strict=True):
        assert row[2] == to_bytes(text), text
    raw = db.execute(
        "SELECT j->>'v', qm_quantity(j->>'v') FROM unnest(%s::jsonb[]) WITH ORDINALITY AS t(j, i)"
        " ORDER BY i",
        ([json.dumps({"v": n}) for n in numbers],),
    ).fetchall()
    for n, (text, value) in zip(numbers, raw, strict=True):
        if len(text) <= 64:  # longer decimals are past the grammar, for Python text too
            assert value is not None and Fraction(Decimal(value)) == parse_quantity(
                json.loads(json.dumps(n)), allow_negative=True
            ), n


@SETTINGS
@given(
    st.lists(
        st.one_of(st.integers(INT32_MIN, INT32_MAX), st.integers(-(2**40), 2**40)),
        min_size=1,
        max_size=40,
    )
)
@example([INT32_MAX, INT32_MIN, INT32_MAX + 1, INT32_MIN - 1, 2_000_000_000, 999_999_999])
def test_integers_are_read_over_the_range_admission_accepts(
    db: psycopg.Connection[Any], numbers: list[int]
) -> None:
    rows = db.execute(
        "SELECT qm_int(j->>'v') FROM unnest(%s::jsonb[]) WITH ORDINALITY AS t(j, i) ORDER BY i",
        ([json.dumps({"v": n}) for n in numbers],),
    ).fetchall()
    for n, (value,) in zip(numbers, rows, strict=True):
        e = Errs()
        accepted = e.get_int({"v": n}, "v", "spec")  # the default integer field of admission
        assert value == (accepted if not e.causes else None), n


def test_admission_refuses_what_the_database_cannot_store() -> None:
    assert admitted("cpu", "9223372036854775807m") == "9223372036854775807m"
    assert admitted("cpu", "9223372036854775808m") is None
    assert admitted("memory", "8Ei") is None  # 2**63 bytes
    assert admitted("memory", 1e300) is None
    assert normalize_quantity(8.0) == "8"
