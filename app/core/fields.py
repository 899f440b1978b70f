"""Field selectors (``?fieldSelector=spec.nodeName=n1,status.phase!=Running``).

Unlike label selectors, field selectors may only name the few paths a kind promotes to indexed
columns (see ``Kind.field_columns``), so the caller passes the allowed paths and anything else
is rejected up front with the same message Kubernetes uses. ``metadata.name`` and
``metadata.namespace`` are always allowed.

Values may escape ``,``, ``=``, ``!`` and ``\\`` with a backslash.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

from app.core.errors import BadRequest

ALWAYS_ALLOWED = ("metadata.name", "metadata.namespace")
MAX_SELECTOR_LENGTH = 64 * 1024
EQUALS = "="
NOT_EQUALS = "!="


class FieldRequirement(NamedTuple):
    path: str
    op: str  # "=" (also written "==") or "!="
    value: str

    def matches(self, actual: Any) -> bool:
        text = field_text(actual)
        return text == self.value if self.op == EQUALS else text != self.value


def field_text(value: Any) -> str:
    """How a field value compares in a selector: missing is ``""``, booleans are lowercase."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


@dataclass(frozen=True)
class FieldSelector:
    requirements: tuple[FieldRequirement, ...] = ()

    def __iter__(self) -> Iterator[FieldRequirement]:
        return iter(self.requirements)

    def __len__(self) -> int:
        return len(self.requirements)

    @property
    def empty(self) -> bool:
        return not self.requirements

    def matches(self, getter: Callable[[str], Any]) -> bool:
        """``getter(path)`` returns the object's value at ``path`` (``None`` when absent)."""
        return all(r.matches(getter(r.path)) for r in self.requirements)

    def __str__(self) -> str:
        return ",".join(f"{r.path}{r.op}{escape_value(r.value)}" for r in self.requirements)


def _show(value: str) -> str:
    return repr(value) if len(value) <= 80 else repr(value[:77] + "...")


def escape_value(value: str) -> str:
    out = value.replace("\\", "\\\\")
    for ch in ",=!":
        out = out.replace(ch, "\\" + ch)
    return out


def _split_terms(text: str) -> list[str]:
    terms: list[str] = []
    cur: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text):
            cur.append(text[i : i + 2])
            i += 2
            continue
        if ch == ",":
            terms.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
        i += 1
    terms.append("".join(cur))
    return terms


def _unescape(text: str, whole: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "\\":
            if i + 1 >= len(text) or text[i + 1] not in "\\,=!":
                raise BadRequest(f"invalid field selector {_show(whole)}: invalid escape sequence")
            out.append(text[i + 1])
            i += 2
            continue
        if ch in "=!,":
            raise BadRequest(
                f"invalid field selector {_show(whole)}: unescaped {ch!r} in value "
                "(escape it with '\\')"
            )
        out.append(ch)
        i += 1
    return "".join(out)


def _split_term(term: str, whole: str) -> tuple[str, str, str]:
    for i, ch in enumerate(term):
        if ch == "\\":
            break
        if term.startswith("!=", i):
            return term[:i], NOT_EQUALS, term[i + 2 :]
        if term.startswith("==", i):
            return term[:i], EQUALS, term[i + 2 :]
        if ch == "=":
            return term[:i], EQUALS, term[i + 1 :]
    raise BadRequest(
        f"invalid field selector {_show(whole)}: {_show(term)} is not of the form path=value, "
        "path==value or path!=value"
    )


def parse_field_selector(text: str | None, allowed: Iterable[str]) -> FieldSelector:
    """Parse a field selector, allowing only ``allowed`` paths (plus name and namespace).

    Raises ``BadRequest`` for malformed input and ``"field label not supported: X"`` for a path
    the kind does not index.
    """
    if text is None or text == "":
        return FieldSelector()
    if not isinstance(text, str):
        raise BadRequest(f"field selector must be a string, got {type(text).__name__}")
    if len(text) > MAX_SELECTOR_LENGTH:
        raise BadRequest(f"field selector is too long (at most {MAX_SELECTOR_LENGTH} characters)")
    permitted = set(allowed) | set(ALWAYS_ALLOWED)
    reqs: list[FieldRequirement] = []
    for term in _split_terms(text):
        if not term:
            continue
        path, op, raw = _split_term(term, text)
        if not path:
            raise BadRequest(
                f"invalid field selector {_show(text)}: missing field path in {_show(term)}"
            )
        if path not in permitted:
            raise BadRequest(f"field label not supported: {path}")
        reqs.append(FieldRequirement(path, op, _unescape(raw, text)))
    return FieldSelector(tuple(reqs))


def get_path(obj: Any, path: str) -> Any:
    """Look up a dotted path such as ``spec.nodeName`` in a plain object; ``None`` if absent."""
    cur = obj
    for part in path.split("."):
        if not isinstance(cur, dict):
            return None
        cur = cur.get(part)
    return cur
