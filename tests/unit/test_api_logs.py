"""The log route's checks before it calls an agent, and the agent's side of the wiring: the
parameters, the container chosen, the agent's address from node status, the agent's refusals
mapped to this API's errors, the node's reported endpoint and the agent's settings."""

from __future__ import annotations

from typing import Any

import pytest

from agent import config
from agent.machine import Reserve, detect
from agent.node import NodeConfig, desired_status, endpoint_status
from app.api.logs import LogQuery, agent_base_url, agent_error, parse_query, pick_container
from app.core import errors

Obj = dict[str, Any]


def test_parse_query_defaults_and_values() -> None:
    assert parse_query({}, "p") == LogQuery(None)
    got = parse_query({"follow": "true", "previous": "1", "tailLines": "7", "container": "c"}, "p")
    assert got == LogQuery("c", True, True, 7)
    assert got.agent_query() == "follow=true&previous=true&tailLines=7"


def test_parse_query_names_every_bad_parameter() -> None:
    with pytest.raises(errors.Invalid) as err:
        parse_query({"follow": "yes", "previous": "no", "tailLines": "-3"}, "p")
    assert err.value.code == 422
    assert [c.field for c in err.value.causes] == ["follow", "previous", "tailLines"]


@pytest.mark.parametrize("value", ["-1", "1e3", "ten", "9" * 13, " 1"])
def test_parse_query_refuses_tail_lines(value: str) -> None:
    with pytest.raises(errors.Invalid):
        parse_query({"tailLines": value}, "p")


def _pod(*names: str, init: tuple[str, ...] = ()) -> Obj:
    return {"metadata": {"name": "p"}, "spec": {
        "containers": [{"name": n} for n in names],
        "initContainers": [{"name": n} for n in init]}}  # fmt: skip


def test_pick_container() -> None:
    assert pick_container(_pod("only"), None) == "only"
    assert pick_container(_pod("a", "b"), "b") == "b"
    assert pick_container(_pod("a", init=("setup",)), "setup") == "setup"
    with pytest.raises(errors.Invalid) as required:
        pick_container(_pod("a", "b"), None)
    assert required.value.causes[0].field == "container"
    assert "a, b" in required.value.causes[0].message
    with pytest.raises(errors.NotFound) as missing:
        pick_container(_pod("a", "b"), "zzz")
    assert "a, b" in missing.value.message


def _node(addresses: list[Obj], port: Any) -> Obj:
    return {"metadata": {"name": "n1"}, "status": {
        "addresses": addresses, "daemonEndpoints": {"agentEndpoint": {"Port": port}}}}  # fmt: skip


def test_agent_base_url_prefers_the_internal_ip() -> None:
    both = [{"type": "Hostname", "address": "box"}, {"type": "InternalIP", "address": "10.0.0.5"}]
    assert agent_base_url(_node(both, 10250)) == "http://10.0.0.5:10250"
    assert agent_base_url(_node(both[:1], 10251)) == "http://box:10251"
    v6 = [{"type": "InternalIP", "address": "fd00::1"}]
    assert agent_base_url(_node(v6, 10250)) == "http://[fd00::1]:10250"


@pytest.mark.parametrize(
    "node",
    [
        {"metadata": {"name": "n1"}, "status": {}},
        _node([{"type": "InternalIP", "address": "10.0.0.5"}], None),
        _node([{"type": "InternalIP", "address": "10.0.0.5"}], 70000),
        _node([{"type": "InternalIP", "address": "10.0.0.5"}], True),
        _node([], 10250),
    ],
)
def test_agent_base_url_without_an_endpoint_is_unavailable(node: Obj) -> None:
    with pytest.raises(errors.ServiceUnavailable, match="agent endpoint"):
        agent_base_url(node)


def test_agent_errors_map_to_this_api() -> None:
    assert isinstance(agent_error(404, b'{"message": "gone"}', "n"), errors.NotFound)
    assert isinstance(agent_error(400, b'{"message": "no run"}', "n"), errors.BadRequest)
    refused = agent_error(401, b'{"message": "a valid bearer token is required"}', "n1")
    assert isinstance(refused, errors.ServiceUnavailable)
    assert "n1" in refused.message and "401" in refused.message
    assert isinstance(agent_error(500, b"not json", "n"), errors.ServiceUnavailable)


def test_the_node_reports_its_agent_endpoint_once_it_listens() -> None:
    assert endpoint_status(NodeConfig("n1", address="10.0.0.5")) == {}
    got = endpoint_status(NodeConfig("n1", address="10.0.0.5", agent_port=10251, hostname="box"))
    assert got == {
        "addresses": [
            {"type": "InternalIP", "address": "10.0.0.5"},
            {"type": "Hostname", "address": "box"},
        ],
        "daemonEndpoints": {"agentEndpoint": {"Port": 10251}},
    }


def test_desired_status_carries_the_endpoint() -> None:
    endpoint = endpoint_status(NodeConfig("n1", agent_port=10250))
    status = desired_status({}, detect(), Reserve(), 0.0, endpoint)
    assert status["daemonEndpoints"] == {"agentEndpoint": {"Port": 10250}}
    assert status["addresses"] == [{"type": "Hostname", "address": "n1"}]


def test_agent_server_settings() -> None:
    got = config.parse([], {}, hostname="h")
    assert (got.address, got.port, got.bootstrap_token) == ("127.0.0.1", 10250, None)
    assert (got.log_max_bytes, got.log_keep) == (10 * 2**20, 3)
    env = {"QM_AGENT_PORT": "0", "QM_AGENT_BOOTSTRAP_TOKEN": "s3", "QM_AGENT_LOG_MAX_BYTES": "100"}
    got = config.parse(["--port", "10251", "--log-keep", "1"], env, hostname="h")
    assert (got.port, got.bootstrap_token, got.log_max_bytes, got.log_keep) == (10251, "s3", 100, 1)
    for bad in (["--port", "70000"], ["--port", "x"], ["--log-keep", "-1"]):
        with pytest.raises(config.ConfigError):
            config.parse(bad, {}, hostname="h")
