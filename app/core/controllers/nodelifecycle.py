"""The node lifecycle controller's decisions: when a silent machine is marked unreachable, when
its pods are evicted, how fast evictions may go in a zone, and when a machine that keeps going
silent is sent for repair.

Silence is measured on the controller's own monotonic clock from the last lease renewal it
*saw* (a change of the lease row's version, noticed by ``track``); the ``renewTime`` a machine
writes is never an input here, so a machine with a skewed clock cannot fake liveness.

``reconcile`` is pure: the shell (``workers.loops.nodelifecycle``) reads nodes, leases and
pods, passes the silences, the clocks and the limiter ``State`` it kept from the last tick, and
applies the returned plan. Every rule is level-based, so a plan that was only partly applied
is completed by the next tick, and reconciling the state a plan produces asks for nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

UNREACHABLE_TAINT = "node.kubernetes.io/unreachable"
REPAIR_TAINT = "quaymaster.io/repair"
SILENCES_ANNOTATION = "quaymaster.io/silences"
ZONE_LABEL = "topology.kubernetes.io/zone"
NODE_UNKNOWN = "NodeStatusUnknown"  # the reason on the Ready=Unknown this controller writes
POD_UNREACHABLE = "NodeUnreachable"  # the reason on the pods' Ready=False


@dataclass(frozen=True)
class Config:
    """Timings in seconds, rates in nodes per second (see ``workers.loops.nodelifecycle`` for
    the environment variables)."""

    unreachable_after: float = 40.0
    evict_after: float = 60.0  # further silence, once unreachable, before pods are evicted
    lease_duration: float = 40.0
    agent_self_kill: float = 30.0  # the agent kills an at-most-one pod after this long unrenewed
    margin: float = 5.0
    zone_threshold: float = 0.10
    zone_min_silent: int = 2
    evict_rate: float = 10.0
    trickle_rate: float = 3 / 60
    flap_limit: int = 3
    flap_window: float = 3600.0

    @property
    def eviction_at(self) -> float:
        return self.unreachable_after + self.evict_after

    def at_most_one_at(self, lease_seconds: float | None = None) -> float:
        """Silence after which an at-most-one pod may go: never before the machine's agent has
        surely killed it (its lease expired, then the self-kill window, then a margin)."""
        lease = max(self.lease_duration, lease_seconds or 0.0)
        return max(self.eviction_at, lease + self.agent_self_kill + self.margin)


# -------------------------------------------------------------------------- renewals seen


@dataclass(frozen=True)
class Seen:
    """The last renewal of one node's lease this controller saw: the row version, and when it
    saw it on its monotonic clock. ``renewed`` is False while ``at`` is only the start of this
    term (a failover), not an observed renewal."""

    row_version: int
    at: float
    renewed: bool


def track(seen: Mapping[str, Seen], leases: Mapping[str, int], now: float) -> dict[str, Seen]:
    """Fold one read of the node leases (name -> row version) into what was seen. A lease seen
    for the first time starts its silence now; a changed row version is a renewal now; a lease
    that vanished keeps its last renewal, so its silence grows."""
    out = dict(seen)
    for name, version in leases.items():
        old = seen.get(name)
        if old is None:
            out[name] = Seen(version, now, False)
        elif old.row_version != version:
            out[name] = Seen(version, now, True)
    return out


# -------------------------------------------------------------------------- observations


@dataclass(frozen=True)
class PodView:
    namespace: str
    name: str
    uid: str
    at_most_one: bool = False
    unready: bool = False  # already Ready=False with reason NodeUnreachable
    deleting: bool = False
    finalizers: bool = False


@dataclass(frozen=True)
class NodeView:
    """One node as the controller sees it. ``silence`` is None for a node that has never had a
    lease this term (not monitored); ``ready_unknown`` says the Ready condition is the
    controller's own Unknown; ``silences`` are wall-clock times of past silent episodes."""

    name: str
    uid: str
    zone: str = ""
    silence: float | None = None
    renewed: bool = False
    unreachable_taint: bool = False
    repair_taint: bool = False
    ready_unknown: bool = False
    silences: tuple[float, ...] = ()
    pods: tuple[PodView, ...] = ()
    lease_seconds: float | None = None


# -------------------------------------------------------------------------- the plan


@dataclass(frozen=True)
class NodeChange:
    """Writes to one node. ``taint``: True adds the unreachable taint, False removes it, None
    leaves it; ``ready``: the Ready status to write ("Unknown" or "True"), None to leave it."""

    name: str
    taint: bool | None = None
    repair: bool = False
    silences: tuple[float, ...] | None = None
    ready: str | None = None
    bump_epoch: bool = False


@dataclass(frozen=True)
class PodAction:
    node: str
    namespace: str
    name: str
    uid: str
    deleting: bool = False


@dataclass(frozen=True)
class Note:
    """An Event about a node (the shell turns it into ``app.store.events.EventNote``)."""

    node: str
    uid: str
    reason: str
    message: str
    warning: bool = True


@dataclass(frozen=True)
class Bucket:
    tokens: float
    stamp: float


@dataclass(frozen=True)
class State:
    """What the controller remembers between ticks of one term: each zone's token bucket, the
    nodes whose eviction has been admitted, and the zones in a disruption episode."""

    buckets: Mapping[str, Bucket] = field(default_factory=dict)
    admitted: frozenset[str] = frozenset()
    disrupted: frozenset[str] = frozenset()


@dataclass(frozen=True)
class NodePlan:
    changes: tuple[NodeChange, ...] = ()
    unready: tuple[PodAction, ...] = ()
    evict: tuple[PodAction, ...] = ()
    notes: tuple[Note, ...] = ()
    state: State = State()

    @property
    def empty(self) -> bool:
        return not (self.changes or self.unready or self.evict or self.notes)


# -------------------------------------------------------------------------- rules


def take(bucket: Bucket | None, rate: float, burst: float, now: float) -> tuple[bool, Bucket]:
    """One token from a bucket refilled at ``rate`` per second up to ``burst``; a new bucket
    starts full."""
    if bucket is None:
        tokens = burst
    else:
        tokens = min(burst, bucket.tokens + max(0.0, now - bucket.stamp) * rate)
    if tokens >= 1.0:
        return True, Bucket(tokens - 1.0, now)
    return False, Bucket(tokens, now)


def is_silent(node: NodeView, cfg: Config) -> bool:
    return node.silence is not None and node.silence >= cfg.unreachable_after


def zone_states(nodes: list[NodeView], cfg: Config) -> tuple[set[str], bool]:
    """The zones in disruption (more than the threshold of their monitored nodes silent, and
    at least ``zone_min_silent`` of them), and whether every monitored node is silent (then the
    fault is more likely this controller's view than the machines: evictions pause)."""
    total: dict[str, int] = {}
    silent: dict[str, int] = {}
    for n in nodes:
        if n.silence is None:
            continue
        total[n.zone] = total.get(n.zone, 0) + 1
        if is_silent(n, cfg):
            silent[n.zone] = silent.get(n.zone, 0) + 1
    disrupted = {
        z
        for z, s in silent.items()
        if s >= cfg.zone_min_silent and s / total[z] > cfg.zone_threshold
    }
    everything = bool(total) and sum(silent.values()) == sum(total.values())
    return disrupted, everything


def _flapping(history: tuple[float, ...], wall: float, cfg: Config) -> tuple[float, ...]:
    return tuple(t for t in history if wall - t < cfg.flap_window)


def _node_change(node: NodeView, cfg: Config, wall: float) -> tuple[NodeChange | None, list[Note]]:
    """Taint, condition and history writes for one node, with the Events they come with."""
    silence = node.silence or 0.0
    if is_silent(node, cfg):
        if not node.unreachable_taint:
            history = (*_flapping(node.silences, wall, cfg), wall)
            repair = len(history) >= cfg.flap_limit and not node.repair_taint
            notes = [
                Note(
                    node.name,
                    node.uid,
                    "NodeNotReady",
                    f"node lease not renewed for {silence:.0f}s: marked unreachable",
                )
            ]
            if repair:
                notes.append(
                    Note(
                        node.name,
                        node.uid,
                        "NodeFlapping",
                        f"silent {len(history)} times within {cfg.flap_window:.0f}s:"
                        f" tainted {REPAIR_TAINT} until an operator removes it",
                    )
                )
            return NodeChange(node.name, True, repair, history, "Unknown", True), notes
        if not node.ready_unknown:
            return NodeChange(node.name, ready="Unknown"), []
        return None, []
    if not node.renewed:
        return None, []  # no renewal seen this term yet: neither silent long enough nor back
    if node.unreachable_taint:
        ready = "True" if node.ready_unknown else None
        note = Note(node.name, node.uid, "NodeReady", "node lease renewed again", warning=False)
        return NodeChange(node.name, False, ready=ready), [note]
    if node.ready_unknown:
        return NodeChange(node.name, ready="True"), []
    return None, []


def _due(node: NodeView, cfg: Config) -> list[PodView]:
    """The node's pods whose eviction time has come (a terminating pod on a silent node is
    removed too: its agent cannot confirm; one held by finalizers is left to them)."""
    silence = node.silence or 0.0
    at_most_one = cfg.at_most_one_at(node.lease_seconds)
    return [
        p
        for p in node.pods
        if not (p.deleting and p.finalizers)
        and silence >= (at_most_one if p.at_most_one else cfg.eviction_at)
    ]


def _zone_note(nodes: list[NodeView], zone: str, cfg: Config, paused: bool) -> Note:
    """One Warning per disruption episode, on the node that tipped the zone over (the most
    recently silent one)."""
    silent = [n for n in nodes if n.zone == zone and is_silent(n, cfg)]
    tip = min(silent, key=lambda n: (n.silence or 0.0, n.name))
    total = sum(1 for n in nodes if n.zone == zone and n.silence is not None)
    pace = "paused" if paused else f"slowed to {cfg.trickle_rate * 60:g} nodes a minute"
    return Note(
        tip.name,
        tip.uid,
        "ZoneDisruption",
        f"{len(silent)} of {total} nodes in zone {zone!r} are silent: evictions {pace}",
    )


def reconcile(
    nodes: list[NodeView], state: State, cfg: Config, now: float, wall: float
) -> NodePlan:
    """The plan for one tick. ``now`` is the controller's monotonic clock (the one silences
    were measured on), ``wall`` the wall clock in epoch seconds (for the silence history)."""
    changes: list[NodeChange] = []
    notes: list[Note] = []
    unready: list[PodAction] = []
    for node in nodes:
        change, more = _node_change(node, cfg, wall)
        if change is not None:
            changes.append(change)
        notes += more
        if is_silent(node, cfg):
            unready += [
                PodAction(node.name, p.namespace, p.name, p.uid)
                for p in node.pods
                if not p.unready and not p.deleting
            ]

    disrupted, paused = zone_states(nodes, cfg)
    for zone in sorted(disrupted - state.disrupted):
        notes.append(_zone_note(nodes, zone, cfg, paused))

    silent_names = {n.name for n in nodes if is_silent(n, cfg)}
    admitted = set(state.admitted & silent_names)
    buckets = dict(state.buckets)
    evict: list[PodAction] = []
    # Longest silence first: a node that has waited longer gets the next token.
    for node in sorted(nodes, key=lambda n: (-(n.silence or 0.0), n.name)):
        if not (is_silent(node, cfg) and node.unreachable_taint):
            continue  # eviction only after the node is fenced and tainted
        due = _due(node, cfg)
        if not due:
            continue
        if node.name not in admitted:
            if paused:
                continue
            rate = cfg.trickle_rate if node.zone in disrupted else cfg.evict_rate
            ok, buckets[node.zone] = take(buckets.get(node.zone), rate, max(1.0, rate), now)
            if not ok:
                continue
            admitted.add(node.name)
        evict += [PodAction(node.name, p.namespace, p.name, p.uid, p.deleting) for p in due]
        notes.append(
            Note(
                node.name,
                node.uid,
                "PodsEvicted",
                f"{len(due)} pod(s) deleted from the silent node",
            )
        )

    new_state = replace(
        state, buckets=buckets, admitted=frozenset(admitted), disrupted=frozenset(disrupted)
    )
    return NodePlan(tuple(changes), tuple(unready), tuple(evict), tuple(notes), new_state)


def reset_state() -> State:
    """The state a new term starts from: full buckets, nothing admitted, no episode open."""
    return State()
