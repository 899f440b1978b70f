"""The garbage collector's and the namespace controller's pure decisions."""

from __future__ import annotations

import pytest

from app.core.controllers import garbage as gc
from app.core.controllers import namespace as ns
from app.stream.informer import Change
from workers.dispatch import garbage_key


@pytest.mark.parametrize(
    ("kind", "spec", "phase", "grace", "expected"),
    [
        ("Pod", {}, None, None, None),  # not on a node: goes now
        ("Pod", {"nodeName": "n"}, "Running", None, 30),
        ("Pod", {"nodeName": "n", "terminationGracePeriodSeconds": 5}, None, None, 5),
        ("Pod", {"nodeName": "n"}, None, 0, None),  # forced
        ("Pod", {"nodeName": "n"}, "Succeeded", None, None),  # finished: nothing to stop
        ("Pod", {"nodeName": "n"}, "Failed", 10, None),
        ("ConfigMap", {"nodeName": "n"}, None, None, None),
    ],
)
def test_graceful_seconds(kind, spec, phase, grace, expected) -> None:  # type: ignore[no-untyped-def]
    assert gc.graceful_seconds(kind, spec, phase, grace) == expected


def test_split_sorts_a_batch() -> None:
    plain = gc.Candidate("a", 1)
    held = gc.Candidate("b", 2, finalizers=("x/y",))
    running = gc.Candidate("c", 3, grace=30)
    shared = gc.Candidate("d", 4, finalizers=("x/y",), shared=True)
    batch = gc.split([plain, held, running, shared])
    assert batch.delete == (plain,)
    assert batch.mark == (held, running)
    assert batch.release == (shared,)
    assert len(batch) == 4


@pytest.mark.parametrize(
    ("owner", "expected"),
    [
        (None, gc.Intent.COLLECT),
        (gc.OwnerView(False, ()), gc.Intent.NOTHING),
        (gc.OwnerView(False, (gc.FOREGROUND,)), gc.Intent.NOTHING),  # not being deleted
        (gc.OwnerView(True, (gc.FOREGROUND, "x/y")), gc.Intent.FOREGROUND),
        (gc.OwnerView(True, ()), gc.Intent.FINISH),
        (gc.OwnerView(True, (), grace=30), gc.Intent.NOTHING),  # its node confirms
        (gc.OwnerView(True, ("x/y",)), gc.Intent.COLLECT),  # held, but its dependents go
    ],
)
def test_intent(owner, expected) -> None:  # type: ignore[no-untyped-def]
    assert gc.intent(owner) is expected


@pytest.mark.parametrize(
    ("what", "swept", "expected"),
    [
        (gc.Intent.COLLECT, gc.Swept(True, 0), gc.GcPlan(requeue_after=0.0)),
        (gc.Intent.COLLECT, gc.Swept(False, 0), gc.GcPlan()),
        (gc.Intent.COLLECT, gc.Swept(False, 0, missed=True), gc.GcPlan(requeue_after=1.0)),
        (gc.Intent.FOREGROUND, gc.Swept(True, 0), gc.GcPlan(requeue_after=0.0)),
        (gc.Intent.FOREGROUND, gc.Swept(False, 3), gc.GcPlan(requeue_after=gc.WAIT_SECONDS)),
        (gc.Intent.FOREGROUND, gc.Swept(False, 0), gc.GcPlan(finish=True)),
        (gc.Intent.FINISH, gc.Swept(False, 0), gc.GcPlan(finish=True)),
        (gc.Intent.NOTHING, gc.Swept(False, 0), gc.GcPlan()),
    ],
)
def test_after_sweep(what, swept, expected) -> None:  # type: ignore[no-untyped-def]
    assert gc.after_sweep(what, swept) == expected


def test_key_names_round_trip() -> None:
    assert gc.parse_key_name(gc.key_name("Job", "1234")) == ("Job", "1234")


def _change(kind: str, op: str, **meta: object) -> Change:
    return Change(1, kind, op, "u1", "ns", "x", 1, {"metadata": meta})


@pytest.mark.parametrize(
    ("change", "wanted"),
    [
        (_change("Job", "D"), True),
        (_change("ConfigMap", "D"), True),
        (_change("Pod", "D"), False),  # pods own nothing: no key per deleted pod
        (_change("Job", "M"), False),
        (_change("Job", "M", deletionTimestamp="t", finalizers=[gc.FOREGROUND]), True),
        (_change("Job", "M", deletionTimestamp="t", finalizers=["x/y"]), True),
        (_change("ConfigMap", "M", deletionTimestamp="t"), True),  # nothing holds it
        (_change("Pod", "M", deletionTimestamp="t"), False),  # its node confirms
        (_change("Pod", "M", deletionTimestamp="t", finalizers=[gc.FOREGROUND]), True),
    ],
)
def test_the_dispatcher_enqueues_the_collector_for_owners(change, wanted) -> None:  # type: ignore[no-untyped-def]
    key = garbage_key(change)
    assert (key == ("Garbage", "ns", gc.key_name(change.kind, "u1"))) if wanted else key is None


# ------------------------------------------------------------------------ namespaces


def _cond(status: dict, kind: str) -> dict:  # type: ignore[type-arg]
    [found] = [c for c in status["conditions"] if c["type"] == kind]
    return found


def test_an_empty_namespace_goes_with_every_condition_false() -> None:
    plan = ns.reconcile({"status": {"phase": "Terminating"}}, ns.Contents(), 100.0)
    assert plan.finalize and plan.requeue_after is None
    assert plan.status is not None
    for kind in (ns.CONTENT_FAILURE, ns.CONTENT_REMAINING, ns.FINALIZERS_REMAINING):
        assert _cond(plan.status, kind)["status"] == "False"


def test_what_is_left_is_said_and_looked_at_again() -> None:
    left = ns.Contents(remaining={"pods": 3, "configmaps": 0, "secrets": 1},
                       finalizers={"example.com/hold": 1})  # fmt: skip
    plan = ns.reconcile({"status": {"phase": "Active"}}, left, 100.0)
    assert not plan.finalize and plan.requeue_after == gc.WAIT_SECONDS
    assert plan.status is not None and plan.status["phase"] == "Terminating"
    remaining = _cond(plan.status, ns.CONTENT_REMAINING)
    assert remaining["status"] == "True" and remaining["reason"] == "SomeResourcesRemain"
    assert remaining["message"] == (
        "Some resources are remaining: pods. has 3 resource instances,"
        " secrets. has 1 resource instances"
    )
    held = _cond(plan.status, ns.FINALIZERS_REMAINING)
    assert held["message"] == (
        "Some content in the namespace has finalizers remaining:"
        " example.com/hold in 1 resource instances"
    )
    # The same state again writes nothing.
    again = ns.reconcile({"status": plan.status}, left, 200.0)
    assert again.status is None


def test_a_sweep_cut_short_is_requeued_at_once_and_failures_are_told() -> None:
    plan = ns.reconcile({}, ns.Contents(remaining={"pods": 9}, more=True,
                                        failures=("pods: boom",)), 1.0)  # fmt: skip
    assert plan.requeue_after == 0.0 and not plan.finalize
    assert plan.status is not None
    failed = _cond(plan.status, ns.CONTENT_FAILURE)
    assert failed["status"] == "True" and "pods: boom" in failed["message"]
    assert not ns.Contents(more=True).empty
