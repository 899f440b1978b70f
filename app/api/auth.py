"""Bearer-token authentication.

A token is checked against its SHA-256 digest in ``qm_tokens`` (unrevoked, unexpired) and the
answer is cached, so a busy client costs no query per request. A cached answer is dropped the
moment this server's watch cache shows any change of that token's record: a revocation (by the
API, ``qm token revoke``, SQL, or deleting the service account the token belongs to) is a
change of an object of the internal kind ``Token`` in the revision stream, which every API
server tails (:meth:`Authenticator.follow`). A cached token's expiry is checked on every
request; ``ttl_s`` is only a safety net for a stream that stands still. Every principal gets
the group ``system:authenticated``. Each user's fair share of the API is
:mod:`app.api.fairness`'s.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

import asyncpg

from app.core.errors import Unauthorized
from app.core.kinds import TOKEN
from app.core.principals import with_authenticated
from app.store.tokens import Credential, User, digest, lookup
from app.stream.cache import WatchCache, Watcher

log = logging.getLogger(__name__)

ANONYMOUS_PATHS = ("/healthz", "/readyz", "/livez", "/version", "/openapi", "/schema", "/metrics")
MAX_CACHED = 10_000


@dataclass
class Authenticator:
    pool: asyncpg.Pool
    ttl_s: float = 60.0
    _cache: dict[str, tuple[float, Credential | None]] = field(default_factory=dict)
    _by_uid: dict[str, str] = field(default_factory=dict)  # token record uid -> digest
    _epoch: int = 0  # moves whenever a token record changes

    async def user_for(self, header: str | None) -> User:
        if not header or not header.startswith("Bearer "):
            raise Unauthorized("Unauthorized: a bearer token is required")
        token = header[len("Bearer ") :].strip()
        key = digest(token)
        now = time.monotonic()
        hit = self._cache.get(key)
        if hit is None or now - hit[0] > self.ttl_s:
            epoch = self._epoch
            cred = await lookup(self.pool, token)
            # A change seen while the query ran may be newer than its answer: keep none.
            if epoch == self._epoch:
                self._remember(key, now, cred)
        else:
            cred = hit[1]
        if cred is None or (cred.expires_at is not None and cred.expires_at <= datetime.now(UTC)):
            raise Unauthorized("Unauthorized: the bearer token is not valid")
        return replace(cred.user, groups=with_authenticated(cred.user.groups))

    def _remember(self, key: str, now: float, cred: Credential | None) -> None:
        if len(self._cache) > MAX_CACHED:
            self._cache.clear()
            self._by_uid.clear()
        self._cache[key] = (now, cred)
        if cred is not None:
            self._by_uid[cred.uid] = key

    def forget(self, uid: str) -> None:
        """Drop what is cached of the token record ``uid`` (it changed or is gone)."""
        self._epoch += 1
        key = self._by_uid.pop(uid, None)
        if key is not None:
            self._cache.pop(key, None)

    def forget_all(self) -> None:
        self._epoch += 1
        self._cache.clear()
        self._by_uid.clear()

    async def follow(self, cache: WatchCache) -> None:
        """Forget each token whose record changes, as ``cache`` applies the change; runs until
        cancelled. A watcher that overflows (or a cache reload) forgets everything."""
        while True:
            w = Watcher(TOKEN, None, None, None)
            cache.watchers.add(w)  # changes from now on: anything cached was read before
            self.forget_all()
            try:
                while (item := await w.queue.get()) is not None:
                    self.forget(item[1].uid)
            finally:
                cache.unwatch(w)
            log.warning("the token watcher overflowed; every cached token is forgotten")
