"""Hollow nodes without a server: the spread schedule, and the requests a hollow node sends
(checked against an in-memory API behind ``httpx.MockTransport``) being the real agent's:
registration, conditional lease renewal that keeps the epoch someone else wrote, status
writes of a sim pod (Running, then Ready), errors mapped by the shared client."""

from __future__ import annotations

import asyncio
import itertools
import json
from typing import Any

import httpx
import pytest

from agent.api import POD
from agent.lease import LEASE_NAMESPACE
from agent.loop import RestPodApi
from agent.runtime.sim import SimRuntime
from app.api.usage_schema import parse_sample
from app.client import Unreachable
from app.client.build import Request, encode
from app.core.errors import Conflict, Invalid
from bench.agents.hollow import (
    due_slots,
    hollow_api,
    hollow_nodes,
    hollow_pod,
    lateness_ok,
    pod_worker,
)

Obj = dict[str, Any]
BASE = "/apis/quaymaster.io/v1"


class FakeApi:
    """Just enough of the API: objects by path, resourceVersions, conditional PUTs, 404 for a
    lease in a namespace that does not exist yet."""

    def __init__(self) -> None:
        self.objects: dict[str, Obj] = {}
        self.log: list[tuple[str, str]] = []
        self.version = 0
        self.namespaces: set[str] = set()
        self.refuse_puts = False

    def _stamp(self, obj: Obj) -> Obj:
        self.version += 1
        obj["metadata"]["resourceVersion"] = str(self.version)
        return obj

    def handle(self, request: httpx.Request) -> httpx.Response:
        method, url = request.method, request.url.path
        self.log.append((method, url))
        body: Obj = json.loads(request.content) if request.content else {}
        if method == "GET":
            obj = self.objects.get(url)
            return httpx.Response(200, json=obj) if obj else self._status(404, "NotFound")
        if method == "POST":
            name = body["metadata"]["name"]
            if url.endswith("/namespaces"):
                self.namespaces.add(name)
            elif "/namespaces/" in url and url.split("/")[5] not in self.namespaces:
                return self._status(404, "NotFound")
            if f"{url}/{name}" in self.objects:
                return self._status(409, "AlreadyExists")
            self.objects[f"{url}/{name}"] = self._stamp(body)
            return httpx.Response(201, json=body)
        if method == "PUT":
            key = url.removesuffix("/status")
            current = self.objects[key]
            if (
                self.refuse_puts
                or body["metadata"]["resourceVersion"] != current["metadata"]["resourceVersion"]
            ):
                return self._status(409, "Conflict")
            self.objects[key] = self._stamp(body)
            return httpx.Response(200, json=body)
        return self._status(405, "MethodNotAllowed")

    @staticmethod
    def _status(code: int, reason: str) -> httpx.Response:
        return httpx.Response(code, json={"kind": "Status", "code": code, "reason": reason})

    def bump_epoch(self, node: str, epoch: int) -> None:
        """What the node lifecycle controller does when it fences a silent node."""
        lease = self.objects[f"{BASE}/namespaces/{LEASE_NAMESPACE}/leases/{node}"]
        lease["spec"]["epoch"] = epoch
        self._stamp(lease)


def client(fake: FakeApi) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url="http://api", transport=httpx.MockTransport(fake.handle))


@pytest.mark.parametrize(
    ("t0", "t1", "expected"),
    [
        (0.0, 10.0, [(0.0, 0), (2.5, 1), (5.0, 2), (7.5, 3)]),
        (1.0, 5.0, [(2.5, 1)]),  # [t0, t1): 5.0 belongs to the next tick
        (9.0, 13.0, [(10.0, 0), (12.5, 1)]),  # the next period starts again at item 0
        (-5.0, 0.1, [(0.0, 0)]),  # nothing before the start
        (3.0, 3.0, []),
    ],
)
def test_due_slots_spread_each_item_once_per_period(
    t0: float, t1: float, expected: list[tuple[float, int]]
) -> None:
    assert list(due_slots(4, 10.0, 0.0, t0, t1)) == expected


def test_ticks_of_any_length_fire_every_slot_exactly_once() -> None:
    edges = [0.0, 0.003, 0.4, 0.41, 1.7, 1.7, 2.9, 5.0, 9.99, 20.0]
    fired = [s for a, b in itertools.pairwise(edges) for s in due_slots(7, 3.0, 0.0, a, b)]
    assert fired == list(due_slots(7, 3.0, 0.0, 0.0, 20.0))
    assert len(fired) == 7 * 20 // 3 + 1  # slot k at 3k/7 s: k = 0..46 start before 20 s
    assert all(b[0] > a[0] for a, b in itertools.pairwise(fired))


def test_ticks_on_a_millisecond_clock_lose_no_slot() -> None:
    """uvloop's ``loop.time()`` has millisecond resolution, so tick edges land exactly on
    slot times (every 5 ms at 2,000 nodes every 10 s), where ``(t0 - start) / step`` rounds
    above the slot's index: each such slot must still fire once."""
    start = 1234.567
    edges = [start + ms / 1000 for ms in range(0, 10_001, 5)]  # 10 s of 5 ms ticks
    fired = [s for a, b in itertools.pairwise(edges) for s in due_slots(2000, 10.0, start, a, b)]
    assert [i for _, i in fired] == list(range(2000))


def test_lateness_is_measured_against_the_due_time() -> None:
    assert lateness_ok(10.0, 11.0) and not lateness_ok(10.0, 11.01)


async def test_registration_and_renewal_send_what_an_agent_sends() -> None:
    fake = FakeApi()
    async with client(fake) as http:
        node = hollow_nodes(hollow_api(http), "h", 3)[1]
        await node.register(1_000.0)
        assert fake.log == [
            ("GET", f"{BASE}/nodes/h-00001"),
            ("POST", f"{BASE}/nodes"),
            ("GET", f"{BASE}/nodes/h-00001"),
            ("PUT", f"{BASE}/nodes/h-00001/status"),
            ("POST", f"{BASE}/namespaces/{LEASE_NAMESPACE}/leases"),  # 404: no namespace yet
            ("POST", f"{BASE}/namespaces"),
            ("POST", f"{BASE}/namespaces/{LEASE_NAMESPACE}/leases"),
        ]
        stored = fake.objects[f"{BASE}/nodes/h-00001"]
        assert stored["metadata"]["labels"]["topology.kubernetes.io/zone"] == "zone-b"
        ready = stored["status"]["conditions"][-1]
        assert (ready["type"], ready["status"]) == ("Ready", "True")
        assert stored["status"]["capacity"]["cpu"] == "32"
        assert stored["status"]["allocatable"]["cpu"] == "31900m"  # minus the default reserve

        fake.log.clear()
        await node.renew(1_010.0)
        assert fake.log == [("PUT", f"{BASE}/namespaces/{LEASE_NAMESPACE}/leases/h-00001")]

        fake.bump_epoch("h-00001", 3)  # the controller fenced the node meanwhile
        fake.log.clear()
        await node.renew(1_020.0)
        assert [m for m, _ in fake.log] == ["PUT", "GET", "PUT"]
        lease = fake.objects[f"{BASE}/namespaces/{LEASE_NAMESPACE}/leases/h-00001"]
        assert lease["spec"]["epoch"] == 3 and lease["spec"]["renewTime"].startswith("1970")
        assert (node.renewals, node.conflicts) == (2, 1)


async def test_usage_reports_are_what_the_collector_sends_and_the_server_accepts() -> None:
    sent: list[httpx.Request] = []

    def accept(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(201, json={"kind": "Status", "status": "Success", "code": 201})

    transport = httpx.MockTransport(accept)
    async with httpx.AsyncClient(base_url="http://api", transport=transport) as http:
        node = hollow_nodes(hollow_api(http), "h", 1)[0]
        node.usage_pods = 10
        wall = 1_800_000_000.0
        await node.report_usage(wall)
        await node.report_usage(wall + 10)
    assert [(r.method, r.url.path) for r in sent] == [
        ("POST", "/apis/metrics.quaymaster.io/v1/nodes/h-00000/samples")
    ] * 2
    first, second = (
        parse_sample(r.content, "h-00000", wall + 10 * i, 3900) for i, r in enumerate(sent)
    )
    assert first.at == wall and len(first.pods) == 10
    assert sorted({p.priority for p in first.pods}) == [100, 2000]
    assert sum(p.priority == 2000 for p in first.pods) == 2  # a fifth production
    assert all(len(p.containers) == 1 for p in first.pods)
    assert [p.uid for p in first.pods] == [p.uid for p in second.pods]  # the same pods
    assert [p.cpu_millis for p in first.pods] != [p.cpu_millis for p in second.pods]
    assert node.usage_reports == 2


async def test_a_renewal_that_loses_twice_raises_conflict() -> None:
    fake = FakeApi()
    async with client(fake) as http:
        node = hollow_nodes(hollow_api(http), "h", 1)[0]
        await node.register(0.0)
        fake.refuse_puts = True  # every write loses a race
        with pytest.raises(Conflict):
            await node.renew(1.0)


async def test_errors_are_the_agents_exceptions_and_counted_by_code() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/broken"):
            raise httpx.ConnectError("refused")
        return httpx.Response(422, json={"kind": "Status", "code": 422, "reason": "Invalid"})

    async with httpx.AsyncClient(
        base_url="http://api", transport=httpx.MockTransport(handler)
    ) as http:
        api = hollow_api(http)
        with pytest.raises(Invalid):
            await api.send(Request("PUT", "/x", body=encode({"a": 1})))
        with pytest.raises(Unreachable):
            await api.send(Request("GET", "/broken"))
        assert api.codes == {"422": 1, "unreachable": 1}


async def test_a_sim_pod_start_costs_two_status_writes_running_then_ready() -> None:
    fake = FakeApi()
    async with client(fake) as http:
        api = hollow_api(http)
        fake.namespaces.add("ns")
        created = await api.create(POD, "ns", hollow_pod("p", "h-1", ready_after=0))
        created["metadata"].update(namespace="ns", uid="u-1")
        worker = pod_worker(created, SimRuntime(), RestPodApi(api), "10.0.0.9")
        task = asyncio.create_task(worker.run())
        for _ in range(10_000):  # the sim runtime and the fake API answer without waiting
            if worker.writes >= 2:
                break
            await asyncio.sleep(0)
        worker.request_stop(confirm=False)
        await asyncio.wait_for(task, 5)
        puts = [u for m, u in fake.log if m == "PUT"]
        assert puts == [f"{BASE}/namespaces/ns/pods/p/status"] * 2
        status = fake.objects[f"{BASE}/namespaces/ns/pods/p"]["status"]
        ready = {c["type"]: c["status"] for c in status["conditions"]}
        assert status["phase"] == "Running" and ready["Ready"] == "True"
        assert status["containerStatuses"][0]["containerID"].startswith("sim://")
