"""What every ``qm`` command needs: the client, the namespace flags, the output streams, and
one way of reporting errors.

Commands take a ``Context`` rather than reaching for globals, so tests can hand them a client
on a mock transport and capture what they print.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import TextIO

from app.core.errors import StatusError
from app.core.kinds import Kind, resolve

from .client import ApiClient


class UsageError(Exception):
    """The command line asks for something impossible; exits with code 2."""


@dataclass
class Context:
    client: ApiClient
    namespace: str = "default"
    all_namespaces: bool = False
    out: TextIO = field(default_factory=lambda: sys.stdout)
    err: TextIO = field(default_factory=lambda: sys.stderr)
    stdin: TextIO = field(default_factory=lambda: sys.stdin)

    def list_namespace(self, kind: Kind) -> str | None:
        """The namespace a list of ``kind`` is scoped to; ``None`` means all (or none)."""
        if not kind.namespaced or self.all_namespaces:
            return None
        return self.namespace

    def object_namespace(self, kind: Kind) -> str | None:
        return self.namespace if kind.namespaced else None

    def print(self, text: str = "") -> None:
        print(text, file=self.out, flush=True)

    def error(self, text: str) -> None:
        print(text, file=self.err, flush=True)

    def report(self, exc: StatusError, during: str = "") -> None:
        """Print ``Error from server (Reason): message`` and then one line per field cause."""
        self.error(format_status_error(exc, during))


def format_status_error(exc: StatusError, during: str = "") -> str:
    lines = [f"Error from server ({exc.reason}): {during}{exc.message}"]
    for cause in exc.causes:
        text = cause.message or cause.reason
        lines.append(f"  - {cause.field}: {text}" if cause.field else f"  - {text}")
    return "\n".join(lines)


def resolve_kinds(spec: str) -> list[Kind]:
    """``pods``, ``po``, ``Pod`` or a comma list such as ``pods,nodes``."""
    kinds: list[Kind] = []
    for part in spec.split(","):
        name = part.strip()
        if not name:
            continue
        kind = resolve(name)
        if kind is None:
            raise UsageError(f'the server doesn\'t have a resource type "{name}"')
        if kind not in kinds:
            kinds.append(kind)
    if not kinds:
        raise UsageError("a resource type is required, such as pods or nodes")
    return kinds


def resolve_one_kind(spec: str) -> Kind:
    kinds = resolve_kinds(spec)
    if len(kinds) != 1:
        raise UsageError("this command takes exactly one resource type")
    return kinds[0]
