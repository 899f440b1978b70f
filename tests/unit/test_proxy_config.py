"""The node proxy's settings (agent/proxy/config.py): flags over QM_PROXY_* over defaults."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.proxy.config import ConfigError, ProxyConfig, parse


def test_the_make_up_command_line() -> None:
    argv = ["--node-name", "local-a", "--zone", "zone-a", "--netns", "qm-local-a",
            "--discovery", "127.0.0.1:9470,127.0.0.1:9471", "--metrics-port", "0"]  # fmt: skip
    config = parse(argv, {})
    assert config == ProxyConfig(
        node_name="local-a",
        zone="zone-a",
        discovery=(("127.0.0.1", 9470), ("127.0.0.1", 9471)),
        netns="qm-local-a",
        dns=("127.0.0.53", 53),  # the default inside a namespace
        state_dir=Path(".qm/proxy/local-a"),
        metrics_port=0,
    )
    assert (config.ident, config.scope) == ("local-a", "all")


def test_environment_variables_and_flags_winning() -> None:
    env = {
        "QM_PROXY_NODE_NAME": "Local-B",
        "QM_PROXY_ZONE": "zone-b",
        "QM_PROXY_DISCOVERY": "10.0.0.1:9470",
        "QM_PROXY_DNS": "127.0.0.1:5353",
        "QM_PROXY_STATE_DIR": "/tmp/p",
        "QM_PROXY_DISCOVERY_TIMEOUT": "2s",
    }
    config = parse(["--zone", "zone-c"], env)
    assert (config.node_name, config.zone) == ("local-b", "zone-c")
    assert config.discovery == (("10.0.0.1", 9470),)
    assert config.dns == ("127.0.0.1", 5353)
    assert config.state_dir == Path("/tmp/p")
    assert config.discovery_timeout == 2.0


def test_dns_is_off_in_host_mode_unless_set() -> None:
    assert parse(["--node-name", "n"], {}).dns is None
    assert parse(["--node-name", "n", "--netns", "x", "--dns", "off"], {}).dns is None


def test_edge_mode() -> None:
    argv = ["--edge", "--listen", "127.0.0.200", "--fail-open", "0.3", "--health-interval", "1"]
    config = parse(argv, {})
    assert (config.edge, config.listen, config.fail_open, config.health_interval) == (
        True,
        "127.0.0.200",
        0.3,
        1.0,
    )
    assert (config.ident, config.scope) == ("edge-127.0.0.200", "exposed")
    assert config.state_dir == Path(".qm/proxy/edge-127.0.0.200")
    assert parse([], {"QM_PROXY_EDGE": "1", "QM_PROXY_LISTEN": "127.0.0.9"}).edge


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "node name is empty"),
        (["--edge"], "--listen"),
        (["--node-name", "n", "--discovery", "nohost"], "host:port"),
        (["--node-name", "n", "--discovery", "h:99999"], "between 0 and 65535"),
        (["--node-name", "n", "--discovery", ","], "no discovery address"),
        (["--node-name", "n", "--fail-open", "1.5"], "fail-open"),
        (["--node-name", "n", "--fail-open", "nan"], "fail-open"),
        (["--node-name", "n", "--health-interval", "x"], "health interval"),
        (["--node-name", "n", "--metrics-port", "70000"], "metrics port"),
    ],
)
def test_bad_settings(argv: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse(argv, {})
