"""Config rollouts: the ConfigMaps and Secrets a Deployment's pod template references become
part of what it rolls out (ADR 0047).

Before the Deployment controller hashes its template, :func:`pin` rewrites every reference to
a ConfigMap or Secret (volumes, ``env[].valueFrom``, ``envFrom``) to an immutable *snapshot*
of that object's current content, named ``<source>-<hash>``, where the hash covers the
Deployment's uid, the source's kind and name, and its content's digest. The pinned template is
what the controller hashes and gives the new ReplicaSet, so:

* a change of a referenced object's content changes the snapshot name, hence the template
  hash: a new ReplicaSet, rolled out like any template change (gated by readiness, paused by
  ``spec.paused``, bounded by ``maxSurge``/``maxUnavailable``);
* each ReplicaSet's pods read the snapshot their template names, so old pods keep the old
  config while new ones get the new, and putting an old ReplicaSet's template back
  (``qm rollout undo``) brings its config back with it: a reference that already names a
  snapshot is left as it is;
* a referenced object that is deleted keeps the snapshot the newest ReplicaSet reads, so its
  deletion rolls nothing out (pods that could not start);
* a re-encryption of a Secret changes no digest (the shell passes a digest of the plaintext,
  ``app.store.secret_keys.content_digest``), so it rolls nothing out.

Snapshots are owned by the Deployment (the garbage collector removes them with it) and carry
``SNAPSHOT_LABEL``; :func:`unused` names the ones no kept ReplicaSet and not the pinned template
references any more, which the controller deletes with the history they belonged to. A
reference to an object that does not exist (yet, or ``optional``) and was never snapshotted
stays as written.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field

from app.core.controllers.plan import Obj, owner_reference
from app.core.kinds import API_VERSION

SNAPSHOT_LABEL = "quaymaster.io/config-snapshot"
SOURCE_ANNOTATION = "quaymaster.io/snapshot-of"
MAX_NAME = 253
Ref = tuple[str, str]  # (kind, name)


@dataclass(frozen=True)
class Source:
    """A referenced ConfigMap or Secret as the shell read it: the object (a Secret's data in
    the clear) and the digest of its content (``digest`` for a ConfigMap; a keyed digest of
    the plaintext for a Secret, computed by the shell)."""

    obj: Obj
    digest: str

    @property
    def is_snapshot(self) -> bool:
        labels = (self.obj.get("metadata") or {}).get("labels") or {}
        return labels.get(SNAPSHOT_LABEL) == "true"


@dataclass(frozen=True)
class Configs:
    """What the shell read for one reconcile: the referenced objects by (kind, name), and
    the snapshots the Deployment owns."""

    sources: dict[Ref, Source] = field(default_factory=dict)
    snapshots: tuple[Obj, ...] = ()


@dataclass(frozen=True)
class Pinned:
    template: Obj
    creates: tuple[Obj, ...] = ()


def digest(obj: Obj) -> str:
    """A ConfigMap's content digest: SHA-256 of its canonical ``data`` and ``binaryData``."""
    content = {"data": obj.get("data") or {}, "binaryData": obj.get("binaryData") or {}}
    text = json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def _slots(template: Obj) -> Iterator[tuple[Obj, str, str]]:
    """``(holder, key, kind)`` for every reference in a pod template: ``holder[key]`` is the
    name of a ``kind`` object."""
    spec: Obj = template["spec"] if isinstance(template.get("spec"), dict) else {}
    for vol in spec.get("volumes") or []:
        if isinstance(vol, dict) and isinstance(vol.get("configMap"), dict):
            yield vol["configMap"], "name", "ConfigMap"
        if isinstance(vol, dict) and isinstance(vol.get("secret"), dict):
            yield vol["secret"], "secretName", "Secret"
    for key in ("initContainers", "containers"):
        for c in spec.get(key) or []:
            if not isinstance(c, dict):
                continue
            for var in c.get("env") or []:
                src = var.get("valueFrom") if isinstance(var, dict) else None
                if isinstance(src, dict):
                    for which, kind in (
                        ("configMapKeyRef", "ConfigMap"),
                        ("secretKeyRef", "Secret"),
                    ):
                        if isinstance(src.get(which), dict):
                            yield src[which], "name", kind
            for src in c.get("envFrom") or []:
                if isinstance(src, dict):
                    for which, kind in (("configMapRef", "ConfigMap"), ("secretRef", "Secret")):
                        if isinstance(src.get(which), dict):
                            yield src[which], "name", kind


def references(template: Obj) -> set[Ref]:
    """The ConfigMaps and Secrets a pod template names."""
    return {(kind, str(holder.get(key))) for holder, key, kind in _slots(template)
            if holder.get(key)}  # fmt: skip


def snapshot_name(dep: Obj, kind: str, name: str, content: str) -> str:
    seed = f"{dep['metadata']['uid']}\n{kind}\n{name}\n{content}"
    h = hashlib.sha256(seed.encode()).hexdigest()[:10]
    return f"{name[: MAX_NAME - 11].rstrip('.-')}-{h}"


def pin(dep: Obj, template: Obj, configs: Configs, current: Obj | None = None) -> Pinned:
    """The template with every reference to an existing, non-snapshot source rewritten to its
    snapshot, and the snapshots to create (those the Deployment does not own yet).

    A source that is gone keeps the snapshot ``current`` (the newest ReplicaSet's template)
    reads, if any: deleting a ConfigMap must not roll out pods that cannot start."""
    pinned = copy.deepcopy(template)
    have = {(s["kind"], s["metadata"]["name"]) for s in configs.snapshots}
    running = _running(configs, current)
    creates: dict[Ref, Obj] = {}
    for holder, key, kind in _slots(pinned):
        source = configs.sources.get((kind, str(holder.get(key))))
        if source is None and (kind, str(holder.get(key))) in running:
            holder[key] = running[(kind, str(holder[key]))]
            continue
        if source is None or source.is_snapshot:
            continue
        name = snapshot_name(dep, kind, str(holder[key]), source.digest)
        if (kind, name) not in have and (kind, name) not in creates:
            creates[(kind, name)] = snapshot(dep, source.obj, name)
        holder[key] = name
    return Pinned(pinned, tuple(creates.values()))


def _running(configs: Configs, current: Obj | None) -> dict[Ref, str]:
    """(kind, source name) -> the snapshot of it that ``current`` references."""
    if current is None:
        return {}
    used = references(current)
    out: dict[Ref, str] = {}
    for s in configs.snapshots:
        meta = s["metadata"]
        if (s["kind"], meta["name"]) in used:
            source = (meta.get("annotations") or {}).get(SOURCE_ANNOTATION)
            if source:
                out[(s["kind"], str(source))] = meta["name"]
    return out


def snapshot(dep: Obj, source: Obj, name: str) -> Obj:
    """An immutable copy of ``source`` named ``name``, owned by the Deployment."""
    meta = source["metadata"]
    body: Obj = {k: copy.deepcopy(source[k]) for k in ("type", "data", "binaryData") if k in source}
    return {
        "apiVersion": API_VERSION,
        "kind": source["kind"],
        "metadata": {
            "name": name,
            "namespace": dep["metadata"].get("namespace", ""),
            "labels": {SNAPSHOT_LABEL: "true"},
            "annotations": {SOURCE_ANNOTATION: str(meta["name"])},
            "ownerReferences": [owner_reference(dep)],
        },
        **body,
        "immutable": True,
    }


def unused(configs: Configs, templates: list[Obj]) -> list[Obj]:
    """The Deployment's snapshots none of ``templates`` (the pinned template and those of the
    ReplicaSets it keeps) references."""
    kept: set[Ref] = set()
    for t in templates:
        kept |= references(t)
    return [s for s in configs.snapshots
            if (s["kind"], s["metadata"]["name"]) not in kept
            and not (s.get("metadata") or {}).get("deletionTimestamp")]  # fmt: skip
