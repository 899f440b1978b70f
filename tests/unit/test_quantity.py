from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.core.quantity import (
    cpu_millis,
    format_bytes,
    format_millis,
    format_quantity,
    is_valid_quantity,
    parse_quantity,
    quantity_error,
    to_bytes,
    to_int,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0", Fraction(0)),
        ("1", Fraction(1)),
        ("500m", Fraction(1, 2)),
        ("1.5", Fraction(3, 2)),
        ("0.1", Fraction(1, 10)),
        (".5", Fraction(1, 2)),
        ("5.", Fraction(5)),
        ("+3", Fraction(3)),
        ("100k", Fraction(100_000)),
        ("1M", Fraction(10**6)),
        ("1G", Fraction(10**9)),
        ("2T", Fraction(2 * 10**12)),
        ("1P", Fraction(10**15)),
        ("1E", Fraction(10**18)),
        ("250n", Fraction(250, 10**9)),
        ("3u", Fraction(3, 10**6)),
        ("1Ki", Fraction(1024)),
        ("512Mi", Fraction(512 * 2**20)),
        ("4Gi", Fraction(4 * 2**30)),
        ("1Ti", Fraction(2**40)),
        ("1Pi", Fraction(2**50)),
        ("1Ei", Fraction(2**60)),
        ("1e3", Fraction(1000)),
        ("1E3", Fraction(1000)),
        ("12e-3", Fraction(12, 1000)),
        ("1.5e+2", Fraction(150)),
        (7, Fraction(7)),
        (0.25, Fraction(1, 4)),
        (Fraction(3, 4), Fraction(3, 4)),
    ],
)
def test_parse_quantity(text: str | int | float, expected: Fraction) -> None:
    assert parse_quantity(text) == expected


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("abc", "expected format"),
        ("1.2.3", "expected format"),
        ("5Zi", "expected format"),
        ("1 Gi", "expected format"),
        (" 1", "expected format"),
        ("1gi", "expected format"),
        ("1e", "expected format"),
        ("Gi", "expected format"),
        ("", "empty"),
        ("1" * 65, "too long"),
        ("-1", "negative"),
        ("-500m", "negative"),
        (-2, "negative"),
        ("1e999999999", "exponent"),
        (float("nan"), "finite"),
        (float("inf"), "finite"),
        (True, "boolean"),
        (None, "string or a number"),
        ([1], "string or a number"),
        ("٣", "expected format"),
    ],
)
def test_invalid_quantities(text: object, fragment: str) -> None:
    error = quantity_error(text)
    assert error is not None and fragment in error
    assert not is_valid_quantity(text)
    with pytest.raises(ValueError, match=fragment):
        parse_quantity(text)  # type: ignore[arg-type]


def test_negative_allowed_when_asked() -> None:
    assert parse_quantity("-1", allow_negative=True) == -1
    assert quantity_error("-1", allow_negative=True) is None


@pytest.mark.parametrize(
    ("text", "millis"),
    [("500m", 500), ("2", 2000), ("0.1", 100), ("1.5", 1500), ("1", 1000), ("0", 0),
     ("0.0001", 1), ("1500u", 2), ("100n", 1), (3, 3000), ("1e-3", 1), ("1k", 1_000_000)],
)  # fmt: skip
def test_cpu_millis(text: str | int, millis: int) -> None:
    assert cpu_millis(text) == millis


@pytest.mark.parametrize(
    ("text", "amount"),
    [("4Gi", 4 * 2**30), ("512Mi", 512 * 2**20), ("1G", 10**9), ("1e3", 1000),
     ("100k", 100_000), (123, 123), ("123", 123), ("0.5", 1), ("1500m", 2), ("1Ki", 1024)],
)  # fmt: skip
def test_to_bytes(text: str | int, amount: int) -> None:
    assert to_bytes(text) == amount
    assert to_int(text) == amount


@pytest.mark.parametrize(
    ("millis", "text"), [(0, "0"), (500, "500m"), (1000, "1"), (2500, "2500m"), (4000, "4")]
)
def test_format_millis(millis: int, text: str) -> None:
    assert format_millis(millis) == text


@pytest.mark.parametrize(
    ("amount", "text"),
    [(0, "0"), (1024, "1Ki"), (2**30, "1Gi"), (3 * 2**20, "3Mi"), (1000, "1000"), (1536, "1536")],
)
def test_format_bytes(amount: int, text: str) -> None:
    assert format_bytes(amount) == text


@given(st.integers(min_value=0, max_value=10**12))
def test_millis_round_trip(millis: int) -> None:
    assert cpu_millis(format_millis(millis)) == millis


@given(st.integers(min_value=0, max_value=2**62))
def test_bytes_round_trip(amount: int) -> None:
    assert to_bytes(format_bytes(amount)) == amount


@given(st.fractions(min_value=0, max_value=10**9, max_denominator=10**9))
def test_format_quantity_never_loses_capacity(value: Fraction) -> None:
    # Exact when representable with nano precision, otherwise rounded *up*.
    parsed = parse_quantity(format_quantity(value))
    assert parsed >= value
    assert parsed - value < Fraction(1, 10**9)


@given(
    st.integers(min_value=0, max_value=10**6),
    st.sampled_from(["", "m", "k", "M", "G", "Ki", "Mi", "Gi", "Ti"]),
)
def test_suffix_scaling(number: int, suffix: str) -> None:
    exponents = {"": 0, "m": -3, "k": 3, "M": 6, "G": 9}
    powers = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4}
    if suffix in powers:
        scale = Fraction(1024 ** powers[suffix])
    else:
        scale = Fraction(10) ** exponents[suffix]
    assert parse_quantity(f"{number}{suffix}") == number * scale


@given(st.text(max_size=80))
def test_arbitrary_text_never_crashes(text: str) -> None:
    error = quantity_error(text)
    if error is None:
        assert parse_quantity(text) >= 0
