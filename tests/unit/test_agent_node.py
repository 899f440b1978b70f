"""The identity a node claims: its ``kubernetes.io/hostname`` label and ``Hostname`` address
are its own name unless overridden, never the machine's hostname (several agents on one
machine must be separate topology domains), and the settings that choose them."""

from __future__ import annotations

import pytest

from agent.config import parse
from agent.node import HOSTNAME_LABEL, NodeConfig, endpoint_status, labels_for


@pytest.mark.parametrize(
    ("cfg", "hostname"),
    [
        pytest.param(NodeConfig("local-a", zone="zone-a"), "local-a", id="the-node-name"),
        pytest.param(NodeConfig("local-a", hostname="box-7"), "box-7", id="overridden"),
    ],
)
def test_hostname_label_and_address(cfg: NodeConfig, hostname: str) -> None:
    assert labels_for(cfg)[HOSTNAME_LABEL] == hostname
    served = NodeConfig(cfg.name, hostname=cfg.hostname, agent_port=10250)
    assert endpoint_status(served)["addresses"] == [{"type": "Hostname", "address": hostname}]


@pytest.mark.parametrize(
    ("argv", "env", "node", "override"),
    [
        pytest.param([], {}, "box", "", id="defaults"),
        pytest.param(["--hostname-override", "Web-1"], {}, "web-1", "web-1", id="flag-names-node"),
        pytest.param([], {"QM_HOSTNAME_OVERRIDE": "web-2"}, "web-2", "web-2", id="variable"),
        pytest.param(["--node-name", "n1", "--hostname-override", "h1"], {}, "n1", "h1", id="both"),
    ],
)
def test_hostname_override_setting(
    argv: list[str], env: dict[str, str], node: str, override: str
) -> None:
    cfg = parse(argv, env, hostname="Box")
    assert (cfg.node_name, cfg.hostname_override) == (node, override)
