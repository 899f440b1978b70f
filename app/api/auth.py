"""Bearer-token authentication and per-user request admission (fair share of the server).

Tokens are checked against their SHA-256 digests in ``qm_tokens``; results are cached briefly
so a busy client costs no query per request. Each user may have a bounded number of requests in
flight; beyond it the server answers 429 with Retry-After instead of letting one runaway client
starve the others.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import asyncpg

from app.core.errors import TooManyRequests, Unauthorized
from app.store.tokens import User, authenticate

ANONYMOUS_PATHS = ("/healthz", "/readyz", "/livez", "/version", "/openapi", "/schema", "/metrics")


@dataclass
class Authenticator:
    pool: asyncpg.Pool
    ttl_s: float = 10.0
    max_inflight_per_user: int = 200
    _cache: dict[str, tuple[float, User | None]] = field(default_factory=dict)
    _inflight: dict[str, int] = field(default_factory=dict)

    async def user_for(self, header: str | None) -> User:
        if not header or not header.startswith("Bearer "):
            raise Unauthorized("Unauthorized: a bearer token is required")
        token = header[len("Bearer ") :].strip()
        now = time.monotonic()
        hit = self._cache.get(token)
        if hit is None or now - hit[0] > self.ttl_s:
            user = await authenticate(self.pool, token)
            if len(self._cache) > 10_000:
                self._cache.clear()
            self._cache[token] = (now, user)
        else:
            user = hit[1]
        if user is None:
            raise Unauthorized("Unauthorized: the bearer token is not valid")
        return user

    def enter(self, user: User) -> None:
        n = self._inflight.get(user.name, 0)
        if n >= self.max_inflight_per_user:
            raise TooManyRequests(
                f"too many requests in flight for {user.name}; retry shortly", retry_after=1
            )
        self._inflight[user.name] = n + 1

    def leave(self, user: User) -> None:
        n = self._inflight.get(user.name, 1) - 1
        if n <= 0:
            self._inflight.pop(user.name, None)
        else:
            self._inflight[user.name] = n
