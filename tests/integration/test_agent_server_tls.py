"""An agent's log server with a certificate from the cluster CA: the API server's relay
reaches it over HTTPS when it trusts that CA, and refuses it when it trusts another; nobody
gets it over plain HTTP."""

from __future__ import annotations

import datetime as dt
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from litestar.response import Stream

from agent import config as agent_config
from agent.loop import server_tls
from agent.server import AgentServer
from app.api.logs import AGENT_CA_ENV, relay
from app.core import errors
from app.devstack import pki


@pytest.fixture
async def agent(tmp_path: Path) -> AsyncIterator[tuple[int, pki.ClusterPki]]:
    cluster = pki.cluster_pki(tmp_path / "pki", ["127.0.0.1"], {"a": ["127.0.0.1"]})
    paths = cluster.agents["a"]
    cfg = agent_config.parse(
        ["--node-name", "a", "--tls-cert-file", str(paths.cert), "--tls-key-file", str(paths.key)],
        {},
    )
    server = AgentServer(None, port=0, tls=server_tls(cfg))
    port = await server.start()
    try:
        yield port, cluster
    finally:
        await server.stop()


async def test_the_relay_checks_the_agents_certificate(
    agent: tuple[int, pki.ClusterPki], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    port, cluster = agent
    url = f"https://127.0.0.1:{port}/healthz"
    monkeypatch.setenv(AGENT_CA_ENV, str(cluster.ca))
    answer = await relay(url, "a", False, None)  # raises unless the agent answered 200
    assert isinstance(answer, Stream)
    body = b"".join([bytes(chunk) async for chunk in answer.iterator])  # type: ignore[union-attr]
    assert body == b"ok"

    other = pki.load_or_create_authority(tmp_path / "other", dt.datetime.now(dt.UTC))
    (tmp_path / "other.crt").write_bytes(other.cert_pem())
    monkeypatch.setenv(AGENT_CA_ENV, str(tmp_path / "other.crt"))
    with pytest.raises(errors.StatusError) as refused:
        await relay(url, "a", False, None)
    assert refused.value.code == 503
    assert "CERTIFICATE_VERIFY_FAILED" in refused.value.message


async def test_plain_http_gets_nothing(agent: tuple[int, pki.ClusterPki]) -> None:
    port, cluster = agent
    async with httpx.AsyncClient(timeout=5) as plain:
        with pytest.raises(httpx.HTTPError):
            await plain.get(f"http://127.0.0.1:{port}/healthz")
    trusted = ssl.create_default_context(cafile=str(cluster.ca))
    async with httpx.AsyncClient(timeout=5, verify=trusted) as client:
        assert (await client.get(f"https://127.0.0.1:{port}/healthz")).text == "ok"
