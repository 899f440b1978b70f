"""The services' virtual IP range as an operator sets it: ``QM_SERVICE_CIDR`` at API start.

The range lives in the database (``service_ip_range``, ADR 0036), where the allocation trigger
reads it; this lets a deployment say it in its configuration instead of in SQL. Every API
server applies the same value at start, so the write is conditional on the value differing,
and a bad value stops the server with a clear message rather than being half applied.
Addresses already held outside a new range stay with their services.
"""

from __future__ import annotations

import ipaddress

import asyncpg

from app.core.audit import system
from app.store.sql import with_context

_APPLY = f"""
UPDATE service_ip_range SET cidr = $1::cidr, updated_at = now()
WHERE id = 1 AND cidr <> $1::cidr AND {with_context("$2")}"""
_CONTEXT = system("system:apiserver", reason="QM_SERVICE_CIDR at API server start").text()


def parse_range(text: str) -> str:
    """The range in canonical form; ``ValueError`` naming the problem."""
    try:
        net = ipaddress.ip_network(text.strip(), strict=True)
    except ValueError as exc:
        raise ValueError(f"QM_SERVICE_CIDR={text!r}: {exc}") from None
    if net.version != 4 or not 8 <= net.prefixlen <= 30:
        raise ValueError(f"QM_SERVICE_CIDR={text!r}: an IPv4 range from /8 to /30 is required")
    return str(net)


async def apply_range(pool: asyncpg.Pool, text: str) -> bool:
    """Make the stored range ``text``; True if it changed."""
    status = await pool.execute(_APPLY, parse_range(text), _CONTEXT)
    return status != "UPDATE 0"
