"""The node lifecycle controller as a pure function, driven tick by tick on a fake monotonic
clock: the unreachable and eviction schedule, liveness from row versions only, zone
disruption, return, flapping, the at-most-one rule, failover, and the fixpoint (every tick
below also checks that reconciling the state a plan produced asks for nothing)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import pytest

from app.core.controllers.nodelifecycle import (
    Config,
    NodePlan,
    NodeView,
    PodView,
    Seen,
    State,
    reconcile,
    take,
    track,
)

WALL0 = 1_800_000_000.0


@dataclass
class Sim:
    """A cluster the plans are applied to in memory, as the shell applies them to the store."""

    cfg: Config
    nodes: dict[str, NodeView] = field(default_factory=dict)
    leases: dict[str, int] = field(default_factory=dict)
    epochs: dict[str, int] = field(default_factory=dict)
    seen: dict[str, Seen] = field(default_factory=dict)
    state: State = field(default_factory=State)
    now: float = 500.0
    evicted: dict[str, float] = field(default_factory=dict)  # pod name -> when
    notes: list[tuple[float, str, str]] = field(default_factory=list)  # (when, node, reason)

    def add(self, name: str, zone: str = "a", pods: int = 2, at_most_one: int = 0) -> None:
        views = [PodView("ns", f"{name}-p{i}", f"{name}-u{i}") for i in range(pods)]
        views += [
            PodView("ns", f"{name}-amo{i}", f"{name}-amo-u{i}", at_most_one=True)
            for i in range(at_most_one)
        ]
        self.nodes[name] = NodeView(name, f"uid-{name}", zone, pods=tuple(views))
        self.leases[name] = 1
        self.epochs[name] = 0

    def renew(self, name: str) -> None:
        self.leases[name] += 1

    def wall(self) -> float:
        return WALL0 + self.now

    def views(self) -> list[NodeView]:
        out = []
        for v in self.nodes.values():
            s = self.seen.get(v.name)
            silence = None if s is None else self.now - s.at
            out.append(replace(v, silence=silence, renewed=bool(s and s.renewed)))
        return out

    def tick(self, seconds: float = 1.0) -> NodePlan:
        self.now += seconds
        self.seen = track(self.seen, self.leases, self.now)
        plan = reconcile(self.views(), self.state, self.cfg, self.now, self.wall())
        self.state = plan.state
        self.apply(plan)
        again = reconcile(self.views(), self.state, self.cfg, self.now, self.wall())
        assert again.empty, f"not a fixpoint at {self.now}: {again}"
        return plan

    def apply(self, plan: NodePlan) -> None:
        for c in plan.changes:
            v = self.nodes[c.name]
            if c.bump_epoch:
                self.epochs[c.name] += 1
                self.leases[c.name] += 1  # my own write: the shell records it as seen
                self.seen[c.name] = replace(self.seen[c.name], row_version=self.leases[c.name])
            if c.taint is not None:
                v = replace(v, unreachable_taint=c.taint)
            if c.repair:
                v = replace(v, repair_taint=True)
            if c.silences is not None:
                v = replace(v, silences=c.silences)
            if c.ready is not None:
                v = replace(v, ready_unknown=c.ready == "Unknown")
            self.nodes[c.name] = v
        unready = {a.uid for a in plan.unready}
        gone = {a.uid for a in plan.evict}
        for a in plan.evict:
            self.evicted[a.name] = self.now
        for name, v in self.nodes.items():
            pods = tuple(
                replace(p, unready=p.unready or p.uid in unready)
                for p in v.pods
                if p.uid not in gone
            )
            self.nodes[name] = replace(v, pods=pods)
        self.notes += [(self.now, n.node, n.reason) for n in plan.notes]

    def run(self, seconds: int, renewing: tuple[str, ...] = ()) -> None:
        """Advance second by second; the ``renewing`` nodes renew every 10 s (or faster when
        the configuration is shorter)."""
        every = max(1, min(10, int(self.cfg.unreachable_after) // 2))
        for _ in range(seconds):
            if int(self.now) % every == 0:
                for name in renewing:
                    self.renew(name)
            self.tick()

    def first(self, node: str, reason: str) -> float | None:
        return next((t for t, n, r in self.notes if n == node and r == reason), None)


def cluster(cfg: Config, healthy: int = 19, zone: str = "a", **pods: int) -> Sim:
    sim = Sim(cfg)
    sim.add("silent", zone, **pods)
    for i in range(healthy):
        sim.add(f"ok{i}", zone)
    sim.tick()  # first read: every lease seen
    return sim


def healthy(sim: Sim) -> tuple[str, ...]:
    return tuple(n for n in sim.nodes if n != "silent")


START = 501.0  # the clock at the first read


@pytest.mark.parametrize(
    ("cfg", "unreachable_at", "evict_at", "amo_at"),
    [
        (Config(), 40, 100, 100),
        (Config(unreachable_after=5, evict_after=5), 5, 10, 75),
        (
            Config(
                unreachable_after=20,
                evict_after=10,
                lease_duration=20,
                agent_self_kill=15,
                margin=2,
            ),
            20,
            30,
            37,
        ),
        (Config(lease_duration=60, agent_self_kill=50, margin=5), 40, 100, 115),
    ],
)
def test_the_schedule(cfg: Config, unreachable_at: int, evict_at: int, amo_at: int) -> None:
    sim = cluster(cfg, pods=2, at_most_one=1)
    sim.run(130, renewing=healthy(sim))
    assert sim.first("silent", "NodeNotReady") == START + unreachable_at
    assert sim.epochs["silent"] == 1
    assert all(sim.epochs[n] == 0 for n in healthy(sim))
    assert sim.nodes["silent"].unreachable_taint
    assert sim.evicted["silent-p0"] == sim.evicted["silent-p1"] == START + evict_at
    assert sim.evicted["silent-amo0"] == START + amo_at
    assert not any(n.startswith("ok") for n in sim.evicted)
    assert sim.notes.count((START + evict_at, "silent", "PodsEvicted")) == 1


def test_pods_are_marked_not_ready_when_the_node_is_marked_unreachable() -> None:
    sim = cluster(Config(), pods=3)
    sim.run(39, renewing=healthy(sim))
    assert not any(p.unready for p in sim.nodes["silent"].pods)
    assert not sim.nodes["silent"].ready_unknown
    plan = sim.tick()
    assert {a.name for a in plan.unready} == {"silent-p0", "silent-p1", "silent-p2"}
    assert sim.nodes["silent"].ready_unknown
    assert [c.name for c in plan.changes] == ["silent"]


def test_liveness_comes_only_from_row_version_changes() -> None:
    """The controller never reads renewTime: a lease that is not rewritten is silence, however
    far ahead the machine's clock wrote its last renewTime; one that is rewritten is life."""
    seen = track({}, {"n": 7}, 100.0)
    assert seen["n"] == Seen(7, 100.0, False)
    assert track(seen, {"n": 7}, 150.0)["n"].at == 100.0  # same version: no renewal
    assert track(seen, {"n": 8}, 150.0)["n"] == Seen(8, 150.0, True)
    assert track(seen, {}, 150.0)["n"].at == 100.0  # a vanished lease stays silent
    sim = cluster(Config(), pods=1)
    sim.run(300, renewing=healthy(sim))
    assert all(not sim.nodes[n].unreachable_taint for n in healthy(sim))
    assert sim.nodes["silent"].unreachable_taint


def test_a_node_without_a_lease_is_not_monitored() -> None:
    sim = cluster(Config(), pods=1)
    del sim.leases["silent"]
    sim.seen.pop("silent")
    sim.run(200, renewing=healthy(sim))
    assert sim.notes == [] and sim.evicted == {}


def test_a_zone_wide_silence_trickles_and_warns_once() -> None:
    cfg = Config(unreachable_after=4, evict_after=6)
    sim = Sim(cfg)
    for i in range(10):
        sim.add(f"n{i}", "east")
    sim.tick()
    live = tuple(f"n{i}" for i in range(5, 10))
    sim.run(10 + 60, renewing=live)
    evicted_nodes = {name.split("-")[0] for name in sim.evicted}
    # 5 of 10 silent: one node at once, then 3 a minute (one every 20 s) over 60 s.
    assert len(evicted_nodes) == 4
    times = sorted({t for t in sim.evicted.values()})
    assert [t - times[0] for t in times] == [0.0, 20.0, 40.0, 60.0]
    zone_notes = [(t, n) for t, n, r in sim.notes if r == "ZoneDisruption"]
    assert len(zone_notes) == 1
    assert not evicted_nodes & set(live)


def test_a_small_silence_in_a_big_zone_evicts_at_the_normal_rate() -> None:
    sim = Sim(Config())
    for i in range(100):
        sim.add(f"n{i:02}", "west")
    sim.tick()
    silent = [f"n{i:02}" for i in range(5)]
    sim.run(100, renewing=tuple(n for n in sim.nodes if n not in silent))
    assert {name.split("-")[0] for name in sim.evicted} == set(silent)
    assert len(set(sim.evicted.values())) == 1  # all in one tick: 10 nodes a second allowed
    assert not [r for _t, _n, r in sim.notes if r == "ZoneDisruption"]


def test_zones_are_judged_apart_and_a_silent_cluster_pauses() -> None:
    sim = Sim(Config(unreachable_after=4, evict_after=6))
    for i in range(3):
        sim.add(f"a{i}", "a")
        sim.add(f"b{i}", "b")
    sim.tick()
    sim.run(20, renewing=("b0", "b1", "b2"))  # zone a entirely silent
    assert {name.split("-")[0] for name in sim.evicted} == {"a0"}  # then the trickle
    everything = Sim(Config(unreachable_after=4, evict_after=6))
    for i in range(3):
        everything.add(f"a{i}", "a")
    everything.tick()
    everything.run(60)
    assert everything.evicted == {}  # nobody renews: more likely our view than the machines
    assert all(everything.nodes[n].unreachable_taint for n in everything.nodes)


def test_a_node_returning_before_eviction_keeps_its_pods_and_loses_its_taint() -> None:
    sim = cluster(Config(), pods=2)
    sim.run(60, renewing=healthy(sim))
    assert sim.nodes["silent"].unreachable_taint
    sim.renew("silent")
    plan = sim.tick()
    assert [(c.taint, c.ready) for c in plan.changes] == [(False, "True")]
    assert ("silent", "NodeReady") in [(n, r) for _t, n, r in sim.notes]
    sim.run(200, renewing=(*healthy(sim), "silent"))
    assert not sim.nodes["silent"].unreachable_taint
    assert len(sim.nodes["silent"].pods) == 2 and sim.evicted == {}
    assert sim.epochs["silent"] == 1  # fenced once: the agent reads the new epoch


@pytest.mark.parametrize(("gap", "repair"), [(600, True), (1800, False)])
def test_three_silences_within_an_hour_send_the_node_to_repair(gap: int, repair: bool) -> None:
    sim = cluster(Config(), healthy=3, pods=0)
    for episode in range(3):
        sim.run(50, renewing=healthy(sim))  # silent long enough to be marked
        assert sim.nodes["silent"].unreachable_taint, episode
        sim.renew("silent")
        sim.run(gap, renewing=(*healthy(sim), "silent"))
        assert not sim.nodes["silent"].unreachable_taint
    assert sim.nodes["silent"].repair_taint is repair
    assert (sim.first("silent", "NodeFlapping") is not None) is repair
    assert len(sim.nodes["silent"].silences) == (3 if repair else 2)


def test_the_repair_taint_is_only_added_once_and_never_removed() -> None:
    sim = cluster(Config(), pods=0)
    sim.nodes["silent"] = replace(
        sim.nodes["silent"], repair_taint=True, silences=(sim.wall() - 100, sim.wall() - 50)
    )
    sim.run(50, renewing=healthy(sim))
    assert sim.first("silent", "NodeFlapping") is None  # already there: no second page
    sim.renew("silent")
    sim.run(5, renewing=(*healthy(sim), "silent"))
    assert sim.nodes["silent"].repair_taint and not sim.nodes["silent"].unreachable_taint


def test_at_most_one_pods_wait_for_the_agent_self_kill_whatever_the_eviction_timeout() -> None:
    cfg = Config(unreachable_after=5, evict_after=5)
    assert cfg.at_most_one_at() == 75
    assert cfg.at_most_one_at(lease_seconds=100) == 135  # a longer lease on the node itself
    assert Config(evict_after=100).at_most_one_at() == 140
    sim = cluster(cfg, pods=0, at_most_one=1)
    sim.run(74, renewing=healthy(sim))
    assert sim.evicted == {}
    sim.tick()
    assert list(sim.evicted) == ["silent-amo0"]


def test_a_failover_starts_every_silence_afresh() -> None:
    sim = cluster(Config(), pods=2)
    sim.run(90, renewing=healthy(sim))
    assert sim.nodes["silent"].unreachable_taint and sim.evicted == {}
    sim.seen, sim.state = {}, State()  # the new leader's reset
    sim.run(99, renewing=healthy(sim))
    # Not evicted early, and not taken for returned either: no renewal was seen.
    assert sim.evicted == {} and sim.nodes["silent"].unreachable_taint
    assert sim.first("silent", "NodeReady") is None
    sim.run(2, renewing=healthy(sim))
    assert set(sim.evicted) == {"silent-p0", "silent-p1"}
    assert sim.epochs["silent"] == 1  # tainted already: not fenced again


def test_terminating_pods_on_a_silent_node_are_removed_unless_finalizers_hold_them() -> None:
    sim = cluster(Config(), pods=0)
    sim.nodes["silent"] = replace(
        sim.nodes["silent"],
        pods=(
            PodView("ns", "grace", "g", deleting=True),
            PodView("ns", "held", "h", deleting=True, finalizers=True),
        ),
    )
    sim.run(100, renewing=healthy(sim))
    assert set(sim.evicted) == {"grace"}


def test_the_token_bucket() -> None:
    ok, b = take(None, 0.05, 1.0, 0.0)
    assert ok and b.tokens == 0.0
    ok, b = take(b, 0.05, 1.0, 19.0)
    assert not ok
    ok, b = take(b, 0.05, 1.0, 20.0)
    assert ok
    ok, b = take(b, 10.0, 10.0, 1000.0)  # refills only up to the burst
    assert ok and b.tokens == 9.0


def test_an_unchanged_cluster_gives_an_empty_plan() -> None:
    nodes = [NodeView(f"n{i}", f"u{i}", "a", silence=5.0, renewed=True) for i in range(5)]
    plan = reconcile(nodes, State(), Config(), 100.0, WALL0)
    assert plan.empty
