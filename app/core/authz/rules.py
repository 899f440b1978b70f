"""RBAC policy rules and how they match, with Kubernetes' semantics.

A rule grants ``verbs`` on ``resources`` of ``apiGroups``, optionally only for the objects
named in ``resourceNames``. ``*`` matches anything in its field; a resource ``pods`` does not
cover its subresources (``pods/log`` must be named, or ``*``, or ``*/log``). Coverage (used by
the escalation check) asks the stricter question: does one set of rules grant everything
another rule grants, with ``*`` in the asked rule only covered by ``*`` in the holder's.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from app.core.authz import Attributes

ALL = "*"


@dataclass(frozen=True, slots=True)
class Rule:
    verbs: tuple[str, ...]
    api_groups: tuple[str, ...] = ("",)
    resources: tuple[str, ...] = ()
    resource_names: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "verbs": list(self.verbs),
            "apiGroups": list(self.api_groups),
            "resources": list(self.resources),
        }
        if self.resource_names:
            out["resourceNames"] = list(self.resource_names)
        return out


def rule(
    verbs: Iterable[str],
    resources: Iterable[str],
    groups: Iterable[str],
    names: Iterable[str] = (),
) -> Rule:
    return Rule(tuple(verbs), tuple(groups), tuple(resources), tuple(names))


def from_dict(d: Any) -> Rule | None:
    """A stored rule (already admitted) as a :class:`Rule`; None if it is not one."""
    if not isinstance(d, dict):
        return None

    def strs(key: str) -> tuple[str, ...]:
        v = d.get(key) or []
        return tuple(x for x in v if isinstance(x, str)) if isinstance(v, list) else ()

    return Rule(strs("verbs"), strs("apiGroups"), strs("resources"), strs("resourceNames"))


def _resource_matches(r: Rule, attrs: Attributes) -> bool:
    combined = attrs.combined
    for res in r.resources:
        if res in (ALL, combined):
            return True
        if attrs.subresource and res == f"*/{attrs.subresource}":
            return True
    return False


def allows(r: Rule, attrs: Attributes) -> bool:
    """Whether ``r`` grants the request ``attrs`` (Kubernetes' ``RuleAllows``)."""
    if ALL not in r.verbs and attrs.verb not in r.verbs:
        return False
    if ALL not in r.api_groups and attrs.group not in r.api_groups:
        return False
    if not _resource_matches(r, attrs):
        return False
    return not r.resource_names or attrs.name in r.resource_names


def any_allows(rules: Iterable[Rule], attrs: Attributes) -> bool:
    return any(allows(r, attrs) for r in rules)


def _covers_one(held: Rule, verb: str, group: str, resource: str, name: str) -> bool:
    """Whether ``held`` grants the single permission (verb, group, resource, name), where each
    asked value is taken literally (an asked ``*`` is covered only by a held ``*``); an empty
    name means "every object", covered only by a rule without resourceNames."""
    if ALL not in held.verbs and verb not in held.verbs:
        return False
    if ALL not in held.api_groups and group not in held.api_groups:
        return False
    if ALL not in held.resources and resource not in held.resources:
        sub = resource.split("/", 1)[1] if "/" in resource else ""
        if not sub or f"*/{sub}" not in held.resources:
            return False
    if not held.resource_names:
        return True
    return bool(name) and name in held.resource_names


def uncovered(held: Sequence[Rule], asked: Rule) -> list[str]:
    """The single permissions of ``asked`` that no rule in ``held`` grants, for messages."""
    missing = []
    names = asked.resource_names or ("",)
    for verb in asked.verbs:
        for group in asked.api_groups:
            for resource in asked.resources:
                for name in names:
                    if not any(_covers_one(h, verb, group, resource, name) for h in held):
                        shown = f"{resource}[{name}]" if name else resource
                        missing.append(f"{verb} {shown} in group {group!r}")
    return missing
