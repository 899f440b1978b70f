"""Leader election on a Lease object stored in PostgreSQL, for every singleton loop (the
scheduler, the controller manager's loops).

A Lease such as ``quaymaster-system/quaymaster-scheduler`` follows Kubernetes' coordination.k8s.io
Lease: ``holderIdentity``, ``leaseDurationSeconds``, ``acquireTime``, ``renewTime`` (RFC 3339
with microseconds and ``Z``) and ``leaseTransitions``. Every candidate runs ``LeaderLease.run``;
the holder renews the lease every ``renew_every`` seconds, and a standby tries to take it at the
same period.

Two clocks keep this safe:

* Whether a lease has expired is decided by the database clock alone (``renewTime`` is written
  from ``now()`` and compared with ``now()``), so clock skew between machines cannot matter.
* Whether this process may act as leader is decided by its own monotonic clock: it leads only
  until the start of its last successful renewal + ``duration`` - ``renew_every``. The renewal
  started no later than the database stamped ``renewTime``, so a leader cut off from the
  database stops acting at least ``renew_every`` seconds before any standby can take over.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
import uuid
from collections.abc import Callable

import asyncpg

from app.core import errors
from app.core.audit import system
from app.core.kinds import BY_KIND
from app.store.sql import with_context
from app.store.store import Store

log = logging.getLogger(__name__)

LEASE_NAMESPACE = "quaymaster-system"

_NOW = """to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')"""
_RFC3339 = r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?(Z|[+-]\d\d:\d\d)$"
# The lease's end by the database clock; a renewTime that is missing or unreadable counts as
# long past, so a hand-damaged lease cannot block election for ever.
_EXPIRED = f"""
  coalesce(
    CASE WHEN l.spec->>'renewTime' ~ '{_RFC3339}' THEN (l.spec->>'renewTime')::timestamptz END
      + make_interval(secs => coalesce(qm_int(l.spec->>'leaseDurationSeconds'), 0)),
    '-infinity'::timestamptz
  ) < now()"""

# One statement: create the lease held by me, or else take it if I hold it already, nobody
# does, or it has expired. A change of holder records acquireTime and bumps leaseTransitions.
# Concurrent candidates serialise on the row lock, and each re-checks the WHERE clause against
# the row the previous one committed, so at most one of them gets a row back.
_ACQUIRE = f"""
INSERT INTO leases AS l (uid, namespace, name, spec)
SELECT $1, $2, $3, jsonb_build_object(
  'holderIdentity', $4::text,
  'leaseDurationSeconds', $5::integer,
  'acquireTime', {_NOW},
  'renewTime', {_NOW},
  'leaseTransitions', 0)
WHERE {with_context("$6")}
ON CONFLICT (namespace, name) DO UPDATE SET spec = l.spec || jsonb_build_object(
  'holderIdentity', $4::text,
  'leaseDurationSeconds', $5::integer,
  'renewTime', {_NOW},
  'acquireTime', CASE WHEN l.spec->>'holderIdentity' IS NOT DISTINCT FROM $4::text
                      THEN coalesce(l.spec->'acquireTime', to_jsonb({_NOW}))
                      ELSE to_jsonb({_NOW}) END,
  'leaseTransitions', CASE WHEN l.spec->>'holderIdentity' IS NOT DISTINCT FROM $4::text
                           THEN coalesce(qm_int(l.spec->>'leaseTransitions'), 0)
                           ELSE coalesce(qm_int(l.spec->>'leaseTransitions'), 0) + 1 END)
WHERE l.spec->>'holderIdentity' = $4::text
   OR coalesce(l.spec->>'holderIdentity', '') = ''
   OR {_EXPIRED}
RETURNING l.row_version"""

# Giving the lease up: no holder, and a renewTime already past the lease's duration.
_RELEASE = f"""
UPDATE leases AS l SET spec = l.spec || jsonb_build_object(
  'holderIdentity', '',
  'renewTime', to_char(
    (now() - make_interval(secs => coalesce(qm_int(l.spec->>'leaseDurationSeconds'), 0) + 1))
      AT TIME ZONE 'UTC',
    'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'))
WHERE l.namespace = $1 AND l.name = $2 AND l.spec->>'holderIdentity' = $3::text
  AND {with_context("$4")}
RETURNING l.row_version"""


class LeaderLease:
    """One candidate for leadership.

    ``pool`` is a request pool from ``app.store.db.create_pool``. ``duration`` is written to the
    lease rounded up to whole seconds (``leaseDurationSeconds`` is an integer), so standbys
    never wait less than this process assumes. It must exceed twice ``renew_every``: the local
    leadership window (``duration`` - ``renew_every``) has to outlast the gap between renewals.
    """

    def __init__(
        self,
        pool: asyncpg.Pool,
        identity: str,
        name: str,
        namespace: str = LEASE_NAMESPACE,
        duration: float = 8.0,
        renew_every: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not identity:
            raise ValueError("a leader candidate needs a non-empty identity")
        if renew_every <= 0 or duration <= 2 * renew_every:
            raise ValueError("need 0 < renew_every and duration > 2 * renew_every")
        self.pool = pool
        self.identity = identity
        self.name = name
        self.namespace = namespace
        self.duration = duration
        self.renew_every = renew_every
        self._clock = clock
        self._lease_seconds = max(1, math.ceil(duration))
        self._valid_until = -math.inf
        self._namespace_ready = False
        # Renewals by the holder are summarised in the history; what is recorded, a new
        # holder taking the lease or giving it up, names the candidate.
        self._ctx = system(
            "system:leader-election", reason=f"{identity} holds the lease {namespace}/{name}"
        )

    # -- one attempt -------------------------------------------------------------------------
    async def try_acquire_or_renew(self) -> bool:
        """Create, renew or take over the lease in one statement; whether I now hold it."""
        started = self._clock()
        if not self._namespace_ready:
            await self._ensure_namespace()
        row_version = await self.pool.fetchval(
            _ACQUIRE,
            uuid.uuid4(),
            self.namespace,
            self.name,
            self.identity,
            self._lease_seconds,
            self._ctx.text(),
        )
        if row_version is None:
            self._valid_until = -math.inf
            return False
        self._valid_until = started + self.duration - self.renew_every
        return True

    def is_leader(self) -> bool:
        """True only while the last successful renewal is recent enough by the local clock."""
        return self._clock() < self._valid_until

    async def release(self) -> bool:
        """Give the lease up at once (clean shutdown), so a standby takes over on its next try.
        Stops leading locally first; returns whether the lease was still mine to give up."""
        self._valid_until = -math.inf
        ctx = self._ctx.using(reason=f"{self.identity} gives up leadership")
        row_version = await self.pool.fetchval(
            _RELEASE, self.namespace, self.name, self.identity, ctx.text()
        )
        return row_version is not None

    async def _ensure_namespace(self) -> None:
        with contextlib.suppress(errors.AlreadyExists):
            await Store(self.pool).create(
                BY_KIND["Namespace"],
                {"metadata": {"name": self.namespace}, "status": {"phase": "Active"}},
                self._ctx.using(reason="the namespace of leader election leases"),
            )
        self._namespace_ready = True

    # -- the loop ----------------------------------------------------------------------------
    async def run(
        self, stop: asyncio.Event, on_change: Callable[[bool], None] | None = None
    ) -> None:
        """Renew (as leader) or try to acquire (as standby) every ``renew_every`` seconds until
        ``stop`` is set. ``on_change`` is called with the new state whenever ``is_leader()``
        flips, including when the local window runs out between attempts. An attempt that fails
        or takes longer than ``renew_every`` counts as a failed renewal. The lease is not
        released here; call ``release()`` on a clean shutdown."""
        loop = asyncio.get_running_loop()
        leading = False
        while not stop.is_set():
            next_at = loop.time() + self.renew_every
            try:
                await asyncio.wait_for(self.try_acquire_or_renew(), self.renew_every)
            except Exception as exc:
                log.warning(
                    "lease %s/%s: renewal by %s failed: %s",
                    self.namespace,
                    self.name,
                    self.identity,
                    "timed out" if isinstance(exc, TimeoutError) else exc,
                )
            leading = self._report(leading, on_change)
            while not stop.is_set():
                wait = next_at - loop.time()
                if wait <= 0:
                    break
                if leading:  # wake when the local window closes, to report it on time
                    wait = min(wait, self._valid_until - self._clock())
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), max(wait, 0.001))
                leading = self._report(leading, on_change)

    def _report(self, was: bool, on_change: Callable[[bool], None] | None) -> bool:
        leading = self.is_leader()
        if leading != was:
            log.info(
                "lease %s/%s: %s %s leadership",
                self.namespace,
                self.name,
                self.identity,
                "acquired" if leading else "lost",
            )
            if on_change is not None:
                try:
                    on_change(leading)
                except Exception:
                    log.exception("leadership change callback failed")
        return leading
