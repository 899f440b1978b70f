"""The local network of ``make up``: one network namespace per local node, on one bridge.

Three local nodes on one host share one network unless each has its own, and then their node
proxies cannot all listen on the same virtual IPs and zone preference means nothing. So, when
``make up`` runs as root and ``ip netns`` works, :func:`setup` builds (ADR 0039):

- a bridge ``qm0`` in the host namespace, *without* an address (the host cannot reach the
  pods' network, nor route it anywhere);
- per local node ``z`` (a, b, c -> i = 0, 1, 2): a namespace ``qm-local-<z>`` with lo up and a
  veth pair whose inside end is ``eth0`` with ``10.88.0.<11+i>/24`` and whose host end
  ``qmv-<z>`` is enslaved to ``qm0``. The node's pods run in that namespace and that address
  is their pod IP.

Otherwise the stack runs in host mode (pods on the host network, pod IP = node IP 127.0.0.x),
as :func:`available` reports. Setup is idempotent: a leftover of a killed run is removed first.
:func:`teardown` removes it all. A ``tag`` (``QM_NETWORK_TAG``) suffixes every name, so a test
can build its own network beside a developer's running ``make up``.

The plan (names, addresses, the ``ip`` commands) is pure and unit-tested; :func:`setup`,
:func:`teardown` and :func:`available` run ``ip`` (iproute2). Called by
:mod:`app.devstack.up`, and by the tests.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

ZONES = ("a", "b", "c")
SUBNET_PREFIX = "10.88.0."
PREFIX_LEN = 24
FIRST_HOST = 11  # local node i has 10.88.0.<11+i>
_TAG = re.compile(r"^[a-z0-9]{0,8}$")

Runner = Callable[[Sequence[str]], "subprocess.CompletedProcess[str]"]


@dataclass(frozen=True)
class NodeNetwork:
    """One local node's namespace: its name, the veth's host end, and the pod IP."""

    zone: str
    namespace: str
    veth: str
    address: str

    @property
    def node_name(self) -> str:
        return f"local-{self.zone}"


@dataclass(frozen=True)
class NetworkPlan:
    """The names and addresses of one local network (``tag`` suffixes every name)."""

    tag: str = ""
    zones: tuple[str, ...] = ZONES

    def __post_init__(self) -> None:
        if not _TAG.match(self.tag):
            raise ValueError(f"network tag {self.tag!r}: at most 8 lower-case letters or digits")

    @property
    def bridge(self) -> str:
        return f"qm0{self.tag}"

    @property
    def nodes(self) -> tuple[NodeNetwork, ...]:
        suffix = f"-{self.tag}" if self.tag else ""
        return tuple(
            NodeNetwork(
                zone=z,
                namespace=f"qm-local-{z}{suffix}",
                veth=f"qmv-{z}{self.tag}",  # at most 15 characters, as the kernel wants
                address=f"{SUBNET_PREFIX}{FIRST_HOST + i}",
            )
            for i, z in enumerate(self.zones)
        )

    def node(self, zone_or_name: str) -> NodeNetwork:
        """The node of zone ``a`` or of node name ``local-a``."""
        zone = zone_or_name.removeprefix("local-")
        for node in self.nodes:
            if node.zone == zone:
                return node
        raise KeyError(zone_or_name)

    def owns(self, address: str) -> bool:
        """Whether ``address`` is a pod IP of this network (reachable only from inside it)."""
        return address.startswith(SUBNET_PREFIX)


def plan_from_env(env: dict[str, str] | None = None) -> NetworkPlan:
    """The plan ``make up`` uses: ``QM_NETWORK_TAG`` suffixes the names."""
    env = dict(os.environ) if env is None else env
    return NetworkPlan(tag=(env.get("QM_NETWORK_TAG") or "").strip().lower())


def setup_commands(plan: NetworkPlan) -> list[list[str]]:
    """The ``ip`` commands that build ``plan`` from nothing (see the module docstring)."""
    cmds = [
        ["ip", "link", "add", plan.bridge, "type", "bridge"],
        ["ip", "link", "set", plan.bridge, "up"],
    ]
    for n in plan.nodes:
        ns = ["ip", "-n", n.namespace]
        cmds += [
            ["ip", "netns", "add", n.namespace],
            [*ns, "link", "set", "lo", "up"],
            [
                "ip",
                "link",
                "add",
                n.veth,
                "type",
                "veth",
                "peer",
                "name",
                "eth0",
                "netns",
                n.namespace,
            ],
            ["ip", "link", "set", n.veth, "master", plan.bridge],
            ["ip", "link", "set", n.veth, "up"],
            [*ns, "addr", "add", f"{n.address}/{PREFIX_LEN}", "dev", "eth0"],
            [*ns, "link", "set", "eth0", "up"],
        ]
    return cmds


def teardown_commands(plan: NetworkPlan) -> list[list[str]]:
    """The commands that remove ``plan`` (each may fail harmlessly when already gone):
    deleting a namespace deletes its veth pair, then the bridge goes."""
    cmds = [["ip", "netns", "delete", n.namespace] for n in plan.nodes]
    cmds += [["ip", "link", "delete", n.veth] for n in plan.nodes]  # if a namespace was gone
    cmds.append(["ip", "link", "delete", plan.bridge])
    return cmds


def _run(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, check=False, timeout=30)


def available(run: Runner = _run) -> str | None:
    """Why the local network cannot be built here (None: it can): root and a working
    ``ip netns`` are needed. ``QM_LOCAL_NETWORK=off`` turns it off on purpose."""
    if os.environ.get("QM_LOCAL_NETWORK", "").lower() in ("off", "0", "no", "false"):
        return "QM_LOCAL_NETWORK=off"
    if os.geteuid() != 0:
        return "not root"
    if shutil.which("ip") is None:
        return "no ip command (install iproute2)"
    try:
        listed = run(["ip", "netns", "list"])
    except (OSError, subprocess.SubprocessError) as exc:
        return f"ip netns does not work: {exc}"
    if listed.returncode != 0:
        return f"ip netns does not work: {listed.stderr.strip()}"
    return None


def teardown(plan: NetworkPlan, run: Runner = _run) -> None:
    """Remove the network, whatever of it exists (absent parts are fine)."""
    for argv in teardown_commands(plan):
        run(argv)


def setup(plan: NetworkPlan, run: Runner = _run) -> None:
    """Build the network afresh (removing a leftover first); ``RuntimeError`` naming the
    command that failed, after removing what was built."""
    teardown(plan, run)
    for argv in setup_commands(plan):
        done = run(argv)
        if done.returncode != 0:
            teardown(plan, run)
            raise RuntimeError(f"{' '.join(argv)}: {done.stderr.strip() or done.returncode}")


def present(plan: NetworkPlan, run: Runner = _run) -> dict[str, bool]:
    """Which of the plan's bridge, veths and namespaces exist (for checks and tests)."""
    names = [plan.bridge, *(n.veth for n in plan.nodes)]
    out = {name: run(["ip", "link", "show", name]).returncode == 0 for name in names}
    for n in plan.nodes:
        out[n.namespace] = Path("/var/run/netns", n.namespace).exists()
    return out
