"""ConfigMap and Secret payloads.

Both carry a key -> value map that is later projected into files, so keys must be safe file
names; binary values travel base64-encoded and must decode. A Secret's convenience field
``stringData`` is folded into ``data`` here and never stored. Objects marked ``immutable``
keep their payload forever.
"""

from __future__ import annotations

import base64
import binascii
import re

from app.core.admission._util import Errs, Obj, sub
from app.core.errors import Cause
from app.core.patch import json_equal
from app.core.secretbox import REDACTED_ANNOTATION

MAX_PAYLOAD_BYTES = 1024 * 1024
KEY_MAX = 253
_KEY = re.compile(r"[-._a-zA-Z0-9]+")

# Secret types that require particular keys in ``data``.
REQUIRED_SECRET_KEYS = {
    "kubernetes.io/tls": ("tls.crt", "tls.key"),
    "kubernetes.io/dockerconfigjson": (".dockerconfigjson",),
    "kubernetes.io/dockercfg": (".dockercfg",),
    "kubernetes.io/ssh-auth": ("ssh-privatekey",),
}


def config_key_errors(key: str) -> list[str]:
    errors = []
    if len(key) > KEY_MAX:
        errors.append(f"must be no more than {KEY_MAX} characters")
    if not _KEY.fullmatch(key):
        errors.append(
            "a valid config key must consist of alphanumeric characters, '-', '_' or '.' "
            "(e.g. 'key.name', or 'KEY_NAME', or 'key-name')"
        )
    elif key in (".", "..") or key.startswith(".."):
        errors.append("must not be '.' or '..', or start with '..'")
    return errors


def _bytes(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def _decode(value: str) -> bytes | None:
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return None


def _check_keys(e: Errs, m: dict[str, str], field: str) -> bool:
    ok = True
    for key in m:
        problems = config_key_errors(key)
        e.each_error(sub(field, key), key, problems)
        ok = ok and not problems
    return ok


def _check_base64(e: Errs, m: dict[str, str], field: str) -> int:
    """Report values that are not base64; return the decoded size of the valid ones."""
    total = 0
    for key, value in m.items():
        raw = _decode(value)
        if raw is None:
            e.invalid(
                sub(field, key),
                "<value omitted>",
                "must be valid base64 (standard alphabet, padded)",
            )
        else:
            total += _bytes(key) + len(raw)
    return total


def _check_immutable(e: Errs, obj: Obj, old: Obj | None, fields: tuple[str, ...]) -> None:
    immutable = e.get_bool(obj, "immutable", "")
    if old is None or old.get("immutable") is not True:
        return
    if immutable is not True:
        e.forbidden("immutable", "may not be unset once the object is immutable")
    for field in fields:
        if not json_equal(obj.get(field) or {}, old.get(field) or {}):
            e.forbidden(field, "field is immutable when `immutable` is set")


def check_configmap(e: Errs, obj: Obj, old: Obj | None) -> None:
    data = e.get_str_map(obj, "data", "")
    binary = e.get_str_map(obj, "binaryData", "")
    total = 0
    if data is not None:
        _check_keys(e, data, "data")
        total += sum(_bytes(k) + _bytes(v) for k, v in data.items())
    if binary is not None:
        _check_keys(e, binary, "binaryData")
        total += _check_base64(e, binary, "binaryData")
        for key in binary:
            if data is not None and key in data:
                e.invalid(sub("data", key), key, "duplicate of key present in binaryData")
    if total > MAX_PAYLOAD_BYTES:
        e.too_long("data", MAX_PAYLOAD_BYTES)
    _check_immutable(e, obj, old, ("data", "binaryData"))


def _omit_values(e: Errs, since: int) -> None:
    """A Secret's values never appear in an error (they reach clients, Events and logs): the
    causes found since ``since`` keep their path and reason, not the value."""
    for i in range(since, len(e.causes)):
        c = e.causes[i]
        if c.message.startswith("Invalid value: "):
            detail = c.message.rsplit(": ", 1)[-1]
            e.causes[i] = Cause(c.field, c.reason, f"Invalid value: <value omitted>: {detail}")


def check_secret(e: Errs, obj: Obj, old: Obj | None) -> None:
    kind = e.get_str(obj, "type", "", default="Opaque")
    if kind is not None and len(kind) > KEY_MAX:
        e.too_long("type", KEY_MAX)
    if old is not None and isinstance(old.get("type"), str) and kind != old["type"]:
        e.immutable("type")
    seen = len(e)
    data = e.get_str_map(obj, "data", "")
    string_data = e.get_str_map(obj, "stringData", "")
    _omit_values(e, seen)
    meta = obj.get("metadata")
    annotations = meta.get("annotations") if isinstance(meta, dict) else None
    if isinstance(annotations, dict) and REDACTED_ANNOTATION in annotations:
        e.forbidden(
            sub("metadata.annotations", REDACTED_ANNOTATION),
            "a Secret read without permission to get it has its data withheld and cannot be"
            " written back",
        )
    total = 0
    if data is not None:
        _check_keys(e, data, "data")
        total += _check_base64(e, data, "data")
    if (
        string_data is not None
        and _check_keys(e, string_data, "stringData")
        and (data is not None or "data" not in obj)
    ):
        merged = dict(data or {})
        for key, value in string_data.items():
            encoded = value.encode("utf-8", "surrogatepass")
            if key in merged:
                previous = _decode(merged[key])
                total -= _bytes(key) + (len(previous) if previous is not None else 0)
            merged[key] = base64.b64encode(encoded).decode("ascii")
            total += _bytes(key) + len(encoded)
        obj["data"] = merged
        del obj["stringData"]
    if total > MAX_PAYLOAD_BYTES:
        e.too_long("data", MAX_PAYLOAD_BYTES)
    stored = obj.get("data")
    present: dict[str, str] = stored if isinstance(stored, dict) else {}
    for key in REQUIRED_SECRET_KEYS.get(kind or "", ()):
        if key not in present:
            e.required(sub("data", key), f"secrets of type {kind} need this key")
    _check_immutable(e, obj, old, ("data",))
