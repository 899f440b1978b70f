"""Two (or more) API servers on one database, tenants with tokens and rights in their own
namespace, and the servers' flow-control figures: what the fairness benchmark and its
end-to-end test share."""

from __future__ import annotations

import re
from pathlib import Path

import asyncpg
import httpx

from app.core.kinds import BY_KIND
from app.devstack.apiserver import ApiServer
from app.devstack.supervise import free_port
from app.store.tokens import create_token

API = "/apis/quaymaster.io/v1"
_SAMPLE = re.compile(r"^(\w+)(?:\{(.*)\})? (\S+)$")


def start_servers(env: dict[str, str], token: str, n: int, logs: Path) -> list[ApiServer]:
    """``n`` API servers with ``env`` (``DATABASE_URL``...), each on a free port."""
    servers: list[ApiServer] = []
    for i in range(n):
        port = free_port()
        server = ApiServer(port, token, {**env, "QM_API_PORT": str(port)}, logs / f"api{i}.log")
        server.start(timeout=60)
        servers.append(server)
    return servers


async def tenant(db_url: str, api: httpx.AsyncClient, admin: str, user: str, ns: str) -> str:
    """A token for ``user``, who may edit everything in namespace ``ns`` (created here)."""
    auth = {"Authorization": f"Bearer {admin}"}
    r = await api.post(f"{API}/namespaces", headers=auth, json={"metadata": {"name": ns}})
    assert r.status_code in (201, 409), r.text
    if "RoleBinding" in BY_KIND:  # with RBAC, the user needs a grant in its namespace
        binding = {
            "metadata": {"name": f"{user}-edit", "namespace": ns},
            "roleRef": {"kind": "ClusterRole", "name": "edit"},
            "subjects": [{"kind": "User", "name": user}],
        }
        r = await api.post(f"{API}/namespaces/{ns}/rolebindings", headers=auth, json=binding)
        assert r.status_code in (201, 409), r.text
    pool = await asyncpg.create_pool(db_url, min_size=1, max_size=1)
    try:
        return await create_token(pool, user, ("system:authenticated",), "fairness")
    finally:
        await pool.close()


def parse_metrics(text: str) -> dict[tuple[str, str], float]:
    """``{(name, 'label="v",...'): value}`` from Prometheus text."""
    out: dict[tuple[str, str], float] = {}
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if m and not line.startswith("#"):
            out[(m[1], m[2] or "")] = float(m[3])
    return out


async def flow_figures(api: httpx.AsyncClient, base: str, flow: str) -> dict[str, float]:
    """One server's figures for the global-default level and ``flow`` in it."""
    m = parse_metrics((await api.get(f"{base}/metrics")).text)
    lv = 'level="global-default"'
    fl = f'{lv},flow="{flow}"'
    return {
        "servers": m.get(("qm_apf_api_servers", ""), 0.0),
        "limit": m.get(("qm_apf_level_seats_limit", lv), 0.0),
        "in_use": m.get(("qm_apf_flow_seats_in_use", fl), 0.0),
        "queued": m.get(("qm_apf_flow_queued", fl), 0.0),
        "rejected": m.get(("qm_apf_flow_rejected_total", fl), 0.0),
        "dispatched": m.get(("qm_apf_flow_dispatched_total", fl), 0.0),
    }
