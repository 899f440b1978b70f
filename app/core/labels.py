"""Label keys, values and selectors.

Controllers find their pods, Services find their endpoints and ``?labelSelector=`` filters lists
with the same selector semantics as Kubernetes. A selector is parsed once into an immutable
:class:`Selector` (from the string form used in URLs, or from the structured ``LabelSelector``
object stored in specs) and then matched against label maps.

String grammar (comma-separated requirements, whitespace ignored)::

    key=value  key==value  key!=value  key in (v1,v2)  key notin (v1,v2)  key  !key
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from app.core.errors import BadRequest
from app.core.names import validate_dns1123_subdomain

NAME_MAX = 63
PREFIX_MAX = 253
MAX_SELECTOR_LENGTH = 64 * 1024

_NAME_RE = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_NAME_RULE = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
    "alphanumeric character"
)

EQUALS = "="
NOT_EQUALS = "!="
IN = "in"
NOT_IN = "notin"
EXISTS = "exists"
DOES_NOT_EXIST = "!"
OPERATORS = (EQUALS, NOT_EQUALS, IN, NOT_IN, EXISTS, DOES_NOT_EXIST)

# Structured LabelSelector operator names -> string-form operators.
_STRUCTURED_OPS = {"In": IN, "NotIn": NOT_IN, "Exists": EXISTS, "DoesNotExist": DOES_NOT_EXIST}


def _show(value: str) -> str:
    return repr(value) if len(value) <= 80 else repr(value[:77] + "...")


def validate_qualified_name(key: str) -> list[str]:
    """Errors for a qualified name (``[prefix/]name``): label and annotation keys, finalizers."""
    if not isinstance(key, str):
        return [f"must be a string, got {type(key).__name__}"]
    errors: list[str] = []
    parts = key.split("/")
    if len(parts) == 1:
        name = key
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            errors.append("prefix part must be non-empty")
        else:
            errors.extend(f"prefix part {m}" for m in validate_dns1123_subdomain(prefix))
    else:
        return [
            "a qualified name must consist of an optional DNS subdomain prefix "
            "and '/' followed by a name, with at most one '/'"
        ]
    if not name:
        errors.append("name part must be non-empty")
    else:
        if len(name) > NAME_MAX:
            errors.append(f"name part must be no more than {NAME_MAX} characters")
        if not _NAME_RE.fullmatch(name):
            errors.append(f"name part {_NAME_RULE} (e.g. 'MyName' or 'my.name')")
    return errors


def validate_label_key(key: str) -> list[str]:
    """Errors for a label key; an empty list when valid."""
    return validate_qualified_name(key)


def validate_label_value(value: str) -> list[str]:
    """Errors for a label value (may be empty); an empty list when valid."""
    if not isinstance(value, str):
        return [f"must be a string, got {type(value).__name__}"]
    if not value:
        return []
    errors: list[str] = []
    if len(value) > NAME_MAX:
        errors.append(f"must be no more than {NAME_MAX} characters")
    if not _NAME_RE.fullmatch(value):
        errors.append(f"a valid label value must be empty or {_NAME_RULE}")
    return errors


@dataclass(frozen=True, order=True)
class Requirement:
    """One selector term. ``values`` is sorted and deduplicated."""

    key: str
    op: str
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        if self.op == EXISTS:
            return present
        if self.op == DOES_NOT_EXIST:
            return not present
        value = labels.get(self.key)
        if self.op in (EQUALS, IN):
            return present and value in self.values
        return not present or value not in self.values  # != and notin

    def __str__(self) -> str:
        if self.op == EXISTS:
            return self.key
        if self.op == DOES_NOT_EXIST:
            return f"!{self.key}"
        if self.op in (EQUALS, NOT_EQUALS):
            return f"{self.key}{self.op}{self.values[0]}"
        return f"{self.key} {self.op} ({','.join(self.values)})"


def requirement(key: str, op: str, values: Iterable[str] = ()) -> Requirement:
    """Build a validated requirement; raises ``BadRequest`` on an invalid key, value or arity."""
    vals = tuple(sorted(set(values)))
    problems = [f"key {m}" for m in validate_label_key(key)]
    if op not in OPERATORS:
        problems.append(f"unknown operator {_show(op)}")
    elif op in (EQUALS, NOT_EQUALS) and len(vals) != 1:
        problems.append(f"operator {op!r} needs exactly one value")
    elif op in (IN, NOT_IN) and not vals:
        problems.append(f"for 'in' and 'notin' the set of values for {_show(key)} can't be empty")
    elif op in (EXISTS, DOES_NOT_EXIST) and vals:
        problems.append(f"operator {op!r} takes no values")
    for v in vals:
        problems.extend(f"value {m}" for m in validate_label_value(v))
    if problems:
        raise BadRequest(
            f"invalid label selector requirement for {_show(key)}: " + "; ".join(problems)
        )
    return Requirement(key, op, vals)


@dataclass(frozen=True)
class Selector:
    """An immutable label selector: the conjunction of its requirements.

    The empty selector matches everything; :meth:`nothing` matches no labels at all (what a
    missing structured selector means to a controller).
    """

    requirements: tuple[Requirement, ...] = ()
    match_nothing: bool = False

    @classmethod
    def of(cls, requirements: Iterable[Requirement]) -> Selector:
        return cls(tuple(sorted(set(requirements))))

    @classmethod
    def everything(cls) -> Selector:
        return cls()

    @classmethod
    def nothing(cls) -> Selector:
        return cls((), True)

    @property
    def empty(self) -> bool:
        return not self.requirements and not self.match_nothing

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        if self.match_nothing:
            return False
        labels = labels or {}
        return all(r.matches(labels) for r in self.requirements)

    def __str__(self) -> str:
        if self.match_nothing:
            raise ValueError("a selector that matches nothing has no string form")
        return ",".join(str(r) for r in self.requirements)

    def to_label_selector(self) -> dict[str, Any]:
        """The structured ``LabelSelector`` form of this selector."""
        match_labels: dict[str, str] = {}
        exprs: list[dict[str, Any]] = []
        names = {v: k for k, v in _STRUCTURED_OPS.items()}
        for r in self.requirements:
            if r.op == EQUALS and r.key not in match_labels:
                match_labels[r.key] = r.values[0]
            elif r.op in (EQUALS, IN):
                exprs.append({"key": r.key, "operator": "In", "values": list(r.values)})
            elif r.op in (NOT_EQUALS, NOT_IN):
                exprs.append({"key": r.key, "operator": "NotIn", "values": list(r.values)})
            else:
                exprs.append({"key": r.key, "operator": names[r.op]})
        out: dict[str, Any] = {}
        if match_labels:
            out["matchLabels"] = match_labels
        if exprs:
            out["matchExpressions"] = exprs
        return out


# ---------------------------------------------------------------------------- string form

_SPECIAL = "!=(),"


def _tokens(text: str) -> list[str]:
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch.isspace():
            i += 1
        elif text.startswith(("!=", "=="), i):
            out.append(text[i : i + 2])
            i += 2
        elif ch in _SPECIAL:
            out.append(ch)
            i += 1
        else:
            j = i
            while j < n and not text[j].isspace() and text[j] not in _SPECIAL:
                j += 1
            out.append(text[i:j])
            i = j
    return out


def _is_ident(tok: str | None) -> bool:
    return tok is not None and tok not in ("!=", "==") and tok not in _SPECIAL


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.toks = _tokens(text)
        self.pos = 0

    def peek(self) -> str | None:
        return self.toks[self.pos] if self.pos < len(self.toks) else None

    def take(self) -> str | None:
        tok = self.peek()
        self.pos += 1
        return tok

    def fail(self, what: str) -> BadRequest:
        return BadRequest(f"unable to parse label selector {_show(self.text)}: {what}")

    def parse(self) -> Selector:
        reqs: list[Requirement] = []
        if self.peek() is None:
            return Selector()
        while True:
            reqs.append(self.requirement())
            tok = self.take()
            if tok is None:
                return Selector.of(reqs)
            if tok != ",":
                raise self.fail(f"expected ',' or end of selector, found {tok!r}")
            if self.peek() is None:
                raise self.fail("expected a requirement after ','")

    def requirement(self) -> Requirement:
        tok = self.take()
        if tok == "!":
            key = self.take()
            if not _is_ident(key):
                raise self.fail(f"expected a label key after '!', found {key!r}")
            assert key is not None
            return self.build(key, DOES_NOT_EXIST, ())
        if not _is_ident(tok):
            raise self.fail(f"expected a label key, found {tok!r}")
        assert tok is not None
        key = tok
        op = self.peek()
        if op is None or op == ",":
            return self.build(key, EXISTS, ())
        self.pos += 1
        if op in ("=", "==", "!="):
            value = ""
            if _is_ident(self.peek()):
                value = self.take() or ""
            elif self.peek() not in (None, ","):
                raise self.fail(f"expected a value after {op!r}, found {self.peek()!r}")
            return self.build(key, NOT_EQUALS if op == "!=" else EQUALS, (value,))
        if op in (IN, NOT_IN):
            return self.build(key, op, self.value_set())
        raise self.fail(
            f"expected one of '=', '==', '!=', 'in', 'notin' after {key!r}, found {op!r}"
        )

    def value_set(self) -> tuple[str, ...]:
        if self.take() != "(":
            raise self.fail("expected '(' to open the set of values")
        values: list[str] = []
        expect_value = True
        while True:
            tok = self.take()
            if tok is None:
                raise self.fail("unterminated set of values: expected ')'")
            if tok == ")":
                if expect_value:  # "()" is the set {""}, "(a,)" is {"a", ""}
                    values.append("")
                return tuple(values)
            if tok == ",":
                if expect_value:
                    values.append("")
                expect_value = True
            elif _is_ident(tok) and expect_value:
                values.append(tok)
                expect_value = False
            else:
                raise self.fail(f"unexpected {tok!r} in the set of values")

    def build(self, key: str, op: str, values: tuple[str, ...]) -> Requirement:
        try:
            return requirement(key, op, values)
        except BadRequest as exc:
            raise self.fail(exc.message) from None


def parse_selector(text: str | None) -> Selector:
    """Parse the string form; ``None`` or ``""`` is the selector that matches everything.

    Raises ``BadRequest`` with a message naming the problem for any malformed selector.
    """
    if text is None:
        return Selector()
    if not isinstance(text, str):
        raise BadRequest(f"label selector must be a string, got {type(text).__name__}")
    if len(text) > MAX_SELECTOR_LENGTH:
        raise BadRequest(f"label selector is too long (at most {MAX_SELECTOR_LENGTH} characters)")
    return _Parser(text).parse()


# ---------------------------------------------------------------------------- structured form


def from_label_selector(obj: Mapping[str, Any] | None) -> Selector:
    """Build a selector from a structured ``LabelSelector`` (``matchLabels`` and
    ``matchExpressions``). ``None`` matches nothing; ``{}`` matches everything.

    Raises ``BadRequest`` if the object is malformed (admission rejects such objects earlier).
    """
    if obj is None:
        return Selector.nothing()
    if not isinstance(obj, Mapping):
        raise BadRequest(f"label selector must be an object, got {type(obj).__name__}")
    reqs: list[Requirement] = []
    match_labels = obj.get("matchLabels") or {}
    if not isinstance(match_labels, Mapping):
        raise BadRequest("label selector matchLabels must be an object")
    for k, v in match_labels.items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise BadRequest("label selector matchLabels must map strings to strings")
        reqs.append(requirement(k, EQUALS, (v,)))
    exprs = obj.get("matchExpressions") or []
    if not isinstance(exprs, list):
        raise BadRequest("label selector matchExpressions must be a list")
    for expr in exprs:
        if not isinstance(expr, Mapping):
            raise BadRequest("label selector matchExpressions items must be objects")
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
        if not isinstance(key, str):
            raise BadRequest("label selector requirement key must be a string")
        if op not in _STRUCTURED_OPS:
            raise BadRequest(
                f"label selector operator {op!r} is not supported: use In, NotIn, Exists or "
                "DoesNotExist"
            )
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            raise BadRequest("label selector requirement values must be a list of strings")
        reqs.append(requirement(key, _STRUCTURED_OPS[op], values))
    return Selector.of(reqs)


def selector_from_labels(labels: Mapping[str, str]) -> Selector:
    """The selector requiring exactly these ``key=value`` pairs (e.g. a Service selector)."""
    return Selector.of(requirement(k, EQUALS, (v,)) for k, v in labels.items())


def matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str] | None) -> bool:
    """Convenience: does the structured ``selector`` match ``labels``?"""
    return from_label_selector(selector).matches(labels)
