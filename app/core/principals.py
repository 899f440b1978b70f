"""Who a request is: principal names and groups, and what a token request may ask for.

Kubernetes' conventions, kept in one place: every authenticated principal is in
``system:authenticated``; a service account ``<name>`` of namespace ``<ns>`` is the user
``system:serviceaccount:<ns>:<name>`` in ``system:serviceaccounts`` and
``system:serviceaccounts:<ns>``. The API (``app.api.tokens``), the store
(``app.store.tokens``) and the CLI call these; pure, no I/O and no clock (``now`` is passed).

The audit trail records a principal as one text, the *actor*: its name, then each group,
separated by U+001F (``qm_actor_name`` / ``qm_actor_groups`` split it in SQL, migration 0009).
Names and groups therefore never hold control characters; :func:`check_request` refuses them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from app.core.errors import Cause, invalid
from app.core.names import validate_dns1123_label

AUTHENTICATED = "system:authenticated"
MASTERS = "system:masters"
SA_PREFIX = "system:serviceaccount:"
SA_GROUP = "system:serviceaccounts"
SEP = "\x1f"

AUTHN_GROUP = "authentication.quaymaster.io"
AUTHN_VERSION = f"{AUTHN_GROUP}/v1"
DEFAULT_TTL_S = 24 * 3600
MIN_TTL_S = 60
MAX_TTL_S = 366 * 24 * 3600
MAX_DESCRIPTION = 1024
MAX_NAME = 253
MAX_GROUPS = 32

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_PART = re.compile(r"(\d{1,9})([smhd])")


def service_account_user(namespace: str, name: str) -> tuple[str, tuple[str, ...]]:
    """The principal name and groups of a service account (``system:authenticated`` is added
    to every principal at authentication)."""
    return f"{SA_PREFIX}{namespace}:{name}", (SA_GROUP, f"{SA_GROUP}:{namespace}")


def service_account_of(user: str) -> tuple[str, str] | None:
    """``(namespace, name)`` when ``user`` names a service account."""
    if not user.startswith(SA_PREFIX):
        return None
    ns, sep, name = user[len(SA_PREFIX) :].partition(":")
    return (ns, name) if sep and ns and name else None


def with_authenticated(groups: tuple[str, ...]) -> tuple[str, ...]:
    return groups if AUTHENTICATED in groups else (*groups, AUTHENTICATED)


def actor(name: str, groups: tuple[str, ...]) -> str:
    """The audit trail's one-text form of a principal (see the module docstring)."""
    return SEP.join((name, *groups))


def parse_duration(text: str) -> int:
    """Seconds in ``90s``, ``15m``, ``12h``, ``30d``, ``1h30m`` or a bare number of seconds;
    ValueError otherwise."""
    value = text.strip()
    if value.isdigit():
        return int(value)
    parts = _PART.findall(value)
    if not parts or "".join(n + u for n, u in parts) != value:
        raise ValueError(f"invalid duration {text!r}: use e.g. 3600s, 90m, 12h or 30d")
    return sum(int(n) * _UNITS[u] for n, u in parts)


@dataclass(frozen=True)
class TokenRequest:
    """A checked request for a new token: for a user (``user``, ``groups``) or a service
    account (``service_account``, whose groups are fixed)."""

    user: str
    groups: tuple[str, ...]
    description: str
    ttl_s: int
    service_account: tuple[str, str] | None = None


def _text(causes: list[Cause], value: Any, path: str, limit: int, required: bool) -> str:
    if value is None or value == "":
        if required:
            causes.append(Cause(path, "FieldValueRequired", "Required value"))
        return ""
    if not isinstance(value, str):
        causes.append(Cause(path, "FieldValueTypeInvalid", "must be a string"))
        return ""
    if len(value) > limit:
        causes.append(Cause(path, "FieldValueTooLong", f"must be at most {limit} characters"))
    elif _CONTROL.search(value):
        causes.append(Cause(path, "FieldValueInvalid", "must not contain control characters"))
    return value


def _groups(causes: list[Cause], value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        causes.append(Cause("spec.groups", "FieldValueTypeInvalid", "must be a list of strings"))
        return ()
    if len(value) > MAX_GROUPS:
        causes.append(Cause("spec.groups", "FieldValueTooMany", f"at most {MAX_GROUPS} groups"))
        return ()
    out: list[str] = []
    for i, g in enumerate(value):
        text = _text(causes, g, f"spec.groups[{i}]", MAX_NAME, True)
        if text and text not in out and text != AUTHENTICATED:
            out.append(text)
    return tuple(out)


def _ttl(causes: list[Cause], value: Any) -> int:
    if value is None:
        return DEFAULT_TTL_S
    if isinstance(value, bool) or not isinstance(value, int):
        causes.append(
            Cause("spec.expirationSeconds", "FieldValueTypeInvalid", "must be an integer")
        )
        return DEFAULT_TTL_S
    if not MIN_TTL_S <= value <= MAX_TTL_S:
        causes.append(
            Cause(
                "spec.expirationSeconds",
                "FieldValueInvalid",
                f"must be between {MIN_TTL_S} and {MAX_TTL_S} seconds, got {value}",
            )
        )
    return value


def _service_account(causes: list[Cause], value: Any) -> tuple[str, str] | None:
    if value is None:
        return None
    path = "spec.serviceAccount"
    if not isinstance(value, dict):
        causes.append(Cause(path, "FieldValueTypeInvalid", "must be an object"))
        return None
    ns = _text(causes, value.get("namespace"), f"{path}.namespace", MAX_NAME, True)
    name = _text(causes, value.get("name"), f"{path}.name", MAX_NAME, True)
    for field, text in (("namespace", ns), ("name", name)):
        problems = validate_dns1123_label(text) if text else []
        causes.extend(Cause(f"{path}.{field}", "FieldValueInvalid", p) for p in problems)
    return (ns, name)


def check_request(body: Any, requester: str) -> TokenRequest:
    """Validate a ``Token`` create body; every problem is a cause of one 422 ``Invalid``.
    ``spec.user`` defaults to the requester, and naming a service account's principal as the
    user means that service account."""
    if not isinstance(body, dict):
        raise invalid("Token", "", [Cause("", "FieldValueTypeInvalid", "must be an object")])
    causes: list[Cause] = []
    for field, expected in (("apiVersion", AUTHN_VERSION), ("kind", "Token")):
        if body.get(field) not in (None, "", expected):
            causes.append(Cause(field, "FieldValueNotSupported", f'supported values: "{expected}"'))
    spec = body.get("spec") if body.get("spec") is not None else {}
    if not isinstance(spec, dict):
        raise invalid("Token", "", [Cause("spec", "FieldValueTypeInvalid", "must be an object")])
    unknown = sorted(set(spec) - {"user", "groups", "description", "expirationSeconds",
                                  "serviceAccount"})  # fmt: skip
    causes.extend(
        Cause(f"spec.{k}"[:300], "FieldValueNotSupported", "unknown field") for k in unknown
    )
    user = _text(causes, spec.get("user"), "spec.user", MAX_NAME, False)
    groups = _groups(causes, spec.get("groups"))
    description = _text(causes, spec.get("description"), "spec.description", MAX_DESCRIPTION, False)
    ttl = _ttl(causes, spec.get("expirationSeconds"))
    sa = _service_account(causes, spec.get("serviceAccount"))
    if sa is None and user and service_account_of(user) is not None:
        sa = service_account_of(user)
    if sa is not None:
        if user and user != service_account_user(*sa)[0]:
            causes.append(
                Cause("spec.user", "FieldValueInvalid", "must be empty for a service account")
            )
        if groups:
            causes.append(
                Cause("spec.groups", "FieldValueForbidden", "a service account's groups are fixed")
            )
        user, groups = service_account_user(*sa)
    elif user.startswith(SA_PREFIX):
        causes.append(Cause("spec.user", "FieldValueInvalid", "not a service account name"))
    if causes:
        raise invalid("Token", "", causes)
    return TokenRequest(user or requester, groups, description, ttl, sa)
