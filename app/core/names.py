"""Object name rules and ``generateName``.

Names end up in URLs, DNS records (Services, Namespaces) and label values written by
controllers, so they follow the Kubernetes DNS-1123 rules: most kinds use the *subdomain*
form (at most 253 characters, lowercase alphanumerics, ``-`` and ``.``), while Namespace and
Service names must be a single DNS *label* (at most 63 characters, no dots).
"""

from __future__ import annotations

import random
import re

DNS1123_LABEL_MAX = 63
DNS1123_SUBDOMAIN_MAX = 253

_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_LABEL_RE = re.compile(_LABEL)
_SUBDOMAIN_RE = re.compile(rf"{_LABEL}(\.{_LABEL})*")

# Kinds whose names become a single DNS label.
LABEL_NAMED_KINDS = frozenset({"Namespace", "Service"})

# Same alphabet as Kubernetes: no vowels (so no words) and no look-alike characters.
NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
RANDOM_LENGTH = 5


def validate_dns1123_label(name: str) -> list[str]:
    """Errors for ``name`` as a DNS-1123 label; empty list when valid."""
    errors: list[str] = []
    if len(name) > DNS1123_LABEL_MAX:
        errors.append(f"must be no more than {DNS1123_LABEL_MAX} characters")
    if not _LABEL_RE.fullmatch(name):
        errors.append(
            "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or "
            "'-', and must start and end with an alphanumeric character (e.g. 'my-name' or "
            "'123-abc')"
        )
    return errors


def validate_dns1123_subdomain(name: str) -> list[str]:
    """Errors for ``name`` as a DNS-1123 subdomain; empty list when valid."""
    errors: list[str] = []
    if len(name) > DNS1123_SUBDOMAIN_MAX:
        errors.append(f"must be no more than {DNS1123_SUBDOMAIN_MAX} characters")
    if not _SUBDOMAIN_RE.fullmatch(name):
        errors.append(
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, "
            "'-' or '.', and must start and end with an alphanumeric character (e.g. "
            "'example.com')"
        )
    return errors


def uses_label_names(kind: str) -> bool:
    return kind in LABEL_NAMED_KINDS


def max_name_length(kind: str) -> int:
    return DNS1123_LABEL_MAX if uses_label_names(kind) else DNS1123_SUBDOMAIN_MAX


def validate_name(kind: str, name: str, *, prefix: bool = False) -> list[str]:
    """Errors for an object name of ``kind``.

    With ``prefix`` the value is a ``generateName`` prefix: a trailing ``-`` or ``.`` is
    allowed because random characters will follow it.
    """
    if prefix and len(name) > 1 and name[-1] in "-.":
        name = name[:-1] + "a"
    if uses_label_names(kind):
        return validate_dns1123_label(name)
    return validate_dns1123_subdomain(name)


def generate_name(
    prefix: str, rand: random.Random, *, max_length: int = DNS1123_SUBDOMAIN_MAX
) -> str:
    """Append five random characters to ``prefix``, truncating the prefix so the result is at
    most ``max_length`` characters (pass ``max_name_length(kind)``)."""
    keep = max(0, max_length - RANDOM_LENGTH)
    suffix = "".join(rand.choice(NAME_ALPHABET) for _ in range(RANDOM_LENGTH))
    return prefix[:keep] + suffix
