"""A small cause collector with typed field accessors.

Admission must report *every* problem with its JSON path, and must never crash on a wrong
type. Validators therefore read fields only through these helpers: each checks the type,
records a cause (with the path built here) when it is wrong, applies a default when the field
is absent, and returns ``None`` so the caller can skip dependent checks.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import Any

from app.core.errors import Cause
from app.core.labels import validate_label_key, validate_label_value

Obj = dict[str, Any]

REQUIRED = "FieldValueRequired"
INVALID = "FieldValueInvalid"
NOT_SUPPORTED = "FieldValueNotSupported"
FORBIDDEN = "FieldValueForbidden"
DUPLICATE = "FieldValueDuplicate"
TOO_LONG = "FieldValueTooLong"
TOO_MANY = "FieldValueTooMany"
TYPE_INVALID = "FieldValueTypeInvalid"

INT32_MIN = -(2**31)
INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
MAX_KEY_IN_PATH = 256

_PLAIN_KEY = re.compile(r"[A-Za-z0-9_-]+")


def sub(path: str, key: str) -> str:
    """Child path: ``spec`` + ``replicas`` -> ``spec.replicas``; odd keys use brackets.
    Absurdly long keys (always invalid anyway) are shortened so messages stay readable."""
    if len(key) > MAX_KEY_IN_PATH:
        key = key[: MAX_KEY_IN_PATH - 3] + "..."
    if _PLAIN_KEY.fullmatch(key):
        return f"{path}.{key}" if path else key
    return f"{path}[{key}]"


def idx(path: str, i: int) -> str:
    return f"{path}[{i}]"


def show(value: Any) -> str:
    """Short, quoted rendering of a value for messages (hostile values are truncated)."""
    if isinstance(value, str):
        text = value if len(value) <= 64 else value[:61] + "..."
        return '"' + text.replace('"', '\\"') + '"'
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, int) and value.bit_length() > 64:
        return "a very large integer"
    if isinstance(value, int | float):
        text = repr(value)
        return text if len(text) <= 32 else text[:29] + "..."
    return type_name(value)


def type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


class Errs:
    """Collects causes; the ``get_*`` accessors validate one field of an object each."""

    def __init__(self) -> None:
        self.causes: list[Cause] = []

    def __len__(self) -> int:
        return len(self.causes)

    def add(self, path: str, reason: str, message: str) -> None:
        self.causes.append(Cause(path, reason, message))

    def required(self, path: str, detail: str = "") -> None:
        self.add(path, REQUIRED, "Required value" + (f": {detail}" if detail else ""))

    def invalid(self, path: str, value: Any, detail: str) -> None:
        self.add(path, INVALID, f"Invalid value: {show(value)}: {detail}")

    def unsupported(self, path: str, value: Any, allowed: Iterable[str]) -> None:
        choices = ", ".join(f'"{a}"' for a in allowed)
        self.add(
            path, NOT_SUPPORTED, f"Unsupported value: {show(value)}: supported values: {choices}"
        )

    def forbidden(self, path: str, detail: str) -> None:
        self.add(path, FORBIDDEN, f"Forbidden: {detail}")

    def duplicate(self, path: str, value: Any) -> None:
        self.add(path, DUPLICATE, f"Duplicate value: {show(value)}")

    def too_long(self, path: str, limit: int) -> None:
        self.add(path, TOO_LONG, f"Too long: must have at most {limit} bytes")

    def too_many(self, path: str, limit: int) -> None:
        self.add(path, TOO_MANY, f"Too many: must have at most {limit} items")

    def wrong_type(self, path: str, value: Any, expected: str) -> None:
        self.add(
            path,
            TYPE_INVALID,
            f"Invalid value: {show(value)}: must be {expected}, got {type_name(value)}",
        )

    def immutable(self, path: str) -> None:
        self.add(path, INVALID, "field is immutable")

    def each_error(self, path: str, value: Any, messages: Iterable[str]) -> None:
        for m in messages:
            self.invalid(path, value, m)

    # ------------------------------------------------------------------ typed accessors

    def _absent(self, d: Obj, key: str, path: str, required: bool, default: Any) -> bool:
        # As in Kubernetes' Go types, an empty string means "unset" where a default exists.
        if key in d and d[key] is not None and not (default is not None and d[key] == ""):
            return False
        d.pop(key, None)
        if default is not None:
            d[key] = default
        elif required:
            self.required(sub(path, key))
        return True

    def get_obj(self, d: Obj, key: str, path: str, *, required: bool = False) -> Obj | None:
        if self._absent(d, key, path, required, None):
            return None
        v = d[key]
        if not isinstance(v, dict):
            self.wrong_type(sub(path, key), v, "an object")
            return None
        return v

    def get_list(self, d: Obj, key: str, path: str, *, required: bool = False) -> list[Any] | None:
        if self._absent(d, key, path, required, None):
            return None
        v = d[key]
        if not isinstance(v, list):
            self.wrong_type(sub(path, key), v, "an array")
            return None
        return v

    def get_str(
        self, d: Obj, key: str, path: str, *, required: bool = False, default: str | None = None
    ) -> str | None:
        if self._absent(d, key, path, required, default):
            return d.get(key)
        v = d[key]
        if not isinstance(v, str):
            self.wrong_type(sub(path, key), v, "a string")
            return None
        if required and not v:
            self.required(sub(path, key))
        return v

    def get_bool(self, d: Obj, key: str, path: str, *, default: bool | None = None) -> bool | None:
        if self._absent(d, key, path, False, default):
            return d.get(key)
        v = d[key]
        if not isinstance(v, bool):
            self.wrong_type(sub(path, key), v, "a boolean")
            return None
        return v

    def get_int(
        self,
        d: Obj,
        key: str,
        path: str,
        *,
        required: bool = False,
        default: int | None = None,
        minimum: int | None = INT32_MIN,
        maximum: int | None = INT32_MAX,
    ) -> int | None:
        if self._absent(d, key, path, required, default):
            return d.get(key)
        v = d[key]
        if isinstance(v, float) and v.is_integer() and abs(v) < 2**63:
            v = d[key] = int(v)
        if isinstance(v, bool) or not isinstance(v, int):
            self.wrong_type(sub(path, key), v, "an integer")
            return None
        if minimum is not None and v < minimum:
            self.invalid(sub(path, key), v, f"must be greater than or equal to {minimum}")
            return None
        if maximum is not None and v > maximum:
            self.invalid(sub(path, key), v, f"must be less than or equal to {maximum}")
            return None
        return v

    def get_enum(
        self,
        d: Obj,
        key: str,
        path: str,
        allowed: tuple[str, ...],
        *,
        required: bool = False,
        default: str | None = None,
    ) -> str | None:
        v = self.get_str(d, key, path, required=required, default=default)
        if v is None or (required and not v):
            return None
        if v not in allowed:
            self.unsupported(sub(path, key), v, allowed)
            return None
        return v

    def get_str_list(
        self, d: Obj, key: str, path: str, *, required: bool = False
    ) -> list[str] | None:
        items = self.get_list(d, key, path, required=required)
        if items is None:
            return None
        ok = True
        for i, item in enumerate(items):
            if not isinstance(item, str):
                self.wrong_type(idx(sub(path, key), i), item, "a string")
                ok = False
        return items if ok else None

    def get_str_map(self, d: Obj, key: str, path: str) -> dict[str, str] | None:
        m = self.get_obj(d, key, path)
        if m is None:
            return None
        return m if self.check_str_map(m, sub(path, key)) else None

    def check_str_map(self, m: Obj, path: str) -> bool:
        ok = True
        for k, v in m.items():
            if not isinstance(k, str):
                self.wrong_type(path, k, "an object with string keys")
                ok = False
            elif not isinstance(v, str):
                self.wrong_type(sub(path, k), v, "a string")
                ok = False
        return ok

    def get_label_map(self, d: Obj, key: str, path: str) -> dict[str, str] | None:
        """A label map (``metadata.labels``, ``nodeSelector``...); causes use the map's path."""
        m = self.get_str_map(d, key, path)
        if m is None:
            return None
        p = sub(path, key)
        for k, v in m.items():
            self.each_error(p, k, validate_label_key(k))
            self.each_error(p, v, validate_label_value(v))
        return m

    def objects(self, items: list[Any], path: str) -> Iterator[tuple[str, Obj]]:
        """Yield ``(path, item)`` for the object items of a list, reporting the others."""
        for i, item in enumerate(items):
            p = idx(path, i)
            if isinstance(item, dict):
                yield p, item
            else:
                self.wrong_type(p, item, "an object")

    def exactly_one(self, d: Obj, keys: tuple[str, ...], path: str, what: str) -> str | None:
        present = [k for k in keys if d.get(k) is not None]
        if len(present) == 1:
            return present[0]
        if not present:
            self.required(path, f"must specify one of: {', '.join(keys)} ({what})")
        else:
            self.forbidden(sub(path, present[1]), f"may not specify more than one {what}")
        return None
