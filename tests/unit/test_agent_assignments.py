"""The pods bound to a node: the map folded from list and watch events, the source's relist
on 410 and its behaviour while the API is away (with a scripted client), and the fit check."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from agent.api import Unreachable
from agent.assignments import (
    AssignmentMap,
    AssignmentSource,
    backoff,
    check_fit,
    pod_requests,
    refusal_status,
)
from agent.machine import Resources
from app.core.errors import Gone

GI = 1024**3


def pod(
    uid: str,
    node: str = "n1",
    rv: str = "1",
    cpu: str = "0",
    mem: str = "0",
    created: str = "2024-01-01T00:00:00Z",
    phase: str = "Pending",
    **meta: Any,
) -> dict[str, Any]:
    return {
        "metadata": {
            "uid": uid,
            "name": f"p-{uid}",
            "namespace": "ns",
            "resourceVersion": rv,
            "creationTimestamp": created,
            **meta,
        },
        "spec": {
            "nodeName": node,
            "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": mem}}}],
        },
        "status": {"phase": phase},
    }


def ev(kind: str, obj: dict[str, Any]) -> dict[str, Any]:
    return {"type": kind, "object": obj}


def test_map_folds_added_modified_deleted_and_bookmarks() -> None:
    m = AssignmentMap("n1")
    m.relist([pod("a"), pod("b"), pod("x", node="n2")], "10")
    assert set(m.pods) == {"a", "b"} and m.revision == "10"
    assert m.apply(ev("ADDED", pod("c", rv="11")))
    assert m.apply(ev("MODIFIED", pod("a", rv="12", deletionTimestamp="2024-01-01T00:01:00Z")))
    assert m.pods["a"]["metadata"]["deletionTimestamp"]
    assert m.apply(ev("DELETED", pod("b", rv="13")))
    assert not m.apply(ev("DELETED", pod("b", rv="14")))  # already gone: no change
    assert not m.apply(ev("BOOKMARK", {"metadata": {"resourceVersion": "20"}}))
    assert set(m.pods) == {"a", "c"} and m.revision == "20"


def test_map_drops_a_pod_no_longer_bound_here() -> None:
    m = AssignmentMap("n1")
    m.relist([pod("a")], "1")
    assert m.apply(ev("MODIFIED", pod("a", node="n2", rv="2")))
    assert m.pods == {}
    assert not m.apply(ev("ADDED", pod("z", node="n3", rv="3")))


class ScriptedApi:
    """Answers ``list`` and ``watch`` from queues of results (an exception is raised)."""

    def __init__(self) -> None:
        self.lists: list[Any] = []
        self.watches: list[Any] = []
        self.watched_from: list[str] = []

    def list_items(self, kind: Any, ns: Any, *, field_selector: str = "") -> tuple[list[Any], str]:
        assert field_selector == "spec.nodeName=n1"
        r = self.lists.pop(0)
        if isinstance(r, Exception):
            raise r
        return r  # type: ignore[no-any-return]

    def watch(self, kind: Any, ns: Any, rv: str, **kw: Any) -> Iterator[dict[str, Any]]:
        self.watched_from.append(rv)
        script = self.watches.pop(0)
        for item in script:
            if isinstance(item, Exception):
                raise item
            yield item


def source(api: ScriptedApi) -> AssignmentSource:
    return AssignmentSource(api, "n1", monotonic=lambda: 0.0, jitter=lambda: 1.0)  # type: ignore[arg-type]


def test_source_lists_watches_and_relists_on_gone() -> None:
    api = ScriptedApi()
    api.lists = [([pod("a"), pod("b")], "5"), ([pod("b", rv="30"), pod("d", rv="31")], "31")]
    api.watches = [[ev("DELETED", pod("a", rv="6")), Gone("too old")]]
    s = source(api)
    assert s.step() == 0.0 and s.listed and set(s.snapshot()) == {"a", "b"}
    assert s.changed.is_set()
    assert s.step() == 0.0  # the watch: a deleted, then 410
    assert api.watched_from == ["5"] and s.needs_list and set(s.snapshot()) == {"b"}
    assert s.step() == 0.0  # the relist replaces the whole map
    assert set(s.snapshot()) == {"b", "d"} and s.map.revision == "31" and not s.needs_list


def test_source_keeps_the_last_set_while_unreachable_and_relists_on_return() -> None:
    api = ScriptedApi()
    api.lists = [
        ([pod("a"), pod("b")], "5"),
        Unreachable("refused"),
        Unreachable("refused"),
        ([pod("b", rv="40")], "40"),  # a was reassigned while the API was away
    ]
    api.watches = [[ev("ADDED", pod("c", rv="6")), Unreachable("reset by peer")]]
    s = source(api)
    s.step()
    delays = [s.step(), s.step(), s.step()]
    assert delays == [backoff(1), backoff(2), backoff(3)] == [0.5, 1.0, 2.0]
    assert set(s.snapshot()) == {"a", "b", "c"} and s.failures == 3
    assert s.step() == 0.0 and s.failures == 0
    assert set(s.snapshot()) == {"b"}


def test_first_list_failing_leaves_the_source_unlisted() -> None:
    api = ScriptedApi()
    api.lists = [Unreachable("refused")]
    s = source(api)
    assert s.step() == 0.5 and not s.listed and s.snapshot() == {}


def test_run_stops_on_the_event() -> None:
    api = ScriptedApi()
    api.lists = [([pod("a")], "1")]
    stop = threading.Event()

    def bookmark_then_stop() -> Iterator[Any]:
        yield ev("BOOKMARK", {"metadata": {"resourceVersion": "2"}})
        stop.set()
        yield ev("BOOKMARK", {"metadata": {"resourceVersion": "3"}})
        raise AssertionError("the source read on after being stopped")

    api.watches = [bookmark_then_stop()]
    s = source(api)
    s.run(stop)  # would raise had it read past the event in hand when the stop came
    assert s.map.revision == "3" and api.watches == []


def test_backoff_is_capped_at_the_lease_period() -> None:
    assert backoff(0) == 0.0 and backoff(10) == 10.0 and backoff(100) == 10.0


def test_a_backoff_wait_is_jittered() -> None:
    api = ScriptedApi()
    api.lists = [Unreachable("refused"), Unreachable("refused")]
    s = AssignmentSource(api, "n1", jitter=lambda: 1.2)  # type: ignore[arg-type]
    assert s.step() == 0.5 * 1.2 and s.step() == 1.0 * 1.2


def test_a_poke_cuts_the_backoff_short() -> None:
    api = ScriptedApi()
    api.lists = [Unreachable("refused")] * 4 + [([pod("a")], "7")]
    stop = threading.Event()
    backoffs: list[float] = []
    waiting = threading.Event()

    def wait(poked: threading.Event, seconds: float) -> bool:
        backoffs.append(seconds)
        waiting.set()
        return poked.wait(seconds)  # the real wait: only the poke can end it within the test

    s = AssignmentSource(api, "n1", jitter=lambda: 100.0, wait=wait)  # type: ignore[arg-type]
    for _ in range(4):
        s.step()  # four failures: the next wait would be 400 s

    def quiet_until_stopped() -> Iterator[Any]:
        stop.wait(5)
        yield from ()

    api.watches = [quiet_until_stopped()]
    thread = threading.Thread(target=s.run, args=(stop,), daemon=True)
    api.lists.insert(0, Unreachable("refused"))
    thread.start()
    assert waiting.wait(30)
    assert not s.listed and backoffs == [800.0]  # waiting out the fifth failure's backoff
    s.poke()
    assert s.changed.wait(30)  # listed long before the 800 s were out
    stop.set()
    s.poke()
    thread.join(30)
    assert s.listed and set(s.snapshot()) == {"a"} and backoffs == [800.0]
    assert not thread.is_alive()


# -- fit ---------------------------------------------------------------------------------------

NODE = Resources(4000, 8 * GI, 3)


def test_requests_count_init_containers_as_the_largest_step() -> None:
    p = pod("a", cpu="500m", mem="1Gi")
    p["spec"]["containers"].append({"name": "d", "resources": {"requests": {"cpu": "250m"}}})
    assert pod_requests(p) == (750, GI)
    p["spec"]["initContainers"] = [{"name": "i", "resources": {"requests": {"cpu": "2"}}}]
    assert pod_requests(p) == (2000, GI)
    p["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "bogus"
    assert pod_requests(p)[0] == 2000


@pytest.mark.parametrize(
    ("pods", "admitted", "accept", "refuse"),
    [
        pytest.param(
            [pod("a", cpu="2"), pod("b", cpu="2", created="2024-01-02T00:00:00Z")],
            set(),
            ["a", "b"],
            [],
            id="exactly-full",
        ),
        pytest.param(
            [pod("old", cpu="3"), pod("new", cpu="2", created="2024-01-02T00:00:00Z")],
            set(),
            ["old"],
            [("new", "OutOfcpu")],
            id="oldest-first",
        ),
        pytest.param(
            [pod("run", cpu="3", created="2024-02-01T00:00:00Z"), pod("older", cpu="2")],
            {"run"},
            [],
            [("older", "OutOfcpu")],
            id="admitted-charged-first",
        ),
        pytest.param(
            [pod("m", mem="9Gi")],
            set(),
            [],
            [("m", "OutOfmemory")],
            id="memory",
        ),
        pytest.param(
            [pod(str(i), created=f"2024-01-0{i + 1}T00:00:00Z") for i in range(4)],
            set(),
            ["0", "1", "2"],
            [("3", "OutOfpods")],
            id="pod-count",
        ),
        pytest.param(
            [pod("done", cpu="4", phase="Succeeded"), pod("b", cpu="4")],
            {"done"},
            ["b"],
            [],
            id="terminal-holds-nothing",
        ),
        pytest.param(
            [pod("going", cpu="9", deletionTimestamp="2024-01-01T00:00:00Z")],
            set(),
            [],
            [],
            id="terminating-not-admitted",
        ),
    ],
)
def test_fit(
    pods: list[dict[str, Any]],
    admitted: set[str],
    accept: list[str],
    refuse: list[tuple[str, str]],
) -> None:
    ok, refused = check_fit(pods, NODE, admitted)
    assert ok == accept
    assert [(r.uid, r.reason) for r in refused] == refuse


def test_refusal_status_reads_like_kubelet() -> None:
    _, [r] = check_fit([pod("big", cpu="5")], NODE, set())
    assert refusal_status(r) == {
        "phase": "Failed",
        "reason": "OutOfcpu",
        "message": "Pod was rejected: Node didn't have enough resource: cpu, requested: 5000, "
        "used: 0, capacity: 4000",
    }
    assert (r.namespace, r.name) == ("ns", "p-big")
