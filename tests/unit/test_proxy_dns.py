"""The node proxy's DNS answers (agent/proxy/dns.py): queries built with dnslib, answered by the
pure function from a table, table-driven."""

from __future__ import annotations

from typing import Any

import pytest
from dnslib import QTYPE, RCODE, DNSRecord

from agent.proxy.dns import TTL, answer, split_name
from agent.proxy.table import Table


def endpoint(address: str, ready: bool = True, terminating: bool = False) -> dict[str, Any]:
    return {"a": address, "z": "", "n": "", "r": ready, "s": ready, "t": terminating, "p": {}}


RESOURCES = {
    "s/default/web": {"ip": "127.100.3.7", "type": "ClusterIP", "ports": []},
    "e/default/web/p1": endpoint("10.88.0.11"),
    "s/team/db": {"ip": None, "type": "ClusterIP", "ports": []},  # headless
    "e/team/db/db-0": endpoint("10.88.0.12"),
    "e/team/db/db-1": endpoint("10.88.0.13", ready=False),
    "e/team/db/db-2": endpoint("10.88.0.14", ready=False, terminating=True),
    "e/team/db/db-3": endpoint("10.88.0.11"),
    "s/team/ext": {"ip": None, "type": "ExternalName", "ports": [], "ext": "db.example.com"},
}


@pytest.fixture(scope="module")
def table() -> Table:
    t = Table()
    t.update(RESOURCES, RESOURCES, reset=True)
    return t


def ask(table: Table, name: str, qtype: str = "A") -> tuple[str, list[tuple[str, str, int]]]:
    query = DNSRecord.question(name, qtype)
    result = answer(query.pack(), table)
    assert result is not None
    reply = DNSRecord.parse(result[0])
    assert reply.header.id == query.header.id
    assert RCODE.get(reply.header.rcode) == result[1]
    rrs = [(QTYPE.get(rr.rtype), str(rr.rdata), rr.ttl) for rr in reply.rr]
    return result[1], rrs


@pytest.mark.parametrize(
    ("name", "qtype", "rcode", "records"),
    [
        ("web.default.svc", "A", "NOERROR", [("A", "127.100.3.7", TTL)]),
        ("web.default.svc.cluster.local", "A", "NOERROR", [("A", "127.100.3.7", TTL)]),
        ("WEB.Default.SVC.cluster.local.", "A", "NOERROR", [("A", "127.100.3.7", TTL)]),
        # headless: the ready endpoints' addresses, each once
        ("db.team.svc", "A", "NOERROR", [("A", "10.88.0.11", TTL), ("A", "10.88.0.12", TTL)]),
        # ExternalName: a CNAME
        ("ext.team.svc.cluster.local", "A", "NOERROR", [("CNAME", "db.example.com.", TTL)]),
        # a known name without records of that type: NODATA
        ("web.default.svc", "AAAA", "NOERROR", []),
        # unknown names under the cluster domain
        ("nope.default.svc", "A", "NXDOMAIN", []),
        ("web.other.svc.cluster.local", "A", "NXDOMAIN", []),
        ("default.svc.cluster.local", "A", "NXDOMAIN", []),
        ("a.web.default.svc", "A", "NXDOMAIN", []),
        ("foo.cluster.local", "A", "NXDOMAIN", []),
        # outside the cluster domain
        ("example.com", "A", "REFUSED", []),
        ("web.default.svc.example.com", "A", "REFUSED", []),
    ],
)
def test_answers(table: Table, name: str, qtype: str, rcode: str, records: list[Any]) -> None:
    assert ask(table, name, qtype) == (rcode, records)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("web.default.svc", ("web", "default")),
        ("web.default.svc.cluster.local.", ("web", "default")),
        ("svc", None),
        ("cluster.local", None),
        ("x.y.z.svc", None),
        ("web.default", False),
        ("", False),
    ],
)
def test_split_name(name: str, expected: object) -> None:
    assert split_name(name) == expected


def test_garbage_and_replies_get_no_answer(table: Table) -> None:
    assert answer(b"\x00\x01garbage", table) is None
    reply = DNSRecord.question("web.default.svc").reply()
    assert answer(reply.pack(), table) is None
