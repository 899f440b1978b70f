"""The API server serving HTTPS (``--tls-cert-file``/``--tls-key-file``) as the dev stack
runs it, reached by the shared REST client that trusts the cluster CA, and refused by one
that trusts another CA."""

from __future__ import annotations

import datetime as dt
import os
import secrets
from contextlib import closing
from pathlib import Path

import pytest

from app.cli.client import ApiClient
from app.client import Unreachable
from app.core.kinds import BY_KIND
from app.devstack import pki
from app.devstack.apiserver import ApiServer
from app.devstack.supervise import free_port

ROOT = Path(__file__).resolve().parents[2]
NAMESPACE = BY_KIND["Namespace"]


def test_the_api_over_https(pg_url: str, redis_url: str, tmp_path: Path) -> None:
    cluster = pki.cluster_pki(tmp_path / "pki", ["127.0.0.1", "localhost"], {})
    port, token = free_port(), secrets.token_urlsafe(16)
    env = {**os.environ, "DATABASE_URL": pg_url, "QM_STREAM_DATABASE_URL": pg_url,
           "QM_BROKER_URL": redis_url, "QM_BOOTSTRAP_TOKEN": token}  # fmt: skip
    server = ApiServer(port, token, env, tmp_path / "api.log", cwd=ROOT, pki=cluster)
    server.start(timeout=60)
    try:
        assert server.url == f"https://127.0.0.1:{port}"
        other = pki.load_or_create_authority(tmp_path / "other", dt.datetime.now(dt.UTC))
        (tmp_path / "other.crt").write_bytes(other.cert_pem())
        trusted = ApiClient(server.url, token, ca_file=server.ca_file)
        stranger = ApiClient(server.url, token, ca_file=str(tmp_path / "other.crt"))
        plain = ApiClient(f"http://127.0.0.1:{port}", token)
        with closing(trusted), closing(stranger), closing(plain):
            listed = trusted.list(NAMESPACE, None)["items"]
            assert "default" in [n["metadata"]["name"] for n in listed]
            with pytest.raises(Unreachable, match="CERTIFICATE_VERIFY_FAILED"):
                stranger.list(NAMESPACE, None)
            with pytest.raises(Unreachable):
                plain.list(NAMESPACE, None)
    finally:
        server.stop()
