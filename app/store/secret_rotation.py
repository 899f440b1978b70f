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

from app.core import secretbox
from app.core.secretbox import SecretKeyError
from app.store import secret_keys

PAGE = 200
_STALE = """
SELECT namespace, name, row_version, spec FROM secrets
WHERE (namespace, name) > ($1, $2)
  AND (jsonb_typeof(spec->'data') IS DISTINCT FROM 'string'
       OR split_part(spec->>'data', '.', 2) <> $3)
ORDER BY namespace, name LIMIT $4"""
_SWAP = "UPDATE secrets SET spec = $4 WHERE namespace = $1 AND name = $2 AND row_version = $3"
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
        for row in rows:
            touched += await _one(pool, row, ring, progress)
        if len(rows) < PAGE:
            return touched
        after = (rows[-1]["namespace"], rows[-1]["name"])


async def _one(
    pool: asyncpg.Pool, row: asyncpg.Record, ring: secretbox.Keyring, progress: Progress
) -> int:
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
        return 0
    status = await pool.execute(_SWAP, ns, name, row["row_version"], spec)
    if status.endswith(" 1"):
        progress.reencrypted += 1
    else:
        progress.conflicts += 1
    return 1


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
