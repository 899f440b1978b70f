"""The Deployment controller's shell: read the Deployment, its ReplicaSets and their pods, the
ConfigMaps and Secrets its template references and its snapshots of them, plan, apply."""

from __future__ import annotations

from app.core.controllers import deployment
from app.core.controllers.deployment import config
from app.core.controllers.plan import Outcome
from app.core.errors import NotFound
from app.core.kinds import BY_KIND
from app.store import secret_keys
from app.store.store import Store, Stored
from workers.controllers.apply import apply_plan, with_version
from workers.runtime import Runtime, key_text

DEPLOYMENT = BY_KIND["Deployment"]
RS = BY_KIND["ReplicaSet"]
POD = BY_KIND["Pod"]
CONFIG_KINDS = ("ConfigMap", "Secret")


async def reconcile_key(rt: Runtime, namespace: str, name: str, now: float) -> Outcome:
    async with rt.locked(key_text("Deployment", namespace, name)):
        store = await rt.store()
        try:
            dep = await store.get(DEPLOYMENT, namespace, name)
        except NotFound:
            return Outcome(gone=True)
        replicasets = await store.owned(RS, namespace, [dep.uid])
        pods = await store.owned(POD, namespace, [rs.uid for rs in replicasets])
        plan = deployment.reconcile(
            with_version(dep),
            [with_version(rs) for rs in replicasets],
            [p.obj for p in pods],
            now,
            await read_configs(store, dep, replicasets),
        )
        return await apply_plan(store, dep, plan, now=now)


async def read_configs(store: Store, dep: Stored, replicasets: list[Stored]) -> config.Configs:
    """The objects the template references (a Secret's data opened, with the digest of its
    plaintext, so a re-encryption changes nothing), and the Deployment's snapshots of the
    kinds it or its ReplicaSets reference (none: no query)."""
    namespace = dep.row["namespace"]
    template = (dep.obj.get("spec") or {}).get("template") or {}
    refs = config.references(template)
    used = {k for k, _ in refs}
    for rs in replicasets:
        used |= {k for k, _ in config.references((rs.obj.get("spec") or {}).get("template") or {})}
    sources: dict[config.Ref, config.Source] = {}
    snapshots = []
    for kind_name in CONFIG_KINDS:
        if kind_name not in used:
            continue
        kind = BY_KIND[kind_name]
        names = sorted(n for k, n in refs if k == kind_name)
        for s in await store.get_many(kind, namespace, names) if names else []:
            sources[(kind_name, s.row["name"])] = _source(kind_name, s)
        snapshots += [
            s.obj
            for s in await store.owned(kind, namespace, [dep.uid])
            if (s.obj["metadata"].get("labels") or {}).get(config.SNAPSHOT_LABEL) == "true"
        ]
    return config.Configs(sources, tuple(snapshots))


def _source(kind: str, stored: Stored) -> config.Source:
    if kind == "Secret":
        return config.Source(secret_keys.open_object(stored.obj),
                             secret_keys.content_digest(stored.obj))  # fmt: skip
    return config.Source(stored.obj, config.digest(stored.obj))
