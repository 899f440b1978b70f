"""One pod's API for the agent's pod workers in tests: conditional status writes, deletion
confirmations, ConfigMaps, Secrets and Services to hand out, and an on/off switch. Shared by
the pod worker's unit tests and the drain wait's tests (``tests/`` is on the path)."""

from __future__ import annotations

import copy
from typing import Any

from agent.api import Unreachable
from app.core.errors import Conflict, NotFound

Obj = dict[str, Any]


class FakeApi:
    """One pod's API: conditional status writes, deletion confirmations, an on/off switch."""

    def __init__(self, pod: Obj) -> None:
        self.pod = copy.deepcopy(pod)
        self.statuses: list[Obj] = []
        self.deletes: list[tuple[str, str, str]] = []
        self.down = False
        self.sources: dict[tuple[str, str], Obj] = {}
        self.services: list[Obj] = []

    def _check(self) -> None:
        if self.down:
            raise Unreachable("connection refused")

    async def get(self, namespace: str, name: str) -> Obj:
        self._check()
        return copy.deepcopy(self.pod)

    async def write_status(self, pod: Obj, new_status: Obj) -> Obj:
        self._check()
        rv = self.pod["metadata"]["resourceVersion"]
        if pod["metadata"]["resourceVersion"] != rv:
            raise Conflict("stale")
        self.statuses.append(copy.deepcopy(new_status))
        self.pod["status"] = copy.deepcopy(new_status)
        self.pod["metadata"]["resourceVersion"] = str(int(rv) + 1)
        return copy.deepcopy(self.pod)

    async def get_source(self, kind: str, namespace: str, name: str) -> Obj | None:
        self._check()
        return copy.deepcopy(self.sources.get((kind, name)))

    async def list_services(self, namespace: str) -> list[Obj]:
        self._check()
        return copy.deepcopy(self.services)

    async def confirm_deleted(self, namespace: str, name: str, uid: str) -> None:
        self._check()
        if uid != self.pod["metadata"]["uid"]:
            raise NotFound("gone")
        self.deletes.append((namespace, name, uid))

    @property
    def phases(self) -> list[str]:
        return [s["phase"] for s in self.statuses]

    def ready(self) -> list[str]:
        return [
            next(c["status"] for c in s["conditions"] if c["type"] == "Ready")
            for s in self.statuses
        ]
