"""Checks for common value shapes: int-or-name ports, int-or-percent counts, timestamps and
single quantities. Each reads one field through an :class:`Errs` and records causes there."""

from __future__ import annotations

import re
from datetime import datetime

from app.core.admission._util import Errs, Obj, sub
from app.core.quantity import format_quantity, parse_quantity

_SVC_NAME = re.compile(r"[-a-z0-9]+")
_PERCENT = re.compile(r"[0-9]{1,10}%")
_RFC3339 = re.compile(
    r"(\d{4}-\d{2}-\d{2})[Tt](\d{2}:\d{2}:\d{2})(\.\d{1,9})?([Zz]|[+-]\d{2}:\d{2})"
)


def is_svc_name(value: str) -> list[str]:
    """IANA service name rules, used for named container and probe ports."""
    errors = []
    if len(value) > 15:
        errors.append("must be no more than 15 characters")
    if not _SVC_NAME.fullmatch(value):
        errors.append("must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)")
    elif "--" in value:
        errors.append("must not contain consecutive hyphens")
    elif not any("a" <= c <= "z" for c in value):
        errors.append("must contain at least one letter (a-z)")
    elif value[0] == "-" or value[-1] == "-":
        errors.append("must not begin or end with a hyphen")
    return errors


def check_port(e: Errs, d: Obj, key: str, path: str, *, required: bool = False) -> None:
    """An int-or-name port: 1..65535 or an IANA service name."""
    if key not in d or d[key] is None:
        d.pop(key, None)
        if required:
            e.required(sub(path, key))
        return
    v = d[key]
    if isinstance(v, str):
        e.each_error(sub(path, key), v, is_svc_name(v))
    else:
        e.get_int(d, key, path, minimum=1, maximum=65535)


def check_int_or_percent(
    e: Errs,
    d: Obj,
    key: str,
    path: str,
    *,
    default: str | int | None = None,
    max_percent: bool = False,
) -> int | str | None:
    """An ``IntOrString`` count: a non-negative int or a percentage such as ``"25%"``."""
    if key not in d or d[key] is None:
        d.pop(key, None)
        if default is not None:
            d[key] = default
        return default
    v = d[key]
    p = sub(path, key)
    if isinstance(v, str):
        if not _PERCENT.fullmatch(v):
            e.invalid(p, v, 'a percentage must be an integer followed by "%" (e.g. "25%")')
            return None
        if max_percent and int(v[:-1]) > 100:
            e.invalid(p, v, "must not be greater than 100%")
            return None
        return v
    return e.get_int(d, key, path, minimum=0)


def is_zero(value: int | str | None) -> bool:
    return value == 0 or (isinstance(value, str) and value.endswith("%") and int(value[:-1]) == 0)


def is_rfc3339(value: str) -> bool:
    m = _RFC3339.fullmatch(value)
    if m is None:
        return False
    try:
        datetime.fromisoformat(f"{m.group(1)}T{m.group(2)}")
    except ValueError:
        return False
    return True


def check_time(e: Errs, d: Obj, key: str, path: str) -> None:
    v = e.get_str(d, key, path)
    if v and not is_rfc3339(v):
        e.invalid(sub(path, key), v, "must be an RFC 3339 timestamp (e.g. 2024-01-02T15:04:05Z)")


def check_object(e: Errs, d: Obj, key: str, path: str) -> None:
    """A field whose content is not validated, but which must at least be an object."""
    e.get_obj(d, key, path)


def normalize_quantity(value: str | int | float) -> str:
    """Quantities are stored as strings; numbers become their exact quantity text.

    Raises ``ValueError`` for a number whose text would not parse back (too many digits)."""
    if isinstance(value, str):
        return value
    text = format_quantity(parse_quantity(value, allow_negative=True))
    parse_quantity(text, allow_negative=True)
    return text


def check_quantity(e: Errs, d: Obj, key: str, path: str, *, required: bool = False) -> None:
    """A single non-negative quantity field, normalised to its string form."""
    if key not in d or d[key] is None:
        d.pop(key, None)
        if required:
            e.required(sub(path, key))
        return
    raw = d[key]
    p = sub(path, key)
    if isinstance(raw, bool) or not isinstance(raw, str | int | float):
        e.wrong_type(p, raw, 'a quantity (a string such as "500m" or "1Gi", or a number)')
        return
    try:
        parse_quantity(raw)
        d[key] = normalize_quantity(raw)
    except ValueError as exc:
        e.invalid(p, raw, str(exc))
