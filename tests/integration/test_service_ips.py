"""Service virtual IPs against real PostgreSQL (migration 0007): allocated in the create's
transaction, unique under racing creates, the client's choice honoured or refused with a 422
that leaves nothing behind, kept on update, released on delete into a quarantine, none for
headless and ExternalName services, leaks repaired, and the migration undone and redone."""

from __future__ import annotations

import asyncio
import ipaddress
import json
import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import asyncpg
import psycopg
import pytest
from pools import pool_on

from app.core import errors
from app.core.admission import admit
from app.core.kinds import BY_KIND
from app.store.store import Store
from workers.loops import Context
from workers.loops.service_ips import Repair, ServiceIpRepair

SVC = BY_KIND["Service"]
RANGE = ipaddress.ip_network("127.100.0.0/16")
ROOT = Path(__file__).resolve().parents[2]
Obj = dict[str, Any]


@pytest.fixture(scope="module")
def db_url(make_database: Callable[[str], str]) -> str:
    return make_database("qm_svcip")


@pytest.fixture(scope="module")
async def pool(db_url: str) -> AsyncIterator[asyncpg.Pool]:
    async with pool_on(db_url, 24) as p:
        yield p


@pytest.fixture
def store(pool: asyncpg.Pool) -> Store:
    return Store(pool)


def service(name: str, ns: str = "svc", **spec: Any) -> Obj:
    body: Obj = {"selector": {"app": name}, "ports": [{"port": 80}], **spec}
    obj: Obj = {"kind": "Service", "metadata": {"namespace": ns, "name": name}, "spec": body}
    return admit(SVC, obj, None)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def holder(pool: asyncpg.Pool, ip: str) -> Any:
    return await pool.fetchrow(
        "SELECT service_uid::text AS uid, released_at FROM service_ips WHERE ip = $1::inet", ip
    )


async def counts(pool: asyncpg.Pool) -> tuple[int, int]:
    rec = await pool.fetchrow(
        "SELECT (SELECT count(*) FROM services) AS s, (SELECT count(*) FROM service_ips) AS a"
    )
    assert rec is not None
    return int(rec["s"]), int(rec["a"])


def refusal(exc: errors.StatusError) -> tuple[str, str]:
    assert isinstance(exc, errors.Invalid) and exc.code == 422, exc
    assert [c.field for c in exc.causes] == ["spec.clusterIP"], exc.causes
    return exc.causes[0].reason, exc.causes[0].message


# -- allocation ---------------------------------------------------------------------------------


async def test_a_create_gets_an_address_in_range_written_into_its_spec(
    store: Store, pool: asyncpg.Pool
) -> None:
    stored = await store.create(SVC, service(unique("web")))
    ip = stored.row["spec"]["clusterIP"]
    assert ipaddress.ip_address(ip) in RANGE
    assert ip not in ("127.100.0.0", "127.100.255.255")
    assert stored.row["spec"]["clusterIPs"] == [ip]
    row = await holder(pool, ip)
    assert row["uid"] == stored.uid and row["released_at"] is None
    # What is read back is what was answered.
    again = await store.get(SVC, "svc", stored.row["name"])
    assert again.row["spec"]["clusterIP"] == ip


async def test_fifty_concurrent_creates_get_fifty_distinct_addresses(
    store: Store, pool: asyncpg.Pool
) -> None:
    names = [unique("race") for _ in range(50)]
    created = await asyncio.gather(*(store.create(SVC, service(n)) for n in names))
    ips = [s.row["spec"]["clusterIP"] for s in created]
    assert len(set(ips)) == 50
    rows = await pool.fetch(
        "SELECT host(ip) AS ip, service_uid::text AS uid FROM service_ips"
        " WHERE ip = ANY($1::inet[])",
        ips,
    )
    assert {(r["ip"], r["uid"]) for r in rows} == {
        (s.row["spec"]["clusterIP"], s.uid) for s in created
    }


async def test_a_dba_insert_gets_an_address_too(pool: asyncpg.Pool) -> None:
    name = unique("dba")
    spec = json.dumps({"ports": [{"port": 80}]})
    await pool.execute(
        "INSERT INTO services (uid, namespace, name, spec) VALUES ($1, 'svc', $2, $3::text::jsonb)",
        uuid.uuid4(),
        name,
        spec,
    )
    got = await pool.fetchval("SELECT spec FROM services WHERE name = $1", name)
    assert ipaddress.ip_address(got["clusterIP"]) in RANGE
    assert got["clusterIPs"] == [got["clusterIP"]]


async def test_a_create_of_a_taken_name_allocates_nothing(store: Store, pool: asyncpg.Pool) -> None:
    name = unique("twice")
    await store.create(SVC, service(name))
    before = await counts(pool)
    with pytest.raises(errors.AlreadyExists):
        await store.create(SVC, service(name))
    assert await counts(pool) == before


async def test_racing_creates_of_one_name_leave_one_allocation(
    store: Store, pool: asyncpg.Pool
) -> None:
    name = unique("same")
    before = await counts(pool)
    results = await asyncio.gather(
        *(store.create(SVC, service(name)) for _ in range(8)), return_exceptions=True
    )
    assert sum(not isinstance(r, BaseException) for r in results) == 1
    assert all(isinstance(r, errors.AlreadyExists) for r in results if isinstance(r, BaseException))
    assert await counts(pool) == (before[0] + 1, before[1] + 1)


# -- the client's choice ------------------------------------------------------------------------


async def test_a_chosen_address_is_honoured(store: Store, pool: asyncpg.Pool) -> None:
    stored = await store.create(SVC, service(unique("chosen"), clusterIP="127.100.200.7"))
    assert stored.row["spec"]["clusterIP"] == "127.100.200.7"
    assert stored.row["spec"]["clusterIPs"] == ["127.100.200.7"]
    assert (await holder(pool, "127.100.200.7"))["uid"] == stored.uid


async def test_a_chosen_address_held_by_another_is_refused_and_nothing_written(
    store: Store, pool: asyncpg.Pool
) -> None:
    first = await store.create(SVC, service(unique("owner"), clusterIP="127.100.200.8"))
    before = await counts(pool)
    name = unique("thief")
    with pytest.raises(errors.Invalid) as caught:
        await store.create(SVC, service(name, clusterIP="127.100.200.8"))
    reason, message = refusal(caught.value)
    assert reason == "FieldValueInvalid"
    assert message == 'Invalid value: "127.100.200.8": provided IP is already allocated'
    assert f'Service "{name}" is invalid' in caught.value.message
    assert await counts(pool) == before
    assert (await holder(pool, "127.100.200.8"))["uid"] == first.uid


@pytest.mark.parametrize(
    "ip", ["10.0.0.1", "127.101.0.1", "127.100.0.0", "127.100.255.255", "::1", "fd00::1"]
)
async def test_a_chosen_address_outside_the_range_is_refused(
    store: Store, pool: asyncpg.Pool, ip: str
) -> None:
    before = await counts(pool)
    with pytest.raises(errors.Invalid) as caught:
        await store.create(SVC, service(unique("out"), clusterIP=ip))
    _, message = refusal(caught.value)
    assert message == f'Invalid value: "{ip}": provided IP is not in the valid range 127.100.0.0/16'
    assert await counts(pool) == before


async def test_racing_creates_choosing_one_address_get_it_once(
    store: Store, pool: asyncpg.Pool
) -> None:
    results = await asyncio.gather(
        *(store.create(SVC, service(unique("rc"), clusterIP="127.100.201.1")) for _ in range(10)),
        return_exceptions=True,
    )
    won = [r for r in results if not isinstance(r, BaseException)]
    lost = [r for r in results if isinstance(r, BaseException)]
    assert len(won) == 1 and len(lost) == 9
    assert all("already allocated" in refusal(e)[1] for e in lost)  # type: ignore[arg-type]


# -- updates ------------------------------------------------------------------------------------


async def test_an_update_that_omits_the_address_keeps_it(store: Store) -> None:
    name = unique("upd")
    stored = await store.create(SVC, service(name))
    ip = stored.row["spec"]["clusterIP"]
    # Through admission (what the API does) ...
    old = stored.obj
    new = service(name, ports=[{"port": 81}])
    assert "clusterIP" not in new["spec"]
    updated = await store.update(SVC, admit(SVC, new, old), stored.row_version)
    assert updated.row["spec"]["clusterIP"] == ip and updated.row["spec"]["ports"][0]["port"] == 81
    # ... and straight to the store, as a controller or a DBA would: the trigger restores it.
    bare = {**new, "spec": {"ports": [{"port": 82}], "type": "NodePort"}}
    again = await store.update(SVC, bare, updated.row_version)
    assert again.row["spec"]["clusterIP"] == ip
    assert again.row["spec"]["clusterIPs"] == [ip]


async def test_an_update_that_changes_the_address_is_refused(store: Store) -> None:
    name = unique("imm")
    stored = await store.create(SVC, service(name))
    changed = {**stored.obj, "spec": {**stored.obj["spec"], "clusterIP": "127.100.202.2"}}
    with pytest.raises(errors.Invalid) as caught:
        await store.update(SVC, changed, stored.row_version)
    assert refusal(caught.value) == ("FieldValueInvalid", "field is immutable")
    with pytest.raises(errors.Invalid):  # and admission says so first through the API
        admit(SVC, changed, stored.obj)


async def test_headless_services_hold_no_address(store: Store, pool: asyncpg.Pool) -> None:
    before = await counts(pool)
    stored = await store.create(SVC, service(unique("headless"), clusterIP="None"))
    assert stored.row["spec"]["clusterIP"] == "None"
    assert stored.row["spec"]["clusterIPs"] == ["None"]
    assert await counts(pool) == (before[0] + 1, before[1])


async def test_external_name_holds_none_and_a_change_to_it_releases(
    store: Store, pool: asyncpg.Pool
) -> None:
    before = await counts(pool)
    ext = await store.create(
        SVC, service(unique("ext"), type="ExternalName", externalName="db.example.com")
    )
    assert "clusterIP" not in ext.row["spec"]
    assert await counts(pool) == (before[0] + 1, before[1])

    name = unique("flip")
    stored = await store.create(SVC, service(name))
    ip = stored.row["spec"]["clusterIP"]
    to_ext = service(name, type="ExternalName", externalName="db.example.com")
    flipped = await store.update(SVC, admit(SVC, to_ext, stored.obj), stored.row_version)
    assert "clusterIP" not in flipped.row["spec"] and "clusterIPs" not in flipped.row["spec"]
    row = await holder(pool, ip)
    assert row["uid"] is None and row["released_at"] is not None
    # And back: a new address (the old one is in quarantine).
    back = await store.update(SVC, admit(SVC, service(name), flipped.obj), flipped.row_version)
    new_ip = back.row["spec"]["clusterIP"]
    assert ipaddress.ip_address(new_ip) in RANGE and new_ip != ip


async def test_delete_releases_into_quarantine(store: Store, pool: asyncpg.Pool) -> None:
    name = unique("del")
    stored = await store.create(SVC, service(name, clusterIP="127.100.203.3"))
    assert stored.row["spec"]["clusterIP"] == "127.100.203.3"
    await store.delete(SVC, "svc", name)
    row = await holder(pool, "127.100.203.3")
    assert row["uid"] is None and row["released_at"] is not None
    with pytest.raises(errors.Invalid) as caught:
        await store.create(SVC, service(unique("reuse"), clusterIP="127.100.203.3"))
    _, message = refusal(caught.value)
    assert "provided IP is already allocated: released at" in message
    assert "quarantine of 00:05:00" in message


# -- reconciliation -----------------------------------------------------------------------------


async def repair(pool: asyncpg.Pool) -> Repair:
    ctx = Context(pool, Store(pool), lambda: 0.0, lambda: None)  # type: ignore[arg-type,return-value]
    return await ServiceIpRepair().repair(ctx)


async def test_leaks_are_repaired(store: Store, pool: asyncpg.Pool) -> None:
    await repair(pool)  # start from a consistent table
    # 1. An allocation whose service is gone (a crash between steps, a hand-made row).
    ghost = uuid.uuid4()
    await pool.execute(
        "INSERT INTO service_ips (ip, service_uid, namespace, name)"
        " VALUES ('127.100.204.1', $1, 'svc', 'ghost')",
        ghost,
    )
    # 2. A service naming an address no row holds: written with triggers off.
    lost = uuid.uuid4()
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute("SET LOCAL session_replication_role = replica")
        await conn.execute(
            "INSERT INTO services (uid, namespace, name, spec)"
            " VALUES ($1, 'svc', $2, $3::text::jsonb)",
            lost,
            unique("lost"),
            json.dumps({"clusterIP": "127.100.204.2", "ports": [{"port": 80}]}),
        )
    # 3. A live service's row deleted by hand.
    kept = await store.create(SVC, service(unique("kept")))
    kept_ip = kept.row["spec"]["clusterIP"]
    await pool.execute("DELETE FROM service_ips WHERE service_uid = $1::uuid", kept.uid)

    done = await repair(pool)
    assert (done.released, done.restored, done.duplicates) == (1, 2, 0)
    ghost_row = await holder(pool, "127.100.204.1")
    assert ghost_row["uid"] is None and ghost_row["released_at"] is not None
    assert (await holder(pool, "127.100.204.2"))["uid"] == str(lost)
    assert (await holder(pool, kept_ip))["uid"] == kept.uid
    # The repaired rows now guard their addresses.
    with pytest.raises(errors.Invalid):
        await store.create(SVC, service(unique("x"), clusterIP="127.100.204.2"))
    assert await repair(pool) == Repair()


async def test_an_address_two_services_name_is_counted(store: Store, pool: asyncpg.Pool) -> None:
    await repair(pool)
    first = await store.create(SVC, service(unique("dup")))
    ip = first.row["spec"]["clusterIP"]
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute("SET LOCAL session_replication_role = replica")
        await conn.execute(
            "INSERT INTO services (uid, namespace, name, spec)"
            " VALUES ($1, 'svc', $2, $3::text::jsonb)",
            uuid.uuid4(),
            unique("dup"),
            json.dumps({"clusterIP": ip, "ports": [{"port": 80}]}),
        )
    done = await repair(pool)
    assert done.duplicates == 1 and done.released == 0
    assert (await holder(pool, ip))["uid"] == first.uid  # the first holder keeps it
    await pool.execute("DELETE FROM services WHERE spec->>'clusterIP' = $1", ip)
    await repair(pool)


async def test_reporting_reads_the_allocations(db_url: str) -> None:
    with psycopg.connect(db_url) as db:
        db.execute("SET ROLE qm_reporting")  # through the reporting schema (ADR 0054)
        assert db.execute("SELECT count(*) FROM reporting.service_ips").fetchone() is not None


# -- the range, the quarantine and exhaustion (a database of their own) ---------------------------


async def test_a_small_range_exhausts_and_quarantine_holds_addresses(
    make_database: Callable[[str], str],
) -> None:
    async with pool_on(make_database("qm_svcip_small"), 8) as pool:
        store = Store(pool)
        await pool.execute("UPDATE service_ip_range SET cidr = '127.100.9.0/29'")  # 6 addresses
        made = [await store.create(SVC, service(f"s{i}")) for i in range(6)]
        ips = {s.row["spec"]["clusterIP"] for s in made}
        assert ips == {f"127.100.9.{h}" for h in range(1, 7)}
        with pytest.raises(errors.ServiceUnavailable) as caught:
            await store.create(SVC, service("s6"))
        assert caught.value.code == 503
        assert "no virtual IP is free in the service range 127.100.9.0/29: 6 held" in str(
            caught.value
        )
        assert await counts(pool) == (6, 6)
        freed = made[2].row["spec"]["clusterIP"]
        await store.delete(SVC, "svc", "s2")
        # Released, but in quarantine: neither a random nor a chosen create may have it.
        with pytest.raises(errors.ServiceUnavailable) as full:
            await store.create(SVC, service("s7"))
        assert ": 5 held, 1 in quarantine" in str(full.value)
        with pytest.raises(errors.Invalid):
            await store.create(SVC, service("s8", clusterIP=freed))
        # Once the quarantine is over, it is handed out again, and the repair purges nothing
        # that is held.
        await pool.execute("UPDATE service_ip_range SET quarantine = '0 seconds'")
        again = await store.create(SVC, service("s9"))
        assert again.row["spec"]["clusterIP"] == freed
        assert (await repair(pool)) == Repair()


# -- the migration ----------------------------------------------------------------------------


def alembic(url: str, *args: str) -> None:
    subprocess.run([sys.executable, "-m", "alembic", *args], cwd=ROOT, check=True,
                   env={**os.environ, "DATABASE_URL": url}, capture_output=True,
                   timeout=300)  # fmt: skip


def _insert(db: psycopg.Connection[Any], name: str, spec: Obj) -> None:
    db.execute("INSERT INTO services (uid, namespace, name, spec) VALUES (%s, 'm', %s, %s)",
               (uuid.uuid4(), name, json.dumps(spec)))  # fmt: skip


def test_downgrade_and_upgrade_with_services_in_place(make_database: Callable[[str], str]) -> None:
    url = make_database("qm_svcip_mig")
    with psycopg.connect(url, autocommit=True) as db:
        _insert(db, "before", {"ports": [{"port": 80}]})
    alembic(url, "downgrade", "0006")
    with psycopg.connect(url, autocommit=True) as db:
        tables = db.execute("SELECT to_regclass('service_ips'), to_regclass('service_ip_range')")
        assert tables.fetchone() == (None, None)
        kept = db.execute("SELECT spec->>'clusterIP' FROM services WHERE name = 'before'")
        before_ip = kept.fetchone()[0]  # type: ignore[index]
        _insert(db, "plain", {"ports": [{"port": 80}]})
        _insert(db, "named", {"clusterIP": "127.100.77.7", "ports": [{"port": 80}]})
        _insert(db, "headless", {"clusterIP": "None"})
        _insert(db, "ext", {"type": "ExternalName", "externalName": "x.example.com"})
    alembic(url, "upgrade", "head")
    with psycopg.connect(url, autocommit=True) as db:
        rows: dict[str, str | None] = dict(
            db.execute("SELECT name, spec->>'clusterIP' FROM services").fetchall()
        )
        held: dict[str, str] = dict(
            db.execute(
                "SELECT s.name, host(a.ip) FROM service_ips a JOIN services s"
                " ON s.uid = a.service_uid"
            ).fetchall()
        )
    assert rows["before"] == before_ip and rows["named"] == "127.100.77.7"
    assert ipaddress.ip_address(str(rows["plain"])) in RANGE
    assert rows["headless"] == "None" and rows["ext"] is None
    assert held == {"before": before_ip, "named": "127.100.77.7", "plain": rows["plain"]}


async def test_qm_service_cidr_sets_the_range_and_a_bad_one_is_refused(
    store: Store, pool: asyncpg.Pool
) -> None:
    from app.store.service_range import apply_range

    for bad in ("banana", "127.100.0.1/16", "10.0.0.0/31", "fd00::/64", "10.0.0.0/7"):
        with pytest.raises(ValueError, match="QM_SERVICE_CIDR"):
            await apply_range(pool, bad)
    try:
        assert await apply_range(pool, "127.101.0.0/24") is True
        assert await apply_range(pool, "127.101.0.0/24") is False  # every API server, once
        stored = await store.create(SVC, service(unique("ranged")))
        assert ipaddress.ip_address(stored.row["spec"]["clusterIP"]) in ipaddress.ip_network(
            "127.101.0.0/24"
        )
    finally:
        await apply_range(pool, str(RANGE))
