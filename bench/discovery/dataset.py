"""The discovery benchmark's objects: services with one EndpointSlice each, and the changes.

Services go in with plain SQL (the database's trigger gives each a virtual IP), each with one
slice of ``per_service`` endpoints shaped as the EndpointSlice controller writes them (pod
name, address, node, zone, targetRef, port ``http``). A change flips one endpoint's ``ready``
(and ``serving``) and sets its zone to ``q<seq>``, the value a subscriber recognises the change
by; ``q`` plus a 5-digit sequence is as long as a real zone name such as ``zone-a``.
"""

from __future__ import annotations

import json
import random
import uuid
from typing import Any

import psycopg

NS = "bench"
ZONES = ("zone-a", "zone-b", "zone-c")
PORT = 8080


class Dataset:
    def __init__(self, services: int, per_service: int) -> None:
        self.services, self.per_service = services, per_service
        self.uids = [str(uuid.uuid4()) for _ in range(services)]
        self.specs = [self._slice(s) for s in range(services)]
        self.seq = 0

    def _slice(self, s: int) -> dict[str, Any]:
        endpoints = []
        for e in range(self.per_service):
            n = s * self.per_service + e
            pod = f"svc-{s:04d}-7d4b9c8f6-{e:05d}"
            endpoints.append({
                "addresses": [f"10.{88 + n // 65536}.{n // 256 % 256}.{n % 256}"],
                "conditions": {"ready": True, "serving": True, "terminating": False},
                "nodeName": f"node-{n % 1000:04d}",
                "zone": ZONES[n % 3],
                "targetRef": {"kind": "Pod", "namespace": NS, "name": pod,
                              "uid": str(uuid.uuid4())},
            })  # fmt: skip
        return {"addressType": "IPv4", "endpoints": endpoints,
                "ports": [{"name": "http", "port": PORT, "protocol": "TCP"}]}  # fmt: skip

    def insert(self, db: psycopg.Connection[Any]) -> None:
        with db.transaction():
            for s in range(self.services):
                name = f"svc-{s:04d}"
                spec = {"type": "ClusterIP", "selector": {"app": name},
                        "ports": [{"name": "http", "port": 80, "targetPort": PORT}]}  # fmt: skip
                db.execute(
                    "INSERT INTO services (uid, namespace, name, spec) VALUES (%s, %s, %s, %s)",
                    (uuid.uuid4(), NS, name, json.dumps(spec)),
                )
                labels = {"kubernetes.io/service-name": name,
                          "endpointslice.kubernetes.io/managed-by":
                          "endpointslice-controller.quaymaster.io"}  # fmt: skip
                db.execute(
                    "INSERT INTO endpointslices (uid, namespace, name, labels, spec)"
                    " VALUES (%s, %s, %s, %s, %s)",
                    (self.uids[s], NS, f"{name}-abcde", json.dumps(labels),
                     json.dumps(self.specs[s])),
                )  # fmt: skip

    def change(
        self, rng: random.Random, slices: int = 1, per_slice: int = 1
    ) -> tuple[int, str, list[Any]]:
        """One transaction's statement: ``per_slice`` endpoints flipped in each of ``slices``
        distinct slices, all marked with a new sequence number; (seq, sql, params)."""
        self.seq += 1
        rows: list[Any] = []
        for s in rng.sample(range(self.services), slices):
            spec = self.specs[s]
            for e in rng.sample(range(self.per_service), per_slice):
                ep = spec["endpoints"][e]
                ready = not ep["conditions"]["ready"]
                ep["conditions"] = {"ready": ready, "serving": ready, "terminating": False}
                ep["zone"] = f"q{self.seq:05d}"
            rows += [self.uids[s], json.dumps(spec)]
        values = ", ".join(["(%s::uuid, %s::jsonb)"] * slices)
        sql = (f"UPDATE endpointslices AS e SET spec = v.spec FROM (VALUES {values})"
               " AS v(uid, spec) WHERE e.uid = v.uid")  # fmt: skip
        return self.seq, sql, rows
