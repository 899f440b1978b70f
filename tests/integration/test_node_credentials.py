"""Node credentials against a real API server: joining with bootstrap tokens, and the scope of
a node's credential (the node authorizer and the node restriction).

Two nodes join; pods bound to each reference Secrets and ConfigMaps. Node ``a``'s credential
reads and writes what is its own and is refused everything of node ``b``'s: get, list and watch
of pods and Secrets, writes to ``b``'s Node, Lease and pods. A refusal is a 403, or the 404 of
a namespace the node holds nothing in (the API answers those as if they did not exist).
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from agents import bootstrap_token

from agent import credentials
from agent.api import LEASE, NAMESPACE, NODE, POD, AgentApi
from app.client import build
from app.core import errors
from app.core.kinds import BY_KIND, Kind
from app.devstack.apiserver import ApiServer
from app.store.tokens import token_id

SECRET, CONFIG_MAP = BY_KIND["Secret"], BY_KIND["ConfigMap"]
LEASES = "quaymaster-node-lease"
REFUSED = (errors.Forbidden, errors.NotFound)
Obj = dict[str, Any]


@dataclass
class Cluster:
    admin: AgentApi
    ns: str
    a: str
    b: str
    node_a: AgentApi  # node a's own credential
    node_b: AgentApi


def pod(name: str, node: str, secret: str, config: str) -> Obj:
    container = {
        "name": "c",
        "image": "local",
        "command": ["true"],
        "env": [{"name": "S", "valueFrom": {"secretKeyRef": {"name": secret, "key": "k"}}}],
    }
    volumes = [{"name": "v", "configMap": {"name": config}}]
    return {"metadata": {"name": name},
            "spec": {"nodeName": node, "containers": [container], "volumes": volumes}}  # fmt: skip


@pytest.fixture(scope="module")
def cluster(api_server: ApiServer) -> Iterator[Cluster]:
    admin = AgentApi(api_server.url, api_server.token)
    tag = secrets.token_hex(3)
    ns, a, b = f"creds-{tag}", f"node-a-{tag}", f"node-b-{tag}"
    admin.create(NAMESPACE, None, {"metadata": {"name": ns}})
    for node in (a, b):
        admin.create(SECRET, ns, {"metadata": {"name": f"s-{node}"}, "data": {"k": "c2VjcmV0"}})
        admin.create(CONFIG_MAP, ns, {"metadata": {"name": f"c-{node}"}, "data": {"k": "v"}})
        admin.create(POD, ns, pod(f"p-{node}", node, f"s-{node}", f"c-{node}"))
    admin.create(SECRET, ns, {"metadata": {"name": "unreferenced"}, "data": {"k": "eA=="}})
    joined = {}
    for node in (a, b):
        token = credentials.join(admin.server, bootstrap_token(admin, node), node)
        joined[node] = AgentApi(admin.server, token)
        joined[node].create(NODE, None, {"metadata": {"name": node}})
        joined[node].ensure_namespace(LEASES)
        joined[node].create(LEASE, LEASES, {"metadata": {"name": node}, "spec": {}})
    yield Cluster(admin, ns, a, b, joined[a], joined[b])
    for client in (admin, *joined.values()):
        client.close()


def test_a_node_reads_its_pods_and_what_they_reference(cluster: Cluster) -> None:
    c, me = cluster, cluster.node_a
    assert me.get(POD, c.ns, f"p-{c.a}")["spec"]["nodeName"] == c.a
    assert me.get(SECRET, c.ns, f"s-{c.a}")["data"] == {"k": "c2VjcmV0"}
    assert me.get(CONFIG_MAP, c.ns, f"c-{c.a}")["data"] == {"k": "v"}
    assert me.get(NODE, None, c.a)["metadata"]["name"] == c.a
    assert me.get(LEASE, LEASES, c.a)["metadata"]["name"] == c.a
    listed, _ = me.list_items(POD, None, field_selector=f"spec.nodeName={c.a}")
    assert [p["metadata"]["name"] for p in listed] == [f"p-{c.a}"]
    events = me.watch(POD, None, "0", field_selector=f"spec.nodeName={c.a}", timeout_seconds=1)
    seen = [e["object"]["metadata"]["name"] for e in events if e["type"] == "ADDED"]
    assert seen == [f"p-{c.a}"]


def test_a_node_cannot_read_another_nodes_pods_or_secrets(cluster: Cluster) -> None:
    c, me = cluster, cluster.node_a
    for kind, name in ((POD, f"p-{c.b}"), (SECRET, f"s-{c.b}"), (CONFIG_MAP, f"c-{c.b}"),
                       (SECRET, "unreferenced")):  # fmt: skip
        with pytest.raises(REFUSED):
            me.get(kind, c.ns, name)
    with pytest.raises(REFUSED):
        me.get(NODE, None, c.b)
    with pytest.raises(REFUSED):
        me.get(LEASE, LEASES, c.b)
    for selector in (f"spec.nodeName={c.b}", None, f"spec.nodeName!={c.a}"):
        for namespace in (None, c.ns):
            with pytest.raises(errors.Forbidden):
                me.list_items(POD, namespace, field_selector=selector)
            with pytest.raises(errors.Forbidden):
                list(me.watch(POD, namespace, "0", field_selector=selector, timeout_seconds=1))
    for kind in (SECRET, CONFIG_MAP):  # refused, or empty as a namespace that does not exist
        for namespace in (c.ns, None):
            assert sees_nothing(me, kind, namespace)


def sees_nothing(me: AgentApi, kind: Kind, namespace: str | None) -> bool:
    """Whether a list and a watch of ``kind`` show ``me`` nothing (or are refused)."""
    try:
        listed = me.list_items(kind, namespace)[0]
        events = me.watch(kind, namespace, "0", timeout_seconds=1)
        return listed == [] and all(e["type"] == "BOOKMARK" for e in events)
    except REFUSED:
        return True


def test_a_node_writes_only_its_node_lease_and_pods_status(cluster: Cluster) -> None:
    c, me = cluster, cluster.node_a
    mine = me.get(POD, c.ns, f"p-{c.a}")
    written = me.replace(POD, c.ns, {**mine, "status": {"phase": "Running"}}, "status")
    assert written["status"]["phase"] == "Running"
    node = me.get(NODE, None, c.a)
    me.replace(NODE, None, {**node, "status": {"phase": "Ready"}}, "status")
    lease = me.get(LEASE, LEASES, c.a)
    me.replace(LEASE, LEASES, {**lease, "spec": {"holderIdentity": c.a}})

    theirs_pod = c.admin.get(POD, c.ns, f"p-{c.b}")
    theirs_node = c.admin.get(NODE, None, c.b)
    theirs_lease = c.admin.get(LEASE, LEASES, c.b)
    attempts = [
        lambda: me.replace(POD, c.ns, {**theirs_pod, "status": {"phase": "Failed"}}, "status"),
        lambda: me.replace(POD, c.ns, {**mine, "spec": {**mine["spec"], "nodeName": c.b}}),
        lambda: me.delete(POD, c.ns, f"p-{c.b}"),
        lambda: me.create(POD, c.ns, pod("sneaky", c.a, "unreferenced", f"c-{c.b}")),
        lambda: me.replace(NODE, None, {**theirs_node, "status": {"phase": "Gone"}}, "status"),
        lambda: me.replace(NODE, None, {**theirs_node, "spec": {"unschedulable": True}}),
        lambda: me.delete(NODE, None, c.b),
        lambda: me.create(NODE, None, {"metadata": {"name": f"{c.a}-twin"}}),
        lambda: me.replace(LEASE, LEASES, {**theirs_lease, "spec": {"holderIdentity": c.a}}),
        lambda: me.create(LEASE, LEASES, {"metadata": {"name": f"{c.a}-twin"}, "spec": {}}),
        lambda: me.create(NAMESPACE, None, {"metadata": {"name": f"{c.ns}-mine"}}),
        lambda: me.create(SECRET, c.ns, {"metadata": {"name": "planted"}, "data": {}}),
    ]
    for i, attempt in enumerate(attempts):
        with pytest.raises(REFUSED):
            attempt()
            pytest.fail(f"attempt {i} was allowed")
    assert c.admin.get(POD, c.ns, f"p-{c.b}").get("status", {}).get("phase") != "Failed"
    assert c.admin.get(NODE, None, c.b).get("spec", {}).get("unschedulable") is not True


def test_a_bootstrap_token_is_spent_once_and_only_for_its_node(cluster: Cluster) -> None:
    c = cluster
    node = f"joiner-{secrets.token_hex(3)}"
    token = bootstrap_token(c.admin, node)
    with pytest.raises(credentials.JoinError):
        credentials.join(c.admin.server, token, f"{node}-other")  # bound to another node
    first = credentials.join(c.admin.server, token, node)
    with pytest.raises(credentials.JoinError):
        credentials.join(c.admin.server, token, node)
    for bad in ("", "nonsense", "abcdef.0123456789abcdef", first):
        with pytest.raises(credentials.JoinError):
            credentials.join(c.admin.server, bad, node)
    short = c.admin.call(build_token({"ttlSeconds": 1}))["status"]["token"]
    time.sleep(1.5)
    with pytest.raises(credentials.JoinError):
        credentials.join(c.admin.server, short, node)
    with pytest.raises(REFUSED):  # a node may not mint bootstrap tokens
        AgentApi(c.admin.server, first).call(build_token({}))


def build_token(spec: Obj) -> Any:
    return build.bootstrap_token(spec)


def test_a_restart_reuses_the_credential_and_a_revoked_one_needs_a_new_join(
    cluster: Cluster, tmp_path: Path
) -> None:
    c, node = cluster, f"restarts-{secrets.token_hex(3)}"
    state = tmp_path / "state"
    first = credentials.credential(c.admin.server, node, state, bootstrap_token(c.admin, node))
    assert (state / credentials.FILE).stat().st_mode & 0o777 == 0o600
    again = credentials.credential(c.admin.server, node, state, None)  # the token is spent
    assert again == first
    name = token_id(first)
    url = f"{c.admin.server}/apis/authentication.quaymaster.io/v1/tokens/{name}"
    gone = httpx.delete(url, headers={"Authorization": f"Bearer {c.admin.token}"}, timeout=10)
    assert gone.status_code == 200, gone.text
    deadline = time.monotonic() + 5
    while not credentials.refused(c.admin.server, first, node):
        assert time.monotonic() < deadline, "the revoked credential is still accepted"
        time.sleep(0.1)
    with pytest.raises(credentials.JoinError, match="was refused"):
        credentials.credential(c.admin.server, node, state, None)
    fresh = credentials.credential(c.admin.server, node, state, bootstrap_token(c.admin, node))
    assert fresh != first and credentials.load(state, c.admin.server, node) == fresh


def qm(server: ApiServer, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "QM_SERVER": server.url, "QM_TOKEN": server.token}
    return subprocess.run(
        [sys.executable, "-c", "from app.cli.main import main; raise SystemExit(main())", *args],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def test_qm_creates_lists_and_deletes_bootstrap_tokens(api_server: ApiServer) -> None:
    node = f"cli-{secrets.token_hex(3)}"
    done = qm(api_server, "node", "bootstrap-token", "create", "--node", node, "--ttl", "10m",
              "--description", "rack 7")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert f"for node {node}, 1 use(s)" in done.stderr
    token = done.stdout.strip()
    token_id, secret = token.split(".")
    listed = qm(api_server, "node", "bootstrap-token", "list")
    assert listed.returncode == 0, listed.stderr
    row = next(line for line in listed.stdout.splitlines() if line.startswith(token_id))
    assert node in row and "rack 7" in row and "<never>" in row
    assert secret not in listed.stdout
    spare = qm(api_server, "node", "bootstrap-token", "create").stdout.strip()
    assert qm(api_server, "node", "bootstrap-token", "delete", spare.split(".")[0]).returncode == 0
    with pytest.raises(credentials.JoinError):
        credentials.join(api_server.url, spare, node)  # withdrawn before use
    credential = credentials.join(api_server.url, token, node)
    me = AgentApi(api_server.url, credential)
    assert me.create(NODE, None, {"metadata": {"name": node}})["metadata"]["name"] == node
    me.close()
