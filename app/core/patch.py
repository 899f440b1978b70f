"""JSON merge patch (RFC 7386) and JSON patch (RFC 6902) on plain JSON values.

``PATCH`` requests are applied here to the stored object before admission sees the result.
Both functions work on deep copies and never modify their arguments, so a failed patch leaves
nothing half-applied. A malformed patch document is a ``BadRequest`` (400); a well-formed
patch that cannot be applied to this object (missing path, failed ``test``) is ``Invalid``
(422) with a cause on the offending path, as in Kubernetes.
"""

from __future__ import annotations

import copy
from typing import Any

from app.core.errors import BadRequest, Cause, Invalid

MAX_OPERATIONS = 10_000
MAX_DEPTH = 100
# Bounds the work a hostile patch can cause (e.g. repeatedly copying the whole document).
MAX_ADDED_NODES = 1_000_000

_OPS = ("add", "remove", "replace", "move", "copy", "test")


def _measure(value: Any) -> tuple[int, int]:
    """(nesting depth, number of nodes) of a JSON value, without recursion."""
    depth, nodes = 0, 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        cur, level = stack.pop()
        nodes += 1
        depth = max(depth, level)
        if level > 2 * MAX_DEPTH:
            break
        if isinstance(cur, dict):
            stack.extend((v, level + 1) for v in cur.values())
        elif isinstance(cur, list):
            stack.extend((v, level + 1) for v in cur)
    return depth, nodes


def _check_depth(value: Any, what: str) -> int:
    depth, nodes = _measure(value)
    if depth > MAX_DEPTH:
        raise BadRequest(f"{what} is nested too deeply (more than {MAX_DEPTH} levels)")
    return nodes


def _copy(value: Any) -> Any:
    return copy.deepcopy(value)


# ---------------------------------------------------------------------------- RFC 7386


def merge_patch(target: Any, patch: Any) -> Any:
    """Apply a JSON merge patch: objects merge recursively, ``null`` deletes, anything else
    replaces. Returns a new value."""
    _check_depth(target, "object")
    _check_depth(patch, "patch")
    return _merge(_copy(target), patch)


def _merge(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return _copy(patch)
    if not isinstance(target, dict):
        target = {}
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        else:
            target[key] = _merge(target.get(key), value)
    return target


def create_merge_patch(original: Any, modified: Any) -> Any:
    """The merge patch that turns ``original`` into ``modified``.

    ``merge_patch(original, create_merge_patch(original, modified)) == modified`` whenever
    ``modified`` contains no ``null`` inside objects (merge patches cannot express those).
    """
    if not isinstance(original, dict) or not isinstance(modified, dict):
        return _copy(modified)
    out: dict[str, Any] = {}
    for key in original:
        if key not in modified:
            out[key] = None
    for key, value in modified.items():
        if key not in original:
            out[key] = _copy(value)
        elif not json_equal(original[key], value):
            out[key] = create_merge_patch(original[key], value)
    return out


def json_equal(a: Any, b: Any) -> bool:
    """Equality with JSON semantics: ``1 == 1.0`` but ``True != 1``."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


# ---------------------------------------------------------------------------- RFC 6901 / 6902


def parse_pointer(pointer: str) -> list[str]:
    """Split a JSON pointer into unescaped reference tokens (``~1`` -> ``/``, ``~0`` -> ``~``)."""
    if not isinstance(pointer, str):
        raise BadRequest(f"JSON pointer must be a string, got {type(pointer).__name__}")
    if pointer == "":
        return []
    if not pointer.startswith("/"):
        raise BadRequest(f"JSON pointer {_show(pointer)} must be empty or start with '/'")
    tokens = []
    for raw in pointer[1:].split("/"):
        stripped = raw.replace("~0", "").replace("~1", "")
        if "~" in stripped:
            raise BadRequest(f"JSON pointer {_show(pointer)} has an invalid '~' escape")
        tokens.append(raw.replace("~1", "/").replace("~0", "~"))
    return tokens


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _fail(path: str, message: str) -> Invalid:
    return Invalid(
        f"the patch could not be applied: {path or '/'}: {message}",
        causes=[Cause(path or "/", "FieldValueInvalid", message)],
    )


def _index(token: str, length: int, path: str, *, allow_end: bool) -> int:
    if token == "-":
        if allow_end:
            return length
        raise _fail(path, "'-' (past the end) cannot be used here")
    if not token.isdigit() or not token.isascii() or (len(token) > 1 and token[0] == "0"):
        raise _fail(path, f"{_show(token)} is not a valid array index")
    index = int(token)
    limit = length if allow_end else length - 1
    if index > limit:
        raise _fail(path, f"array index {index} is out of bounds (length {length})")
    return index


def _resolve(doc: Any, tokens: list[str], path: str) -> Any:
    cur = doc
    for token in tokens:
        if isinstance(cur, dict):
            if token not in cur:
                raise _fail(path, "path does not exist")
            cur = cur[token]
        elif isinstance(cur, list):
            cur = cur[_index(token, len(cur), path, allow_end=False)]
        else:
            raise _fail(path, "path does not exist")
    return cur


def _add(doc: Any, tokens: list[str], value: Any, path: str) -> Any:
    if not tokens:
        return value
    parent = _resolve(doc, tokens[:-1], path)
    last = tokens[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        parent.insert(_index(last, len(parent), path, allow_end=True), value)
    else:
        raise _fail(path, "parent is neither an object nor an array")
    return doc


def _remove(doc: Any, tokens: list[str], path: str) -> tuple[Any, Any]:
    if not tokens:
        raise _fail(path, "cannot remove the whole document")
    parent = _resolve(doc, tokens[:-1], path)
    last = tokens[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise _fail(path, "path does not exist")
        return doc, parent.pop(last)
    if isinstance(parent, list):
        return doc, parent.pop(_index(last, len(parent), path, allow_end=False))
    raise _fail(path, "path does not exist")


def _operation(op: Any, i: int) -> tuple[str, str, list[str], dict[str, Any]]:
    if not isinstance(op, dict):
        raise BadRequest(f"JSON patch operation {i} must be an object")
    name = op.get("op")
    if name not in _OPS:
        raise BadRequest(
            f"JSON patch operation {i} has unsupported op {_show(name)}: use one of "
            + ", ".join(_OPS)
        )
    if "path" not in op:
        raise BadRequest(f"JSON patch operation {i} ({name}) is missing 'path'")
    path = op["path"]
    tokens = parse_pointer(path)
    if name in ("add", "replace", "test") and "value" not in op:
        raise BadRequest(f"JSON patch operation {i} ({name}) is missing 'value'")
    if name in ("move", "copy"):
        if "from" not in op:
            raise BadRequest(f"JSON patch operation {i} ({name}) is missing 'from'")
        parse_pointer(op["from"])
    return name, path, tokens, op


def json_patch(target: Any, ops: Any) -> Any:
    """Apply an RFC 6902 patch (a list of operations) and return the new document."""
    if not isinstance(ops, list):
        raise BadRequest("a JSON patch must be a list of operations")
    if len(ops) > MAX_OPERATIONS:
        raise BadRequest(f"a JSON patch may have at most {MAX_OPERATIONS} operations")
    _check_depth(target, "object")
    _check_depth(ops, "patch")
    parsed = [_operation(op, i) for i, op in enumerate(ops)]
    doc = _copy(target)
    budget = MAX_ADDED_NODES

    def insert(value: Any, tokens: list[str], path: str, *, moved: bool = False) -> Any:
        nonlocal budget
        depth, nodes = _measure(value)
        if len(tokens) + depth > 2 * MAX_DEPTH:
            raise _fail(path, f"the result would be nested more than {2 * MAX_DEPTH} levels")
        if moved:
            return _add(doc, tokens, value, path)
        budget -= nodes
        if budget < 0:
            raise BadRequest("the JSON patch makes the object too large")
        return _add(doc, tokens, _copy(value), path)

    for name, path, tokens, op in parsed:
        if name == "add":
            doc = insert(op["value"], tokens, path)
        elif name == "remove":
            doc, _ = _remove(doc, tokens, path)
        elif name == "replace":
            _resolve(doc, tokens, path)
            if tokens:
                doc, _ = _remove(doc, tokens, path)
            doc = insert(op["value"], tokens, path)
        elif name == "test":
            if not json_equal(_resolve(doc, tokens, path), op["value"]):
                raise _fail(path, "test operation failed: the value differs")
        else:
            from_path = op["from"]
            from_tokens = parse_pointer(from_path)
            value = _resolve(doc, from_tokens, from_path)
            if name == "move":
                if tokens[: len(from_tokens)] == from_tokens and len(tokens) > len(from_tokens):
                    raise _fail(path, "cannot move a value into one of its own children")
                doc, value = _remove(doc, from_tokens, from_path)
                doc = insert(value, tokens, path, moved=True)
            else:
                doc = insert(value, tokens, path)
    return doc
