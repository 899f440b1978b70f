"""What ``make up`` runs, as a newcomer uses it: the stack comes up on its own embedded servers,
``qm`` works from the config it wrote, and Ctrl-C stops everything."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import yaml
from up_stack import UpStack

from app.devstack import network

ROOT = Path(__file__).resolve().parents[2]


def test_up_serves_the_api_and_stops_cleanly_on_ctrl_c(tmp_path: Path) -> None:
    plan = network.NetworkPlan(tag=f"t{os.getpid() % 10**7}")  # beside a developer's make up
    stack = UpStack(tmp_path, tag=plan.tag)
    namespaced = network.available() is None
    try:
        stack.start(timeout=120)
        written = yaml.safe_load(stack.config.read_text())
        assert written["server"] == f"https://127.0.0.1:{stack.port}"
        assert written["certificate-authority"] == str(tmp_path / "state" / "pki" / "ca.crt")
        token_file = tmp_path / "state" / "bootstrap-token"
        assert written["token"] == token_file.read_text().strip()
        assert token_file.stat().st_mode & 0o077 == 0, "the token file is private"
        assert "default" in stack.qm("get", "namespaces")
        _a_pod_runs_on_a_local_agent(stack)
        _the_example_service_runs(stack, plan if namespaced else None)
        _each_local_node_is_its_own_hostname(stack)
        _agents_joined_with_credentials_of_their_own(tmp_path / "state", written["token"])
        _secrets_are_sealed_with_a_private_keys_file(tmp_path / "state", stack)
        time.sleep(3.0)  # the other processes stay up too
        assert stack.proc is not None and stack.proc.poll() is None, stack.log()
    finally:
        returncode = stack.stop(timeout=120)  # its PostgreSQL alone may take 60 s under load
    out = stack.output()
    assert returncode == 0, out
    running = next(line for line in out.splitlines() if "Running:" in line)
    for name in ("api", "scheduler", "worker", "dispatcher", "beat", "manager", "agent-a",
                 "agent-b", "agent-c"):  # fmt: skip
        assert name in running, running
    pidfile = tmp_path / "state" / "postgres" / "data" / "postmaster.pid"
    assert not pidfile.exists(), "PostgreSQL was stopped"
    if namespaced:
        assert not any(network.present(plan).values()), "the local network was removed"


def _agents_joined_with_credentials_of_their_own(state: Path, admin_token: str) -> None:
    """Each local agent joined with its one-time bootstrap token and keeps its node's own
    credential, private, in its state directory (ADR 0045)."""
    for zone in "abc":
        saved = state / f"agent-{zone}" / "credential.json"
        assert saved.stat().st_mode & 0o077 == 0, "the credential file is private"
        credential = json.loads(saved.read_text())
        assert credential["node"] == f"local-{zone}"
        assert credential["token"] != admin_token


def _secrets_are_sealed_with_a_private_keys_file(state: Path, stack: UpStack) -> None:
    """make up creates the Secret keys file, private, and the stack seals with it (ADR 0048)."""
    keys = state / "secret-keys.json"
    assert keys.stat().st_mode & 0o077 == 0, "the Secret keys file is private"
    active = json.loads(keys.read_text())["active"]
    manifest = '{"kind": "Secret", "metadata": {"name": "up-check"}, "stringData": {"k": "v"}}'
    stack.qm("apply", "-f", "-", stdin=manifest)
    assert any(line.split()[:2] == [active, "yes"] for line in stack.qm("secrets", "status")
               .splitlines())  # fmt: skip


def _a_pod_runs_on_a_local_agent(stack: UpStack) -> None:
    """The three local agents register their machines, and a pod applied by a newcomer is
    placed by the scheduler and started as a process by an agent."""
    deadline = time.monotonic() + 90
    while not all(f"local-{z}" in stack.qm("get", "nodes") for z in "abc"):
        assert time.monotonic() < deadline, stack.qm("get", "nodes")
        time.sleep(0.5)
    pod = {"apiVersion": "quaymaster.io/v1", "kind": "Pod",
           "metadata": {"name": "hello", "namespace": "default"},
           "spec": {"containers": [{"name": "hello", "image": "local/python",
                                    "command": ["python3", "-c", "import time; time.sleep(600)"],
                                    "resources": {"requests": {"cpu": "100m",
                                                               "memory": "64Mi"}}}]}}  # fmt: skip
    stack.qm("apply", "-f", "-", stdin=json.dumps(pod))
    while True:
        got = json.loads(stack.qm("get", "pod", "hello", "-n", "default", "-o", "json"))
        if (got.get("status") or {}).get("phase") == "Running":
            assert got["spec"]["nodeName"].startswith("local-")
            return
        assert time.monotonic() < deadline, got
        time.sleep(0.5)


def _the_example_service_runs(stack: UpStack, plan: network.NetworkPlan | None) -> None:
    """The example service from ``examples/`` runs as the README says: three ready replicas
    in three zones, each answering HTTP on its pod's address, their logs readable by qm. With
    the local network (root), each pod IP is its node's namespace address, reached from
    inside a namespace (the host has no route to them); without it, the node's 127.0.0.x."""
    stack.qm("apply", "-f", str(ROOT / "examples" / "00-namespace.yaml"))
    stack.qm("apply", "-f", str(ROOT / "examples" / "10-web.yaml"))
    deadline = time.monotonic() + 120
    while True:
        items = json.loads(stack.qm("get", "pods", "-n", "shop", "-o", "json"))["items"]
        ready = [p for p in items if _ready(p)]
        if len(ready) == 3:
            break
        assert time.monotonic() < deadline, json.dumps(items)[:3000]
        time.sleep(1.0)
    assert {p["spec"]["nodeName"] for p in ready} == {"local-a", "local-b", "local-c"}
    if plan is not None:
        want = {n.node_name: n.address for n in plan.nodes}
        assert {p["spec"]["nodeName"]: p["status"]["podIP"] for p in ready} == want
    for pod in ready:
        url = f"http://{pod['status']['podIP']}:8000/"
        if plan is None:
            with urllib.request.urlopen(url, timeout=10) as answer:
                assert answer.status == 200
            continue
        # From local-a's namespace, across the bridge to every node's pod (its own included).
        get = f"import urllib.request as u; print(u.urlopen({url!r}, timeout=10).status)"
        inside = ["ip", "netns", "exec", plan.node("a").namespace, sys.executable, "-c", get]
        done = subprocess.run(inside, capture_output=True, text=True, timeout=30)
        assert done.stdout.strip() == "200", done.stderr
    name = ready[0]["metadata"]["name"]
    logged = stack.qm("logs", name, "-n", "shop", "--tail", "5")
    assert '"GET / HTTP/1.1" 200' in logged, logged


def _each_local_node_is_its_own_hostname(stack: UpStack) -> None:
    """Four replicas that must not share a ``kubernetes.io/hostname``: the three local agents
    are three hostnames, so three pods run on three nodes and the fourth waits for a fourth
    node, the scheduler saying why."""
    labels = {"app": "apart"}
    term = {"labelSelector": {"matchLabels": labels}, "topologyKey": "kubernetes.io/hostname"}
    container = {"name": "main", "image": "local/python",
                 "command": ["python3", "-c", "import time; time.sleep(600)"],
                 "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}  # fmt: skip
    deployment = {"apiVersion": "quaymaster.io/v1", "kind": "Deployment",
                  "metadata": {"name": "apart", "namespace": "default"},
                  "spec": {"replicas": 4, "selector": {"matchLabels": labels},
                           "template": {"metadata": {"labels": labels},
                                        "spec": {"containers": [container], "affinity": {
                                            "podAntiAffinity": {
                                                "requiredDuringSchedulingIgnoredDuringExecution":
                                                    [term]}}}}}}  # fmt: skip
    stack.qm("apply", "-f", "-", stdin=json.dumps(deployment))
    deadline = time.monotonic() + 120
    while True:
        listed = stack.qm("get", "pods", "-n", "default", "-l", "app=apart", "-o", "json")
        items = json.loads(listed)["items"]
        bound = [p for p in items if p["spec"].get("nodeName")]
        pending = [c for p in items if not p["spec"].get("nodeName")
                   for c in (p.get("status") or {}).get("conditions") or []
                   if c["type"] == "PodScheduled" and c["status"] == "False"]  # fmt: skip
        if len(items) == 4 and len(bound) == 3 and pending:
            break
        assert time.monotonic() < deadline, json.dumps(items)[:3000]
        time.sleep(1.0)
    assert {p["spec"]["nodeName"] for p in bound} == {"local-a", "local-b", "local-c"}
    assert "3 didn't match pod anti-affinity rules" in pending[0]["message"], pending[0]
    nodes = json.loads(stack.qm("get", "nodes", "-o", "json"))["items"]
    hostnames = {n["metadata"]["name"]: n["metadata"]["labels"]["kubernetes.io/hostname"]
                 for n in nodes}  # fmt: skip
    assert hostnames == {f"local-{z}": f"local-{z}" for z in "abc"}


def _ready(pod: dict[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)
