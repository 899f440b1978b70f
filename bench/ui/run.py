"""Web UI benchmark: the REST lists and UI pages an operator opens, with 10,000 nodes and
300,000 pods in the cluster.

    .venv/bin/python -m bench.ui.run [--nodes 10000] [--pods 300000] [--repeats 50]
                                     [--pages "/ui/pods,/ui/nodes,..."] [--no-restart]

A fresh database (``alembic upgrade head``) and one API server (which runs the revisioner);
the cluster of :mod:`bench.ui.dataset` is COPYed in, and timing starts once the server's
watch cache holds all of it (a list's resourceVersion reaches the last object's revision).
Each REST list and each UI page is requested ``--repeats`` times, one at a time on a kept-alive
connection: p50/p99 of the client's time on loopback, response bytes, and the ``Server-Timing``
header's figures when the server sets one. UI pages need a session: the bench signs in with the
bootstrap token (``POST /ui/signin``); a page answering 404 is reported as missing. Then the
server is restarted, to time a start that loads the whole cluster from the revision log.
Writes ``bench/results/ui-<timestamp>.json``; ``--nodes 500 --pods 15000`` takes about a minute.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from typing import Any

import httpx
import psycopg

from app.core.kinds import API_VERSION
from app.stream.revisioner import streaming
from bench.common import Stack, rss_mib, write_result
from bench.scheduler.run import wait_for
from bench.ui import dataset
from bench.ui.measure import Target, sign_in, time_target

API = f"/apis/{API_VERSION}"
DEFAULT_PAGES = (
    "/ui/,/ui/pods,/ui/pods?phase=Pending,/ui/pods?ns={ns},"
    "/ui/workloads/deployments/{ns}/{deployment},/ui/nodes,/ui/nodes/{node}"
)
VARIANTS = 10  # different namespaces, apps and nodes rotated over within one target


def picks(sizes: dataset.Sizes) -> list[dict[str, str]]:
    """Namespaces, Deployments and nodes that exist, spread over the cluster."""
    out = []
    for k in range(VARIANTS):
        d = (k * 97 + 3) % sizes.deployments
        ns, dep = dataset.deployment_of(sizes, d)
        node = dataset.node_name((k * 1009 + 11) % sizes.nodes)
        out.append({"ns": ns, "deployment": dep, "node": node})
    return out


def rest_targets(sizes: dataset.Sizes) -> list[Target]:
    p = picks(sizes)

    def each(fmt: str) -> list[str]:
        return [API + fmt.format(**v) for v in p]

    return [
        Target("pods_all_limit50", each("/pods?limit=50")),
        Target("pods_namespace_limit50", each("/namespaces/{ns}/pods?limit=50")),
        Target("pods_namespace_all", each("/namespaces/{ns}/pods")),
        Target("pods_label_all_namespaces", each("/pods?labelSelector=app%3D{deployment}")),
        Target(
            "pods_label_in_namespace",
            each("/namespaces/{ns}/pods?labelSelector=app%3D{deployment}"),
        ),
        Target("pods_pending_limit50", each("/pods?fieldSelector=status.phase%3DPending&limit=50")),
        Target("pods_pending_all", each("/pods?fieldSelector=status.phase%3DPending")),
        Target("pods_on_node", each("/pods?fieldSelector=spec.nodeName%3D{node}")),
        Target("nodes_limit50", each("/nodes?limit=50")),
        Target("deployment_get", each("/namespaces/{ns}/deployments/{deployment}")),
    ]


def page_targets(sizes: dataset.Sizes, pages: str) -> list[Target]:
    p = picks(sizes)
    return [Target(page, [page.format(**v) for v in p]) for page in pages.split(",") if page]


def list_revision(stack: Stack) -> int:
    r = httpx.get(f"{stack.api_url}{API}/namespaces?limit=1", timeout=30,
                  headers={"Authorization": f"Bearer {stack.token}"})  # fmt: skip
    return int(r.json()["metadata"]["resourceVersion"]) if r.status_code == 200 else -1


def stream_at(db: psycopg.Connection[Any]) -> int:
    row = db.execute("SELECT last_revision FROM qm_stream_state").fetchone()
    return int(row[0]) if row else 0


def load(stack: Stack, db: psycopg.Connection[Any], sizes: dataset.Sizes) -> dict[str, Any]:
    wait_for("the revisioner to stream", lambda: streaming(db), 120)
    base = stream_at(db)
    t0 = time.monotonic()
    n = dataset.load(db, sizes)
    copy_s = time.monotonic() - t0
    target = base + n
    wait_for("the API's cache to hold the cluster", lambda: list_revision(stack) >= target, 3600)
    return {"objects": n, "copy_s": round(copy_s, 1),
            "in_cache_s": round(time.monotonic() - t0, 1), "revision": target}  # fmt: skip


def measure(stack: Stack, sizes: dataset.Sizes, args: argparse.Namespace) -> dict[str, Any]:
    auth = {"Authorization": f"Bearer {stack.token}"}
    with httpx.Client(base_url=stack.api_url, headers=auth, timeout=120) as c:
        rest = {t.name: time_target(c, t, args.repeats) for t in rest_targets(sizes)}
    for name, r in rest.items():
        print(f"  {name:28} p50 {r.get('p50_ms')} p99 {r.get('p99_ms')} ms, "
              f"{r.get('bytes_p50')} B", flush=True)  # fmt: skip
    cookie = sign_in(stack.api_url, stack.token)
    ui: dict[str, Any] = {"signed_in": cookie is not None, "pages": {}}
    if cookie is not None:
        with httpx.Client(base_url=stack.api_url, headers={"Cookie": cookie}, timeout=120) as c:
            for t in page_targets(sizes, args.pages):
                r = time_target(c, t, args.repeats)
                ui["pages"][t.name] = r
                print(f"  {t.name:44} {r.get('p50_ms', 'missing')} / {r.get('p99_ms', '')} ms"
                      f" {r.get('bytes_p50', '')} B", flush=True)  # fmt: skip
    return {"rest": rest, "ui": ui}


def restart(stack: Stack, revision: int) -> dict[str, Any]:
    """Stop and start the server: the start reads the whole cluster from the revision log."""
    stack.stop_api()
    ready_s = stack.start_api()
    assert stack.api is not None
    return {"ready_s": round(ready_s, 1), "caught_up": list_revision(stack) >= revision,
            "rss_mib": round(rss_mib(stack.api.pid))}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=10_000)
    ap.add_argument("--pods", type=int, default=300_000)
    ap.add_argument("--zones", type=int, default=10)
    ap.add_argument("--namespaces", type=int, default=100)
    ap.add_argument("--deployments", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=50)
    ap.add_argument("--pages", default=DEFAULT_PAGES, help="comma-separated UI paths; "
                    "{ns}, {deployment} and {node} are filled in")  # fmt: skip
    ap.add_argument("--no-restart", action="store_true")
    args = ap.parse_args()
    sizes = dataset.Sizes(args.nodes, args.pods, args.zones, args.namespaces,
                          min(args.deployments, args.pods))  # fmt: skip
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    stack = Stack()
    try:
        stack.start_api()
        assert stack.api is not None
        with psycopg.connect(stack.url, autocommit=True) as db:
            loaded = load(stack, db, sizes)
        print(f"loaded {loaded}", flush=True)
        time.sleep(5)  # the cluster summary's first read, and the collector settling
        rss = round(rss_mib(stack.api.pid))
        figures = measure(stack, sizes, args)
        restarted = None if args.no_restart else restart(stack, loaded["revision"])
    finally:
        stack.close()
    data = {
        "benchmark": "ui",
        "parameters": {**vars(sizes), "repeats": args.repeats, "pages": args.pages},
        "load": loaded,
        "api_rss_mib": rss,
        "restart": restarted,
        **figures,
        "notes": [
            "times are the client's on loopback, one request at a time on a kept-alive "
            "connection: server time plus a loopback round trip",
            "server_timing_* appear only when the server sets a Server-Timing header",
            "a page answering 404 is reported as missing (not built), not as a failure",
            "api_rss_mib: the API server process (not its revisioner child) after the load",
        ],
    }
    path = write_result("ui", data)
    print(json.dumps({"rss_mib": rss, "restart": restarted}), f"\nwrote {path}")


if __name__ == "__main__":
    main()
