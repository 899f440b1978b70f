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


def revoke_token(admin: AgentApi, credential: str) -> None:
    url = f"{admin.server}/apis/authentication.quaymaster.io/v1/tokens/{token_id(credential)}"
    gone = httpx.delete(url, headers={"Authorization": f"Bearer {admin.token}"}, timeout=10)
    assert gone.status_code == 200, gone.text


def wait_refused(server: str, credential: str, node: str) -> None:
    deadline = time.monotonic() + 5
    while not credentials.refused(server, credential, node):
        assert time.monotonic() < deadline, f"{node}'s credential is still accepted"
        time.sleep(0.1)


def test_a_token_bound_to_no_node_cannot_take_over_a_node_with_a_live_credential(
    cluster: Cluster,
) -> None:
    c = cluster
    node = f"held-{secrets.token_hex(3)}"
    first = credentials.join(c.admin.server, bootstrap_token(c.admin, node), node)
    any_name = bootstrap_token(c.admin, None, uses=2)
    for name in (node, c.a):  # one joined a moment ago, one running with its Node and pods
        with pytest.raises(credentials.JoinError, match=f"--node {name}") as refused:
            credentials.join(c.admin.server, any_name, name)
        assert "revoke" in str(refused.value) and "not spent" in str(refused.value)
    listed = c.admin.call(build.Request("GET", build.AUTHN + "/bootstraptokens"))["items"]
    mine = next(t for t in listed if t["metadata"]["name"] == any_name.split(".")[0])
    assert mine["status"]["usesLeft"] == 2  # refusals spend nothing
    # The operator's two ways in: a token bound to the name, or the old credential revoked.
    # A re-join replaces the machine: the credential it held before is revoked with it.
    rejoined = credentials.join(c.admin.server, bootstrap_token(c.admin, node), node)
    assert rejoined != first and not credentials.refused(c.admin.server, rejoined, node)
    wait_refused(c.admin.server, first, node)
    revoke_token(c.admin, rejoined)
    wait_refused(c.admin.server, rejoined, node)
    fresh = credentials.join(c.admin.server, any_name, node)
    assert not credentials.refused(c.admin.server, fresh, node)
    new_name = f"new-{secrets.token_hex(3)}"  # a name nobody holds: any token joins it
    assert credentials.join(c.admin.server, any_name, new_name)


def test_deleting_a_node_revokes_its_credentials(cluster: Cluster) -> None:
    c = cluster
    gone, kept, held = (f"{w}-{secrets.token_hex(3)}" for w in ("gone", "kept", "held"))
    joined = {n: credentials.join(c.admin.server, bootstrap_token(c.admin, n), n)
              for n in (gone, kept, held)}  # fmt: skip
    for node, token in joined.items():
        me = AgentApi(c.admin.server, token)
        me.create(NODE, None, {"metadata": {"name": node}})
        me.close()
    c.admin.delete(NODE, None, gone)
    wait_refused(c.admin.server, joined[gone], gone)
    assert not credentials.refused(c.admin.server, joined[kept], kept)
    with pytest.raises(errors.Unauthorized):  # a revoked credential creates no Node again
        AgentApi(c.admin.server, joined[gone]).create(NODE, None, {"metadata": {"name": gone}})
    # Any token may join the name again: nothing live holds it any more.
    assert credentials.join(c.admin.server, bootstrap_token(c.admin, None), gone)

    # A finalizer on the Node does not keep its credential alive while deletion waits.
    node = c.admin.get(NODE, None, held)
    node["metadata"]["finalizers"] = ["example.com/hold"]
    c.admin.replace(NODE, None, node)
    c.admin.delete(NODE, None, held)
    wait_refused(c.admin.server, joined[held], held)
    node = c.admin.get(NODE, None, held)
    assert node["metadata"].get("deletionTimestamp")
    node["metadata"]["finalizers"] = []
    c.admin.replace(NODE, None, node)


def test_a_node_may_not_change_what_administrators_steer_workloads_with(
    cluster: Cluster,
) -> None:
    c = cluster
    node = f"restricted-{secrets.token_hex(3)}"
    me = AgentApi(
        c.admin.server, credentials.join(c.admin.server, bootstrap_token(c.admin, node), node)
    )
    with pytest.raises(errors.Forbidden, match=r"metadata\.labels\[node-restriction"):
        me.create(NODE, None, {"metadata": {"name": node, "labels": {
            "node-restriction.quaymaster.io/pool": "gpu"}}})  # fmt: skip
    me.create(NODE, None, {"metadata": {"name": node, "labels": {HOST: node}}})
    # What administrators set: a restricted label, a role, a dedicated taint, a cordon.
    admin_labels = {"node-restriction.quaymaster.io/pool": "gpu",
                    "node-role.kubernetes.io/control-plane": ""}  # fmt: skip
    steer = {"unschedulable": True, "taints": [DEDICATED]}
    c.admin.patch(NODE, None, node, {"metadata": {"labels": admin_labels}, "spec": steer})
    refusals = [
        ({"metadata": {"labels": {"node-restriction.quaymaster.io/pool": "cpu"}}},
         r"metadata\.labels\[node-restriction\.quaymaster\.io/pool\]"),
        ({"metadata": {"labels": {"node-restriction.quaymaster.io/pool": None}}},
         r"metadata\.labels\[node-restriction\.quaymaster\.io/pool\]"),
        ({"metadata": {"labels": {"team.node-restriction.quaymaster.io/x": "y"}}},
         r"metadata\.labels\[team\.node-restriction"),
        ({"metadata": {"labels": {"node-role.kubernetes.io/control-plane": None}}},
         r"metadata\.labels\[node-role\.kubernetes\.io/control-plane\]"),
        ({"metadata": {"labels": {"node-role.kubernetes.io/worker": ""}}},
         r"metadata\.labels\[node-role\.kubernetes\.io/worker\]"),
        ({"spec": {"unschedulable": False}}, r"spec\.unschedulable"),
        ({"spec": {"unschedulable": None}}, r"spec\.unschedulable"),
        ({"spec": {"taints": []}}, r"spec\.taints\[dedicated\]"),
        ({"spec": {"taints": [{**DEDICATED, "effect": "PreferNoSchedule"}]}},
         r"spec\.taints\[dedicated\]"),
        ({"spec": {"podCIDR": "10.99.0.0/24"}}, r"spec\.podCIDR"),
    ]  # fmt: skip
    for patch, field in refusals:
        with pytest.raises(errors.Forbidden, match=field):
            me.patch(NODE, None, node, patch)
            pytest.fail(f"{patch} was allowed")
    current = me.get(NODE, None, node)
    with pytest.raises(errors.Forbidden, match=r"spec\.unschedulable"):  # a PUT as well
        me.replace(NODE, None, {**current, "spec": {**current["spec"], "unschedulable": False}})
    stored = c.admin.get(NODE, None, node)
    assert stored["spec"]["unschedulable"] is True and stored["spec"]["taints"] == [DEDICATED]
    assert {k: stored["metadata"]["labels"][k] for k in admin_labels} == admin_labels

    # What the agent writes itself still goes through: its labels, its pressure taint, status.
    me.patch(NODE, None, node, {"metadata": {"labels": {HOST: "box-1", "app/role": "x"}}})
    current = me.get(NODE, None, node)
    pressure = {"key": "node.quaymaster.io/memory-pressure", "effect": "NoSchedule"}
    spec = {**current["spec"], "taints": [*current["spec"]["taints"], pressure]}
    tainted = me.replace(NODE, None, {**current, "spec": spec})
    assert pressure in tainted["spec"]["taints"] and DEDICATED in tainted["spec"]["taints"]
    untainted = me.replace(NODE, None, {**tainted, "spec": {**spec, "taints": [DEDICATED]}})
    assert untainted["spec"]["taints"] == [DEDICATED]
    me.replace(NODE, None, {**untainted, "status": {"phase": "Ready"}}, "status")
    # Administrators themselves are not restricted.
    undo = {"node-restriction.quaymaster.io/pool": None}
    c.admin.patch(
        NODE, None, node, {"metadata": {"labels": undo}, "spec": {"unschedulable": False}}
    )
    me.close()


HOST = "kubernetes.io/hostname"
DEDICATED = {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}
