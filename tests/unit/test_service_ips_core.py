"""Service virtual IPs, the pure parts: the database's refusals mapped to the error taxonomy in
one place, what admission does with ``clusterIP``/``clusterIPs`` before the database allocates,
and the repair loop's reporting and registration."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import asyncpg
import pytest

from app.core import errors
from app.core.kinds import BY_KIND
from app.store.db_errors import refusals, status_of
from workers.loops import Context, registry
from workers.loops.service_ips import REPAIR, Repair, ServiceIpRepair, report

SVC = BY_KIND["Service"]
T0 = datetime(2030, 1, 1, tzinfo=UTC)


def pg_error(**fields: str) -> asyncpg.PostgresError:
    return asyncpg.PostgresError.new({"S": "ERROR", **fields})


# -- the database's refusals --------------------------------------------------------------------


def test_an_invalid_refusal_becomes_a_422_with_its_cause() -> None:
    exc = pg_error(C="QM422", M='Invalid value: "10.0.0.1": out', c="spec.clusterIP",
                   D="FieldValueInvalid")  # fmt: skip
    err = status_of(exc, SVC, "web")
    assert isinstance(err, errors.Invalid) and err.code == 422
    assert err.causes == [
        errors.Cause("spec.clusterIP", "FieldValueInvalid", 'Invalid value: "10.0.0.1": out')
    ]
    body = err.to_status()
    assert body["reason"] == "Invalid" and body["details"]["name"] == "web"
    assert (
        body["message"]
        == 'Service "web" is invalid: spec.clusterIP: Invalid value: "10.0.0.1": out'
    )


def test_a_refusal_without_detail_gets_the_default_reason() -> None:
    err = status_of(pg_error(C="QM422", M="field is immutable", c="spec.clusterIP"), SVC, None)
    assert isinstance(err, errors.Invalid)
    assert err.causes[0].reason == "FieldValueInvalid"
    assert 'Service "(unnamed)" is invalid' in err.message


def test_an_exhausted_range_becomes_a_retryable_503() -> None:
    err = status_of(pg_error(C="QM503", M="no virtual IP is free"), SVC, "web")
    assert isinstance(err, errors.ServiceUnavailable)
    assert err.code == 503 and err.retryable and err.message == "no virtual IP is free"
    failure = errors.classify(err)
    assert failure is not None and failure.kind == errors.ErrorKind.TEMPORARY


@pytest.mark.parametrize("code", ["23505", "40001", "P0001", "QM000", "22P02"])
def test_other_database_errors_are_not_refusals(code: str) -> None:
    exc = pg_error(C=code, M="something else")
    assert status_of(exc, SVC, "web") is None
    with pytest.raises(asyncpg.PostgresError) as caught, refusals(SVC, "web"):
        raise exc
    assert caught.value is exc


def test_refusals_raise_the_mapped_error_from_the_database_one() -> None:
    exc = pg_error(C="QM422", M="m", c="spec.clusterIP")
    with pytest.raises(errors.Invalid) as caught, refusals(SVC, "web"):
        raise exc
    assert caught.value.__cause__ is exc
    assert status_of(ValueError("x"), SVC, "web") is None


# -- admission ----------------------------------------------------------------------------------


def with_ip(valid: Callable[[str], Any], **spec: Any) -> dict[str, Any]:
    obj = valid("Service")
    obj["spec"].update(spec)
    return obj


def test_an_update_that_omits_the_addresses_keeps_both(valid, accept) -> None:  # type: ignore[no-untyped-def]
    old = accept("Service", with_ip(valid, clusterIP="127.100.0.9", clusterIPs=["127.100.0.9"]))
    out = accept("Service", valid("Service"), old)
    assert out["spec"]["clusterIP"] == "127.100.0.9"
    assert out["spec"]["clusterIPs"] == ["127.100.0.9"]


def test_cluster_ips_alone_names_the_address(valid, accept) -> None:  # type: ignore[no-untyped-def]
    out = accept("Service", with_ip(valid, clusterIPs=["127.100.0.9"]))
    assert out["spec"]["clusterIP"] == "127.100.0.9"


@pytest.mark.parametrize(
    "spec",
    [
        {"clusterIPs": ["127.100.0.9", "127.100.0.10"]},
        {"clusterIP": "127.100.0.9", "clusterIPs": ["127.100.0.10"]},
        {"clusterIPs": "127.100.0.9"},
        {"clusterIPs": [9]},
    ],
)
def test_cluster_ips_that_disagree_are_refused(valid, fields_of, spec) -> None:  # type: ignore[no-untyped-def]
    fields = fields_of("Service", with_ip(valid, **spec))
    assert fields and all(f.startswith("spec.clusterIPs") for f in fields), fields


def test_a_patch_of_the_address_alone_is_one_immutability_error(valid, accept, reject) -> None:  # type: ignore[no-untyped-def]
    old = accept("Service", with_ip(valid, clusterIP="127.100.0.9", clusterIPs=["127.100.0.9"]))
    patched = with_ip(valid, clusterIP="127.100.0.10", clusterIPs=["127.100.0.9"])
    causes = reject("Service", patched, old)
    assert [(c.field, c.message) for c in causes] == [("spec.clusterIP", "field is immutable")]
    other = with_ip(valid, clusterIP="127.100.0.9", clusterIPs=["127.100.0.11"])
    assert [c.field for c in reject("Service", other, old)] == ["spec.clusterIP"]


def test_a_change_to_external_name_drops_the_address(valid, accept) -> None:  # type: ignore[no-untyped-def]
    old = accept("Service", with_ip(valid, clusterIP="127.100.0.9", clusterIPs=["127.100.0.9"]))
    for kept in ({}, {"clusterIP": "127.100.0.9", "clusterIPs": ["127.100.0.9"]}):
        new = with_ip(valid, type="ExternalName", externalName="db.example.com", **kept)
        out = accept("Service", new, old)
        assert "clusterIP" not in out["spec"] and "clusterIPs" not in out["spec"]


def test_headless_stays_headless(valid, accept, fields_of) -> None:  # type: ignore[no-untyped-def]
    old = accept("Service", with_ip(valid, clusterIP="None"))
    assert accept("Service", valid("Service"), old)["spec"]["clusterIP"] == "None"
    assert fields_of("Service", with_ip(valid, clusterIP="127.100.0.9"), old) == {"spec.clusterIP"}


# -- the repair loop ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("repair", "level", "words"),
    [
        (Repair(), None, ""),
        (Repair(purged=40), None, ""),
        (Repair(released=2), logging.WARNING, "released 2 held for services that are gone"),
        (Repair(restored=1), logging.WARNING, "restored 1 for services without one"),
        (Repair(duplicates=1, released=3), logging.WARNING, "1 service(s) name a virtual IP"),
    ],
)
def test_report(repair: Repair, level: int | None, words: str) -> None:
    line = report(repair)
    if level is None:
        assert line is None
    else:
        assert line is not None and line[0] == level and words in line[1]


class FakePool:
    def __init__(self, row: dict[str, int] | None) -> None:
        self.row = row
        self.queries: list[str] = []

    async def fetchrow(self, query: str) -> dict[str, int] | None:
        self.queries.append(query)
        return self.row


def ctx_with(pool: FakePool) -> Context:
    return Context(pool, None, lambda: 0.0, lambda: T0)  # type: ignore[arg-type]


async def test_a_pass_calls_the_repair_function_once_and_logs_leaks(
    caplog: pytest.LogCaptureFixture,
) -> None:
    pool = FakePool({"released": 1, "restored": 0, "duplicates": 0, "purged": 5})
    with caplog.at_level(logging.WARNING, logger="workers.loops.service_ips"):
        await ServiceIpRepair().tick(ctx_with(pool))
    assert pool.queries == [REPAIR]
    assert "released 1" in caplog.text
    assert await ServiceIpRepair().repair(ctx_with(FakePool(None))) == Repair()


def test_the_loop_is_registered_with_its_interval(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QM_SERVICE_IP_REPAIR_INTERVAL", "15")
    loops = [loop for loop in registry.build() if isinstance(loop, ServiceIpRepair)]
    assert len(loops) == 1 and loops[0].interval == 15.0 and loops[0].name == "service-ips"
    monkeypatch.delenv("QM_SERVICE_IP_REPAIR_INTERVAL")
    assert ServiceIpRepair.from_env().interval == 60.0
