"""Re-encryption of every Secret under the active key, while the API keeps serving (ADR 0048).

Called by the API server that took a ``rotate`` or ``reencrypt`` request (:mod:`app.api.secrets`)
as a background task. It walks the ``secrets`` table in (namespace, name) pages, and for each
row whose envelope names another key (or whose data is still plaintext, from before encryption)
opens it and writes it sealed under the active key with a compare-and-swap on the row version
it read: a client's update that lands in between wins, and since every write seals under the
active key, that row needs nothing more. Passes repeat until one finds nothing to do; the last
pass starts only after every process has had time to notice the new key (twice the keys file's
reload period), so no server still writing under the old key is missed.

The rewrite is a real update of the row (no audit row: the content did not change), so it goes
through the revision stream like any write, and the Secret's ``resourceVersion`` moves.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import asyncpg
import msgspec

from app.core import secretbox
from app.core.audit import system
from app.core.secretbox import SecretKeyError
from app.store import secret_keys
from app.store.sql import with_context

PAGE = 200
_enc = msgspec.json.Encoder()
_STALE = """
SELECT namespace, name, row_version, spec FROM secrets
WHERE (namespace, name) > ($1, $2)
  AND (jsonb_typeof(spec->'data') IS DISTINCT FROM 'string'
       OR split_part(spec->>'data', '.', 2) <> $3)
ORDER BY namespace, name LIMIT $4"""
_SWAP = f"""
UPDATE secrets AS t SET spec = v.spec::jsonb
FROM unnest($1::text[], $2::text[], $3::bigint[], $4::text[]) AS v(namespace, name, expected, spec)
WHERE t.namespace = v.namespace AND t.name = v.name AND t.row_version = v.expected
  AND {with_context("$5")}
RETURNING t.namespace"""
_BY_KEY = """
SELECT CASE WHEN jsonb_typeof(spec->'data') = 'string'
            THEN split_part(spec->>'data', '.', 2) ELSE '' END AS kid, count(*) AS n
FROM secrets GROUP BY 1"""


@dataclass
class Progress:
    """What one re-encryption run did so far."""

    active: str = ""
    running: bool = False
    passes: int = 0
    reencrypted: int = 0
    conflicts: int = 0  # rows a concurrent write changed first (already under the new key)
    failed: list[str] = field(default_factory=list)  # "namespace/name: why"

    def as_dict(self) -> dict[str, Any]:
        return {
            "activeKeyId": self.active,
            "running": self.running,
            "passes": self.passes,
            "reencrypted": self.reencrypted,
            "conflicts": self.conflicts,
            "failed": self.failed,
        }


async def counts_by_key(pool: asyncpg.Pool) -> dict[str, int]:
    """How many Secrets each key id seals (``""``: stored in plaintext, from before)."""
    return {r["kid"]: int(r["n"]) for r in await pool.fetch(_BY_KEY)}


async def _pass(pool: asyncpg.Pool, progress: Progress) -> int:
    """One walk over the table; the number of rows written or lost to a concurrent write."""
    source = secret_keys.source()
    ring = source.ring(force=True)
    progress.active = ring.active
    after, touched = ("", ""), 0
    while True:
        rows = await pool.fetch(_STALE, after[0], after[1], ring.active, PAGE)
        resealed = [r for r in (_reseal(row, ring, progress) for row in rows) if r is not None]
        touched += await swap(pool, resealed, progress)
        if len(rows) < PAGE:
            return touched
        after = (rows[-1]["namespace"], rows[-1]["name"])


Resealed = tuple[str, str, int, str]  # namespace, name, the row version read, the new spec


def _reseal(row: asyncpg.Record, ring: secretbox.Keyring, progress: Progress) -> Resealed | None:
    """The row's spec sealed under the active key; None (and a failure noted) if it does not
    open."""
    ns, name, spec = row["namespace"], row["name"], dict(row["spec"] or {})
    where = f"{ns}/{name}"
    try:
        data = spec.get("data")
        if secretbox.is_envelope(data):
            spec["data"] = secret_keys.source().open(str(data), ns, name)
        spec = secretbox.seal_spec(spec, ring, ns, name)
    except SecretKeyError as exc:
        if not any(f.startswith(where + ":") for f in progress.failed):
            progress.failed.append(f"{where}: {exc}")
        return None
    return ns, name, int(row["row_version"]), _enc.encode(spec).decode()


async def swap(pool: asyncpg.Pool, items: list[Resealed], progress: Progress) -> int:
    """One statement writing each item if its row is still at the version read; the number of
    items (written, or lost to a concurrent write)."""
    if not items:
        return 0
    ctx = system("system:apiserver", reason=f"re-encrypt under the secret key {progress.active}")
    columns = (list(col) for col in zip(*items, strict=True))
    written = len(await pool.fetch(_SWAP, *columns, ctx.defaults(verb="update").text()))
    progress.reencrypted += written
    progress.conflicts += len(items) - written
    return len(items)


async def reencrypt(
    pool: asyncpg.Pool, progress: Progress, settle_s: float = 2 * secret_keys.RELOAD_S
) -> Progress:
    """Passes until one finds nothing to rewrite, the last after ``settle_s`` (see above)."""
    progress.running = True
    try:
        await asyncio.sleep(settle_s)
        while True:
            progress.passes += 1
            if await _pass(pool, progress) == 0:
                return progress
    finally:
        progress.running = False
