"""A Deployment's revisions, undo, restart, pause and rollout state as pure values."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from app.core import rollout

UID = "dep-uid"


def _template(image: str, **extra_labels: str) -> dict[str, Any]:
    return {"metadata": {"labels": {"app": "web", **extra_labels}},
            "spec": {"containers": [{"name": "web", "image": image}]}}  # fmt: skip


def _dep(image: str = "web:2", **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "web", "namespace": "ns", "uid": UID, "generation": 1},
            "spec": {"replicas": 3, "template": _template(image), **spec},
            "status": {}}  # fmt: skip


def _rs(name: str, revision: str, image: str, owner: str = UID, **annotations: str) -> Any:
    return {
        "metadata": {"name": name, "creationTimestamp": "2026-01-01T00:00:00Z",
                     "annotations": {rollout.REVISION: revision, **annotations},
                     "ownerReferences": [{"uid": owner, "controller": True}]},
        "spec": {"replicas": 1, "template": _template(image, **{"pod-template-hash": name})},
    }  # fmt: skip


SETS = [
    _rs("web-b", "2", "web:2"),
    _rs("web-a", "1", "web:1", **{rollout.CHANGE_CAUSE: "first"}),
    _rs("other", "7", "web:9", owner="someone-else"),
    _rs("bad", "x", "web:0"),
]


def test_revisions_are_the_controlled_replicasets_oldest_first() -> None:
    kept = rollout.revisions(_dep(), SETS)
    assert [(r.number, r.name) for r in kept] == [(1, "web-a"), (2, "web-b")]
    first = kept[0]
    assert first.images == ["web:1"] and first.change_cause == "first"
    assert first.replicas == 1 and first.created == "2026-01-01T00:00:00Z"
    assert "pod-template-hash" not in first.template["metadata"]["labels"]
    assert first.configs == []


@pytest.mark.parametrize(("to", "name"), [(0, "web-a"), (1, "web-a"), (2, "web-b")])
def test_pick_a_revision_or_the_previous_one(to: int, name: str) -> None:
    assert rollout.pick(rollout.revisions(_dep(), SETS), to).name == name


def test_pick_refuses_what_is_not_kept() -> None:
    kept = rollout.revisions(_dep(), SETS)
    with pytest.raises(rollout.NoSuchRevision, match="revision 5"):
        rollout.pick(kept, 5)
    with pytest.raises(rollout.NoSuchRevision, match="no previous"):
        rollout.pick(kept[:1])


def test_rolling_back_puts_the_template_back_without_the_hash_label() -> None:
    dep = _dep("web:2")
    back = rollout.rolled_back(dep, rollout.revisions(dep, SETS), 1)
    assert back is not None and back["spec"]["template"] == _template("web:1")
    assert dep["spec"]["template"] == _template("web:2")  # the input is left alone
    assert rollout.rolled_back(dep, rollout.revisions(dep, SETS), 2) is None


def test_restart_stamps_the_template_with_the_time_given() -> None:
    now = datetime(2026, 3, 4, 5, 6, 7, tzinfo=UTC)
    out = rollout.restarted(_dep(), now)
    assert out["spec"]["template"]["metadata"]["annotations"] == {
        rollout.RESTARTED_AT: "2026-03-04T05:06:07Z"}  # fmt: skip


def test_pause_and_resume_change_only_what_differs() -> None:
    paused = rollout.with_paused(_dep(), True)
    assert paused is not None and paused["spec"]["paused"] is True
    assert rollout.with_paused(paused, True) is None
    assert rollout.with_paused(_dep(), False) is None
    resumed = rollout.with_paused(paused, False)
    assert resumed is not None and resumed["spec"]["paused"] is False


def _with_status(conditions: list[dict[str, Any]], **status: Any) -> dict[str, Any]:
    dep = _dep()
    dep["status"] = {"observedGeneration": 1, "conditions": conditions, **status}
    return dep


DEADLINE = {"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded",
            "message": 'ReplicaSet "web-b" has timed out progressing.'}  # fmt: skip


@pytest.mark.parametrize(
    ("dep", "state", "words"),
    [
        (_with_status([DEADLINE]), "failed", "exceeded its progress deadline"),
        (_with_status([], updatedReplicas=1, replicas=3), "waiting", "1 out of 3 new"),
        (_with_status([], updatedReplicas=3, replicas=4), "waiting", "1 old replicas"),
        (_with_status([], updatedReplicas=3, replicas=3, availableReplicas=2), "waiting",
         "2 of 3 updated"),
        (_with_status([], updatedReplicas=3, replicas=3, availableReplicas=3), "done",
         "successfully rolled out"),
        (_dep(), "waiting", "spec update to be observed"),
    ],
)  # fmt: skip
def test_rollout_state(dep: dict[str, Any], state: str, words: str) -> None:
    got, line = rollout.rollout_state(dep)
    assert got == state and words in line


def test_a_stalled_rollout_is_told_by_its_progressing_condition() -> None:
    assert rollout.stalled(_with_status([DEADLINE]))["reason"] == "ProgressDeadlineExceeded"
    ok = {"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable"}
    assert rollout.stalled(_with_status([ok])) == {}
    assert rollout.stalled(_dep()) == {}
