"""A pod bound to a node name while that node registers is counted exactly once in
``nodes_allocated``, whichever of the two transactions commits first (migration 0005)."""

from __future__ import annotations

import json
import threading
import uuid
from typing import Any

import psycopg
import pytest

POD_SPEC = {"containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": "250m"}}}]}


def _insert_pod(db: psycopg.Connection[Any], node: str) -> None:
    db.execute(
        "INSERT INTO pods (uid, namespace, name, spec) VALUES (%s, 'race', %s, %s)",
        (uuid.uuid4(), f"p-{uuid.uuid4().hex[:8]}", json.dumps({**POD_SPEC, "nodeName": node})),
    )


def _insert_node(db: psycopg.Connection[Any], node: str) -> None:
    db.execute("INSERT INTO nodes (uid, name, spec) VALUES (%s, %s, '{}')", (uuid.uuid4(), node))


def _allocated(url: str, node: str) -> tuple[int, int]:
    with psycopg.connect(url, autocommit=True) as db:
        row = db.execute(
            "SELECT a.cpu_milli, a.pods FROM nodes_allocated a JOIN nodes n ON n.uid = a.node_uid"
            " WHERE n.name = %s",
            (node,),
        ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


@pytest.mark.parametrize("first", ["pod", "node"])
def test_a_pod_and_its_node_committed_in_either_order_count_once(pg_url: str, first: str) -> None:
    node = f"race-{first}-{uuid.uuid4().hex[:6]}"
    with psycopg.connect(pg_url) as a, psycopg.connect(pg_url) as b:
        # ``a`` writes first and holds its transaction open; ``b`` writes meanwhile (and may
        # wait on ``a``), then ``a`` commits.
        (_insert_pod if first == "pod" else _insert_node)(a, node)
        second = _insert_node if first == "pod" else _insert_pod
        done = threading.Event()

        def other() -> None:
            second(b, node)
            b.commit()
            done.set()

        thread = threading.Thread(target=other)
        thread.start()
        done.wait(0.5)  # b blocks on a's lock here, or finishes first: both must come out right
        a.commit()
        thread.join(timeout=10)
        assert done.is_set()
    assert _allocated(pg_url, node) == (250, 1)
