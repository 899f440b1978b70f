"""Kubernetes resource quantities, parsed exactly.

Requests, limits, quota and node capacity are all written as quantities (``"500m"``,
``"4Gi"``, ``"1e3"``). The scheduler and quota code compare and add them, so they are parsed
into exact :class:`~fractions.Fraction` values (never floats) and converted to integer
millicores or bytes by rounding *up*, the way Kubernetes does.

Grammar (as in ``k8s.io/apimachinery/pkg/api/resource``)::

    quantity  ::= sign? number suffix?
    number    ::= digits | digits "." digits? | "." digits
    suffix    ::= binarySI | decimalSI | ("e" | "E") sign? digits
    binarySI  ::= Ki | Mi | Gi | Ti | Pi | Ei
    decimalSI ::= n | u | m | "" | k | M | G | T | P | E

The database reads the same amounts in its triggers and generated columns with SQL twins of
these functions (``qm_quantity``, ``qm_cpu_milli``, ``qm_bytes``, ``qm_count``: migration 0006),
which follow this grammar rule for rule; change both together.
``tests/integration/test_quantity_grammar.py`` holds them to one corpus.
"""

from __future__ import annotations

import functools
import math
import re
from fractions import Fraction

QuantityLike = str | int | float | Fraction

MAX_LENGTH = 64
# Larger exponents describe amounts no resource will ever have; bounding them keeps parsing
# cheap even for hostile input such as "1e999999999".
MAX_EXPONENT = 30

_BINARY = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}

_RE = re.compile(
    r"(?P<sign>[+-]?)(?P<num>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
    r"(?:(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)|[eE](?P<exp>[+-]?[0-9]+))?"
)


def _multiplier(suffix: str | None, exp: str | None) -> Fraction:
    if exp is not None:
        e = int(exp)
        if abs(e) > MAX_EXPONENT:
            raise ValueError(f"exponent {e} is out of range (at most {MAX_EXPONENT} in magnitude)")
        return Fraction(10) ** e
    if suffix in _BINARY:
        return Fraction(1024 ** _BINARY[suffix])
    return Fraction(10) ** _DECIMAL[suffix or ""]


def parse_quantity(value: QuantityLike, *, allow_negative: bool = False) -> Fraction:
    """Parse a quantity into an exact fraction.

    Accepts the string forms above, plain ints and finite floats (JSON numbers). Raises
    ``ValueError`` with a readable message for anything else; negative amounts are rejected
    unless ``allow_negative`` because no resource amount can be negative.
    """
    if isinstance(value, bool):
        raise ValueError("quantity must be a string or a number, not a boolean")
    if isinstance(value, Fraction):
        result = value
    elif isinstance(value, int):
        result = Fraction(value)
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"quantity must be a finite number, got {value!r}")
        result = Fraction(str(value))
    elif isinstance(value, str):
        result = _parse_string(value)
    else:
        raise ValueError(f"quantity must be a string or a number, got {type(value).__name__}")
    if result < 0 and not allow_negative:
        raise ValueError(f"quantity {_show(value)} must not be negative")
    return result


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


# The same few quantities recur everywhere (every node's "16" and "64Gi", read each tick), and
# a Fraction is immutable; errors are raised again each time (lru_cache keeps only returns).
@functools.lru_cache(maxsize=4096)
def _parse_string(text: str) -> Fraction:
    if not text:
        raise ValueError("quantity must not be empty")
    if len(text) > MAX_LENGTH:
        raise ValueError(f"quantity is too long ({len(text)} characters, at most {MAX_LENGTH})")
    m = _RE.fullmatch(text)
    if m is None:
        raise ValueError(
            f"quantity {_show(text)} does not match the expected format: a number with an "
            "optional suffix (n, u, m, k, M, G, T, P, E, Ki, Mi, Gi, Ti, Pi, Ei) or exponent "
            "(e.g. 500m, 2, 1.5, 4Gi, 1e3)"
        )
    number = Fraction(m.group("num"))
    if m.group("sign") == "-":
        number = -number
    return number * _multiplier(m.group("suffix"), m.group("exp"))


def quantity_error(value: object, *, allow_negative: bool = False) -> str | None:
    """Return why ``value`` is not a valid quantity, or ``None`` when it is."""
    if not isinstance(value, str | int | float | Fraction):
        return f"quantity must be a string or a number, got {type(value).__name__}"
    try:
        parse_quantity(value, allow_negative=allow_negative)
    except ValueError as exc:
        return str(exc)
    return None


def is_valid_quantity(value: object, *, allow_negative: bool = False) -> bool:
    return quantity_error(value, allow_negative=allow_negative) is None


def _ceil(value: Fraction) -> int:
    return -((-value.numerator) // value.denominator)


def cpu_millis(value: QuantityLike) -> int:
    """CPU in millicores, rounded up: ``"500m"`` -> 500, ``"2"`` -> 2000, ``"0.1"`` -> 100."""
    return _ceil(parse_quantity(value, allow_negative=True) * 1000)


def to_bytes(value: QuantityLike) -> int:
    """An amount (memory, storage) in whole units, rounded up: ``"4Gi"`` -> 4294967296."""
    return _ceil(parse_quantity(value, allow_negative=True))


def to_int(value: QuantityLike) -> int:
    """A countable amount (pods, GPUs), rounded up. Same rounding as :func:`to_bytes`."""
    return to_bytes(value)


def format_millis(millis: int) -> str:
    """Canonical text for a CPU amount: whole cores without suffix, otherwise millicores."""
    if millis % 1000 == 0:
        return str(millis // 1000)
    return f"{millis}m"


def format_bytes(amount: int) -> str:
    """Canonical text for a byte amount: the largest binary suffix that divides it exactly."""
    if amount == 0:
        return "0"
    for suffix, power in sorted(_BINARY.items(), key=lambda kv: -kv[1]):
        unit = 1024**power
        if amount % unit == 0:
            return f"{amount // unit}{suffix}"
    return str(amount)


def format_quantity(value: Fraction) -> str:
    """Exact text for any quantity value: an integer, a decimal, or nano-units.

    A value whose plain text would exceed ``MAX_LENGTH`` (such as ``1e64`` given as a number)
    is written with a decimal exponent instead, so the text always parses back to the same
    value; a value too precise even for that is returned as is, and parsing rejects it."""
    text, digits, exp = _exact_text(value)
    if len(text) <= MAX_LENGTH:
        return text
    while digits and digits % 10 == 0:
        digits //= 10
        exp += 1
    compact = f"{digits}e{exp}"
    return compact if len(compact) <= MAX_LENGTH else text


def _exact_text(value: Fraction) -> tuple[str, int, int]:
    """(text, integer digits, power of ten) with value == digits * 10**power."""
    if value.denominator == 1:
        return str(value.numerator), value.numerator, 0
    for suffix, exp in (("m", 3), ("u", 6), ("n", 9)):
        scaled = value * 10**exp
        if scaled.denominator == 1:
            return f"{scaled.numerator}{suffix}", scaled.numerator, -exp
    # Not representable with nano precision: round up to whole nano-units, as Kubernetes does.
    nanos = _ceil(value * 10**9)
    return f"{nanos}n", nanos, -9
