"""Which keys the dispatcher enqueues for a batch of changes, and for the list it starts from."""

from __future__ import annotations

from typing import Any

from app.stream.informer import Change
from workers.dispatch import NamespaceIndex, keys_of


def change(kind: str, namespace: str, name: str, **meta: Any) -> Change:
    obj = {"kind": kind, "metadata": {"namespace": namespace, "name": name, **meta}}
    return Change(1, kind, "A", "u-" + name, namespace, name, 1, obj)


OWNED_POD = change(
    "Pod", "web", "web-1",
    ownerReferences=[{"kind": "ReplicaSet", "name": "web-rs", "controller": True}],
)  # fmt: skip


def test_a_change_wakes_the_object_and_its_controlling_owner() -> None:
    batch = [change("Node", "", "node-1"), OWNED_POD, change("Job", "batch", "j")]
    assert keys_of(batch) == [
        ("Node", "", "node-1"),
        ("ReplicaSet", "web", "web-rs"),
        ("Job", "batch", "j"),
    ]


def test_the_initial_list_leaves_ticked_kinds_to_their_tick() -> None:
    listed = [change("Node", "", f"node-{i}") for i in range(3)] + [OWNED_POD]
    assert keys_of(listed, listed=True) == [("ReplicaSet", "web", "web-rs")]
    # A node that changes afterwards is still looked at at once.
    assert keys_of([change("Node", "", "node-1")]) == [("Node", "", "node-1")]


def test_a_pod_change_wakes_the_selecting_objects_of_its_namespace() -> None:
    index = NamespaceIndex()
    keys_of([change("ResourceQuota", "web", "q")], index)
    assert keys_of([OWNED_POD], index) == [
        ("ResourceQuota", "web", "q"),
        ("ReplicaSet", "web", "web-rs"),
    ]
