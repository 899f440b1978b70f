"""The pure parts of the agent's network namespace support: names, argv prefixes, the OCI
namespaces, the agent's flags, and NamespaceSockets in host mode (real loopback sockets; the
namespace mode needs root and is in tests/integration/test_agent_netns.py)."""

from __future__ import annotations

import asyncio
import socket
import sys
from pathlib import Path

import pytest

from agent import config, netns
from agent.probe_exec import ProbeContext, _request
from agent.probes import HttpGetAction
from agent.runtime import oci


def test_a_namespace_is_named_by_a_file_under_var_run_netns() -> None:
    assert netns.path_of("qm-local-a") == Path("/var/run/netns/qm-local-a")
    assert netns.path_of("x", Path("/tmp/ns")) == Path("/tmp/ns/x")
    for bad in ("", "a/b", "..", "."):
        with pytest.raises(netns.NamespaceError):
            netns.path_of(bad)


def test_host_mode_needs_no_prefix_and_no_preexec() -> None:
    assert netns.exec_prefix(None) == ()
    assert netns.preexec(None) is None
    assert callable(netns.preexec("qm-local-a"))


def test_the_exec_prefix_execs_in_place(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(netns, "NSENTER", "/usr/bin/nsenter")
    assert netns.exec_prefix("qm-local-b") == (
        "/usr/bin/nsenter",
        "--net=/var/run/netns/qm-local-b",
        "--",
    )
    monkeypatch.setattr(netns, "NSENTER", None)  # no util-linux: this module does it
    assert netns.exec_prefix("qm-local-b") == (
        sys.executable,
        "-m",
        "agent.netns",
        "exec",
        "/var/run/netns/qm-local-b",
        "--",
    )


def test_the_exec_wrapper_refuses_a_bad_command_line() -> None:
    assert netns.main(["exec", "ns"]) == 2
    assert netns.main(["run", "ns", "--", "true"]) == 2


def test_the_exec_wrapper_exits_125_when_the_namespace_is_missing(tmp_path: Path) -> None:
    assert netns.main(["exec", str(tmp_path / "none"), "--", "true"]) == 125


def test_runc_joins_the_nodes_namespace_by_path_or_keeps_the_hosts() -> None:
    types = [n["type"] for n in oci.namespaces()]
    assert types == ["pid", "ipc", "uts", "mount"]
    joined = oci.namespaces(Path("/var/run/netns/qm-local-c"))
    assert joined[-1] == {"type": "network", "path": "/var/run/netns/qm-local-c"}


def test_agent_flags_for_the_namespace_pod_ip_and_discovery() -> None:
    cfg = config.parse(
        ["--node-name", "n", "--node-ip", "127.0.0.2", "--netns", "qm-local-b", "--pod-ip",
         "10.88.0.12", "--discovery-http", "http://127.0.0.1:9480, http://127.0.0.1:9481"],
        {},
    )  # fmt: skip
    assert (cfg.netns, cfg.pod_ip, cfg.pods_ip) == ("qm-local-b", "10.88.0.12", "10.88.0.12")
    assert cfg.discovery_http == ("http://127.0.0.1:9480", "http://127.0.0.1:9481")
    env = {"QM_AGENT_NETNS": "ns1", "QM_AGENT_POD_IP": "10.0.0.5", "QM_DISCOVERY_HTTP": ""}
    cfg = config.parse(["--node-name", "n"], env)
    assert (cfg.netns, cfg.pods_ip, cfg.discovery_http) == ("ns1", "10.0.0.5", ())


def test_without_a_namespace_the_pod_ip_is_the_node_ip() -> None:
    cfg = config.parse(["--node-name", "n", "--node-ip", "127.0.0.3"], {})
    assert (cfg.netns, cfg.pods_ip) == ("", "127.0.0.3")


def test_a_namespace_path_is_not_a_name() -> None:
    with pytest.raises(config.ConfigError, match="netns"):
        config.parse(["--node-name", "n", "--netns", "/var/run/netns/x"], {})


def test_the_probe_request_lets_the_probe_override_headers_but_not_connection() -> None:
    action = HttpGetAction(
        8000, "healthz", headers=(("user-agent", "mine"), ("Connection", "keep-alive"))
    )
    text = _request(action, "10.88.0.12").decode()
    lines = text.split("\r\n")
    assert lines[0] == "GET /healthz HTTP/1.1"
    assert "Host: 10.88.0.12:8000" in lines
    assert "user-agent: mine" in lines and "User-Agent" not in text
    assert "Connection: close" in lines and "keep-alive" not in text
    assert text.endswith("\r\n\r\n")


def test_probe_header_values_cannot_smuggle_lines() -> None:
    action = HttpGetAction(80, "/", headers=(("X-A", "1\r\nX-B: 2"),))
    assert "X-B" not in _request(action, "::1").decode()
    assert "Host: [::1]:80" in _request(action, "::1").decode()


def test_probes_connect_from_the_hosts_network_by_default() -> None:
    assert ProbeContext().sockets.host_mode


async def test_host_mode_sockets_listen_and_connect_on_loopback() -> None:
    sockets = netns.NamespaceSockets(None)
    async with sockets:
        listener = await sockets.listen("127.0.0.1", 0)
        port = listener.getsockname()[1]
        got: asyncio.Queue[bytes] = asyncio.Queue()

        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await got.put(await reader.readline())
            writer.close()

        server = await asyncio.start_server(serve, sock=listener)
        try:
            _, writer = await sockets.open_connection("127.0.0.1", port)
            writer.write(b"hello\n")
            await writer.drain()
            assert await asyncio.wait_for(got.get(), 10) == b"hello\n"
            writer.close()
        finally:
            server.close()
            await server.wait_closed()


async def test_host_mode_udp_is_bound_not_listening() -> None:
    sockets = netns.NamespaceSockets(None)
    sock = await sockets.listen("127.0.0.1", 0, kind=socket.SOCK_DGRAM)
    try:
        assert sock.type == socket.SOCK_DGRAM and sock.getsockname()[1] > 0
        assert not sock.getblocking()
    finally:
        sock.close()


async def test_a_refused_connection_is_an_os_error() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(ConnectionRefusedError):
        await netns.NamespaceSockets(None).connect("127.0.0.1", port)


async def test_a_missing_namespace_fails_at_start(tmp_path: Path) -> None:
    sockets = netns.NamespaceSockets("absent", netns_dir=tmp_path)
    with pytest.raises(netns.NamespaceError, match="absent"):
        await sockets.start()
    with pytest.raises(netns.NamespaceError):  # and never makes a socket elsewhere
        await sockets.socket()
