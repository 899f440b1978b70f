"""Service virtual IPs as a user meets them through two API servers on one database: 50
concurrent creates spread over both get 50 distinct addresses, both servers show the same
address, a chosen address is honoured or refused with a 422 ``Status`` naming
``spec.clusterIP``, malformed and hostile values are refused leaving nothing behind, and an
update that omits the address keeps it."""

from __future__ import annotations

import asyncio
import ipaddress
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from app.devstack.apiserver import ApiServer
from app.devstack.supervise import free_port

API = "/apis/quaymaster.io/v1"
RANGE = ipaddress.ip_network("127.100.0.0/16")


@pytest.fixture(scope="module")
def second_server(
    api_server: ApiServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ApiServer]:
    """Another ``python -m app.api`` on the session's database (its revisioner a standby)."""
    port = free_port()
    env = {**api_server.env, "QM_API_PORT": str(port), "QM_API_URL": f"http://127.0.0.1:{port}"}
    log: Path = tmp_path_factory.mktemp("api2") / "api.log"
    server = ApiServer(port, api_server.token, env, log, cwd=api_server.cwd)
    server.start(timeout=30)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def ns(api_server: ApiServer) -> str:
    name = f"vip-{secrets.token_hex(3)}"
    headers = {"Authorization": f"Bearer {api_server.token}"}
    r = httpx.post(f"{api_server.url}{API}/namespaces", headers=headers,
                   json={"metadata": {"name": name}}, timeout=30)  # fmt: skip
    assert r.status_code == 201, r.text
    return name


def client(server: ApiServer) -> httpx.Client:
    headers = {"Authorization": f"Bearer {server.token}"}
    return httpx.Client(base_url=server.url, headers=headers, timeout=30)


def svc(name: str, **spec: Any) -> dict[str, Any]:
    body = {"selector": {"app": name}, "ports": [{"port": 80, "targetPort": 8080}], **spec}
    return {"apiVersion": "quaymaster.io/v1", "kind": "Service", "metadata": {"name": name},
            "spec": body}  # fmt: skip


def invalid_cause(r: httpx.Response) -> str:
    """The one cause of a 422 ``Status`` on ``spec.clusterIP``; its message."""
    assert r.status_code == 422, r.text
    body = r.json()
    assert body["kind"] == "Status" and body["reason"] == "Invalid" and body["code"] == 422
    causes = body["details"]["causes"]
    assert [c["field"] for c in causes] == ["spec.clusterIP"], causes
    return str(causes[0]["message"])


def services_in(pg_url: str, ns: str) -> int:
    with psycopg.connect(pg_url, autocommit=True) as db:
        row = db.execute("SELECT count(*) FROM services WHERE namespace = %s", (ns,)).fetchone()
    assert row is not None
    return int(row[0])


async def test_fifty_concurrent_creates_from_two_api_servers_get_fifty_distinct_addresses(
    api_server: ApiServer, second_server: ApiServer, ns: str, pg_url: str
) -> None:
    headers = {"Authorization": f"Bearer {api_server.token}"}
    servers = [api_server, second_server]
    async with httpx.AsyncClient(headers=headers, timeout=60) as c:

        async def create(i: int) -> httpx.Response:
            base = servers[i % 2].url
            return await c.post(f"{base}{API}/namespaces/{ns}/services", json=svc(f"race-{i}"))

        answers = await asyncio.gather(*(create(i) for i in range(50)))
        assert [r.status_code for r in answers] == [201] * 50, [
            r.text for r in answers if r.status_code != 201
        ]
        ips = [r.json()["spec"]["clusterIP"] for r in answers]
        assert len(set(ips)) == 50
        assert all(ipaddress.ip_address(ip) in RANGE for ip in ips)
        assert all(
            r.json()["spec"]["clusterIPs"] == [ip] for r, ip in zip(answers, ips, strict=True)
        )
        # Each server shows every address as the other answered it.
        for server in servers:
            listed = await c.get(f"{server.url}{API}/namespaces/{ns}/services")
            assert listed.status_code == 200
            seen = {i["metadata"]["name"]: i["spec"]["clusterIP"] for i in listed.json()["items"]}
            assert {f"race-{i}": ips[i] for i in range(50)}.items() <= seen.items()
    with psycopg.connect(pg_url, autocommit=True) as db:
        held = db.execute(
            "SELECT s.name, host(a.ip) FROM service_ips a JOIN services s ON s.uid = a.service_uid"
            " WHERE s.namespace = %s AND s.name LIKE 'race-%%'",
            (ns,),
        ).fetchall()
    assert dict(held) == {f"race-{i}": ips[i] for i in range(50)}


def test_a_chosen_address_is_honoured_and_a_second_claim_refused(
    api_server: ApiServer, second_server: ApiServer, ns: str, pg_url: str
) -> None:
    with client(api_server) as a, client(second_server) as b:
        r = a.post(f"{API}/namespaces/{ns}/services", json=svc("pick", clusterIP="127.100.250.1"))
        assert r.status_code == 201, r.text
        assert r.json()["spec"]["clusterIP"] == "127.100.250.1"
        before = services_in(pg_url, ns)
        again = b.post(
            f"{API}/namespaces/{ns}/services", json=svc("steal", clusterIP="127.100.250.1")
        )
        assert (
            invalid_cause(again)
            == 'Invalid value: "127.100.250.1": provided IP is already allocated'
        )
        assert 'Service "steal" is invalid' in again.json()["message"]
        out = b.post(f"{API}/namespaces/{ns}/services", json=svc("far", clusterIP="10.96.0.10"))
        assert invalid_cause(out) == (
            'Invalid value: "10.96.0.10": provided IP is not in the valid range 127.100.0.0/16'
        )
        assert services_in(pg_url, ns) == before
        assert b.get(f"{API}/namespaces/{ns}/services/steal").status_code == 404


HOSTILE: list[Any] = [
    "abc",
    "127.100.0.1; DROP TABLE services",
    "'; DELETE FROM service_ips; --",
    "127.100.0.01",
    "127.100.0.1/32",
    "127.100.0.256",
    " 127.100.0.1",
    "127.100.0.1\n",
    "127.100.0.1\u0000",
    "x" * 10_000,
    "::ffff:127.100.0.1",
    "0.0.0.0",
    "255.255.255.255",
    12345,
    ["127.100.0.1"],
    {"ip": "127.100.0.1"},
    True,
]


@pytest.mark.parametrize("value", HOSTILE, ids=lambda v: repr(v)[:30])
def test_malformed_and_hostile_addresses_are_refused(
    api_server: ApiServer, ns: str, pg_url: str, value: Any
) -> None:
    with psycopg.connect(pg_url, autocommit=True) as db:
        allocated = db.execute("SELECT count(*) FROM service_ips").fetchone()
    before = services_in(pg_url, ns)
    with client(api_server) as c:
        r = c.post(f"{API}/namespaces/{ns}/services", json=svc("hostile", clusterIP=value))
        invalid_cause(r)
        assert c.get(f"{API}/namespaces/{ns}/services/hostile").status_code == 404
    assert services_in(pg_url, ns) == before
    with psycopg.connect(pg_url, autocommit=True) as db:
        assert db.execute("SELECT count(*) FROM service_ips").fetchone() == allocated


def test_an_update_keeps_the_address_and_a_change_is_refused(
    api_server: ApiServer, second_server: ApiServer, ns: str
) -> None:
    with client(api_server) as a, client(second_server) as b:
        made = a.post(f"{API}/namespaces/{ns}/services", json=svc("keep"))
        assert made.status_code == 201, made.text
        ip = made.json()["spec"]["clusterIP"]
        rv = made.json()["metadata"]["resourceVersion"]
        body = svc("keep", ports=[{"port": 81}])
        body["metadata"]["resourceVersion"] = rv
        put = b.put(f"{API}/namespaces/{ns}/services/keep", json=body)
        assert put.status_code == 200, put.text
        assert (
            put.json()["spec"]["clusterIP"] == ip and put.json()["spec"]["ports"][0]["port"] == 81
        )
        patch = a.patch(f"{API}/namespaces/{ns}/services/keep",
                        json={"spec": {"clusterIP": "127.100.251.1"}},
                        headers={"Content-Type": "application/merge-patch+json"})  # fmt: skip
        assert invalid_cause(patch).endswith("field is immutable")
        ext = a.patch(f"{API}/namespaces/{ns}/services/keep",
                      json={"spec": {"type": "ExternalName", "externalName": "db.example.com"}},
                      headers={"Content-Type": "application/merge-patch+json"})  # fmt: skip
        assert ext.status_code == 200, ext.text
        assert "clusterIP" not in ext.json()["spec"]
