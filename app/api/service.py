"""What the API does with objects: decode, admit, write conditionally, and answer from the
watch cache.

Client-facing ``resourceVersion`` values are stream revisions; the store's conditions are row
versions. This module is the one place that maps between them, using the cache: a client's
version is current only if it equals the cached object's revision, in which case the cached row
version is the condition sent to the database (which still has the last word).
"""

from __future__ import annotations

import base64
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import msgspec

from app.api.policy import police
from app.api.request_context import write_context
from app.core import errors
from app.core.admission import admit
from app.core.fields import parse_field_selector
from app.core.kinds import API_VERSION, BY_KIND, Kind
from app.core.labels import parse_selector
from app.core.objects import split
from app.core.patch import json_patch, merge_patch
from app.store import secret_keys
from app.store.store import Store
from app.store.tokens import User
from app.stream.cache import Cached, Matcher, WatchCache
from app.stream.index import terms_of

MAX_BODY = 3 * 1024 * 1024
_dec = msgspec.json.Decoder()
_enc = msgspec.json.Encoder()
RESET_STATUS_ON_CREATE = {
    "Pod",
    "Deployment",
    "ReplicaSet",
    "Job",
    "CronJob",
    "Service",
    "PodDisruptionBudget",
    "ResourceQuota",
}
# How long a patch without a resourceVersion keeps re-applying itself after losing a race.
PATCH_RETRY_S = 10.0
MERGE = "application/merge-patch+json"
JSONPATCH = "application/json-patch+json"


def decode_body(body: bytes) -> Any:
    if len(body) > MAX_BODY:
        raise errors.RequestEntityTooLarge(
            f"the request body is {len(body)} bytes; the limit is {MAX_BODY}"
        )
    if not body.strip():
        raise errors.BadRequest("the request body is empty")
    try:
        return _dec.decode(body)
    except msgspec.DecodeError as exc:
        raise errors.BadRequest(f"the request body is not valid JSON: {exc}") from exc


def _object(body: bytes) -> dict[str, Any]:
    obj = decode_body(body)
    if not isinstance(obj, dict):
        raise errors.BadRequest("the request body must be a JSON object")
    _metadata(obj, str(obj.get("kind", "")), None)
    return obj


def _metadata(obj: dict[str, Any], kind: str, name: str | None) -> dict[str, Any]:
    """``obj``'s metadata (created empty when absent); Invalid when it is not an object."""
    meta = obj.setdefault("metadata", {})
    if not isinstance(meta, dict):
        raise errors.invalid(
            kind, name, [errors.Cause("metadata", "FieldValueInvalid", "must be an object")]
        )
    return meta


def _bind(kind: Kind, meta: dict[str, Any], namespace: str, name: str | None = None) -> None:
    """Fill in the name and namespace the request URL names; a body that names another object
    is refused, never silently redirected to this one."""
    if name is not None:
        if meta.get("name") not in (None, name):
            raise errors.BadRequest(
                f"the name of the object ({meta.get('name')!r}) does not match the name on the "
                f"URL ({name!r})"
            )
        meta["name"] = name
    if kind.namespaced:
        given = meta.get("namespace")
        if given not in (None, "", namespace):
            raise errors.BadRequest(
                "the namespace of the provided object does not match the namespace sent on "
                f"the request ({given!r} != {namespace!r})"
            )
        meta["namespace"] = namespace


def _pins_version(media: str, ops: Any) -> bool:
    """Whether the patch document itself names ``metadata.resourceVersion`` (a precondition),
    rather than the patched object merely carrying over the version it was read at."""
    if media == MERGE:
        meta = ops.get("metadata") if isinstance(ops, dict) else None
        return isinstance(meta, dict) and meta.get("resourceVersion") not in (None, "")
    return isinstance(ops, list) and any(
        isinstance(op, dict) and op.get("path") in ("", "/metadata", "/metadata/resourceVersion")
        for op in ops
    )


def _parse_rv(value: Any) -> int:
    try:
        rv = int(str(value))
    except ValueError as exc:
        raise errors.BadRequest(f"invalid resourceVersion {value!r}: must be an integer") from exc
    if rv < 0:
        raise errors.BadRequest(f"invalid resourceVersion {value!r}")
    return rv


@dataclass
class Objects:
    store: Store
    cache: WatchCache
    # Checks of a write's final object before it is stored (the RBAC escalation check).
    guards: list[Callable[[Kind, dict[str, Any], User], None]] = field(default_factory=list)

    # -- reads -----------------------------------------------------------------------
    def get(self, kind: Kind, namespace: str, name: str) -> Cached:
        c = self.cache.get(kind, namespace, name)
        if c is None:
            raise errors.NotFound(f'{kind.plural} "{name}" not found', kind=kind.plural, name=name)
        return c

    def matchers(
        self, kind: Kind, label_selector: str | None, field_selector: str | None
    ) -> tuple[Matcher | None, Matcher | None]:
        labels = parse_selector(label_selector) if label_selector else None
        allowed = ["metadata.name", "metadata.namespace", *kind.field_columns]
        fields = parse_field_selector(field_selector, allowed) if field_selector else None
        return (
            labels.matches if labels else None,
            (lambda f: fields.matches(f.get)) if fields else None,
        )

    async def list(
        self,
        kind: Kind,
        namespace: str | None,
        *,
        label_selector: str | None,
        field_selector: str | None,
        limit: int | None,
        cont: str | None,
        resource_version: str | None,
    ) -> tuple[list[bytes], int, str | None]:
        if resource_version not in (None, "", "0"):
            await self.cache.wait_revision(_parse_rv(resource_version))
        labels, fields = self.matchers(kind, label_selector, field_selector)
        after, revision = (None, self.cache.revision)
        if cont:
            after, revision = _decode_continue(cont)
        items: list[bytes] = []
        last: Cached | None = None
        more = False
        source = self._source(kind, namespace, after, label_selector, field_selector, limit)
        for c in source:
            if (labels and not labels(c.labels)) or (fields and not fields(c.fields)):
                continue
            if limit and len(items) >= limit:
                more = True
                break
            items.append(c.raw)
            last = c
        token = _encode_continue((last.namespace, last.name), revision) if more and last else None
        return items, revision, token

    def _source(
        self,
        kind: Kind,
        namespace: str | None,
        after: tuple[str, str] | None,
        label_selector: str | None,
        field_selector: str | None,
        limit: int | None,
    ) -> Iterator[Cached]:
        """The objects a list tests, in key order: the selector index's candidates when its
        equality terms narrow the kind, else the whole kind (or namespace)."""
        allowed = kind.field_columns
        terms = terms_of(label_selector, field_selector, allowed)
        keys = self.cache.candidates(kind, namespace, after, terms, limit) if terms else None
        if keys is None:
            yield from self.cache.iter(kind, namespace, after)
            return
        for ns, name in keys:
            c = self.cache.get(kind, ns, name)  # a scoped cache leaves out what is out of reach
            if c is not None:
                yield c

    # -- writes ----------------------------------------------------------------------
    async def create(
        self, kind: Kind, namespace: str, body: bytes, user: User, dry_run: bool = False
    ) -> Cached:
        obj = _object(body)
        meta = obj["metadata"]
        _bind(kind, meta, namespace)
        if kind.namespaced:
            self._namespace_open(namespace)
        else:
            meta.pop("namespace", None)
        for key in (
            "uid",
            "resourceVersion",
            "creationTimestamp",
            "deletionTimestamp",
            "generation",
        ):
            meta.pop(key, None)
        if kind.kind in RESET_STATUS_ON_CREATE:
            obj["status"] = {"phase": "Pending"} if kind.kind == "Pod" else {}
        self._resolve_priority(kind, obj)
        admitted = admit(kind, obj, None)
        police(self.cache, kind, admitted, None)
        for guard in self.guards:
            guard(kind, admitted, user)
        if dry_run:  # admitted and answered, never stored (dryRun=All)
            return _dry_run(kind, self._unused_name(kind, admitted), None)
        stored = await self.store.create(kind, admitted, ctx=write_context(user))
        return await self.cache.wait_for(stored.uid, stored.row_version)

    async def replace(
        self, kind: Kind, namespace: str, name: str, body: bytes, user: User, status: bool = False,
        dry_run: bool = False,
    ) -> Cached:  # fmt: skip
        obj = _object(body)
        meta = obj["metadata"]
        _bind(kind, meta, namespace, name)
        if meta.get("resourceVersion") in (None, ""):
            raise errors.invalid(
                kind.kind,
                name,
                [
                    errors.Cause(
                        "metadata.resourceVersion",
                        "FieldValueRequired",
                        "must be specified for an update",
                    )
                ],
            )
        current = await self._current(kind, namespace, name, _parse_rv(meta["resourceVersion"]))
        return await self._write(kind, obj, current, user, status, "update", dry_run)

    async def patch(
        self,
        kind: Kind,
        namespace: str,
        name: str,
        body: bytes,
        content_type: str,
        user: User,
        status: bool = False,
        dry_run: bool = False,
    ) -> Cached:
        ops = decode_body(body)
        media = content_type.split(";")[0].strip().lower()
        if media not in (MERGE, JSONPATCH):
            raise errors.UnsupportedMediaType(
                f"the patch content type {media!r} is not supported; use {MERGE} or {JSONPATCH}"
            )
        deadline = time.monotonic() + PATCH_RETRY_S
        while True:
            current = self.get(kind, namespace, name)
            base = _plain(kind, current)
            patched = merge_patch(base, ops) if media == MERGE else json_patch(base, ops)
            if not isinstance(patched, dict):
                raise errors.BadRequest("the patched object is not a JSON object")
            meta = _metadata(patched, kind.kind, name)
            wanted = meta.get("resourceVersion")
            moved = wanted not in (None, "") and str(wanted) != str(current.revision)
            pinned = moved or (wanted not in (None, "") and _pins_version(media, ops))
            if moved:
                await self._current(kind, namespace, name, _parse_rv(wanted))
            meta["resourceVersion"] = str(current.revision)
            _bind(kind, meta, namespace, name)
            if meta.get("uid") in (None, ""):
                meta["uid"] = current.uid
            try:
                return await self._write(kind, patched, current, user, status, "patch", dry_run)
            except errors.Conflict:
                if pinned or time.monotonic() > deadline:
                    raise
            # Someone else wrote first: re-apply the patch to the version now committed.
            latest = await self.store.get(kind, namespace, name)
            await self.cache.wait_for(latest.uid, latest.row_version)

    async def _write(
        self, kind: Kind, obj: dict[str, Any], current: Cached, user: User, status: bool, verb: str,
        dry_run: bool = False,
    ) -> Cached:  # fmt: skip
        old = _plain(kind, current)
        if status:
            merged = dict(old)
            merged["status"] = obj.get("status") if obj.get("status") is not None else {}
            if merged["status"] == old.get("status"):
                return current  # nothing to write: same resourceVersion, as Kubernetes does
            merged = admit(kind, merged, old)  # the whole object stays valid, status included
            if dry_run:
                return _dry_run(kind, merged, current)
            stored = await self.store.update_status(
                kind, merged, current.row_version, ctx=write_context(user, verb=verb)
            )
        else:
            if kind.has_status:
                obj["status"] = old.get("status", {})
            else:
                obj.pop("status", None)
            self._resolve_priority(kind, obj, old)
            admitted = admit(kind, obj, old)
            police(self.cache, kind, admitted, old)
            for guard in self.guards:
                guard(kind, admitted, user)
            if _same_desired(kind, admitted, old):
                return current
            if dry_run:
                return _dry_run(kind, admitted, current)
            stored = await self.store.update(
                kind, admitted, current.row_version, ctx=write_context(user, verb=verb)
            )
        return await self.cache.wait_for(stored.uid, stored.row_version)

    async def delete(
        self, kind: Kind, namespace: str, name: str, options: dict[str, Any], user: User,
        dry_run: bool = False,
    ) -> tuple[Cached | None, str]:  # fmt: skip
        current = self.get(kind, namespace, name)
        pre = options.get("preconditions") or {}
        if not isinstance(pre, dict):
            cause = errors.Cause("preconditions", "FieldValueInvalid", "must be an object")
            raise errors.invalid("DeleteOptions", None, [cause])
        expected = None
        if pre.get("resourceVersion") not in (None, ""):
            expected = (
                await self._current(kind, namespace, name, _parse_rv(pre["resourceVersion"]))
            ).row_version
        propagation = options.get("propagationPolicy") or (
            "Orphan" if options.get("orphanDependents") is True else "Background"
        )
        grace = options.get("gracePeriodSeconds")
        if grace is not None and (not isinstance(grace, int) or grace < 0):
            raise errors.invalid(
                "DeleteOptions",
                None,
                [
                    errors.Cause(
                        "gracePeriodSeconds", "FieldValueInvalid", "must be a non-negative integer"
                    )
                ],
            )
        if dry_run:  # checked, not deleted: the object as it stands
            return current, current.uid
        stored = await self.store.delete(
            kind,
            namespace,
            name,
            propagation=propagation,
            grace_seconds=grace,
            expected=expected,
            expected_uid=pre.get("uid"),
            ctx=write_context(user),
        )
        if stored is None:
            await self.cache.wait_deleted(current.uid)
            return None, current.uid
        return await self.cache.wait_for(stored.uid, stored.row_version), current.uid

    # -- helpers ---------------------------------------------------------------------
    async def _current(self, kind: Kind, namespace: str, name: str, rv: int) -> Cached:
        """The cached object if ``rv`` is its current revision; otherwise Conflict."""
        if rv > self.cache.revision:
            await self.cache.wait_revision(rv)
        current = self.get(kind, namespace, name)
        if current.revision != rv:
            raise errors.Conflict(
                f'Operation cannot be fulfilled on {kind.plural} "{name}": the object has been '
                "modified; please apply your changes to the latest version and try again",
                kind=kind.plural,
                name=name,
            )
        return current

    def _unused_name(self, kind: Kind, obj: dict[str, Any]) -> dict[str, Any]:
        """A dry-run create's object: refused as the store would refuse a name in use, or
        named from its ``generateName`` as the store would name it."""
        meta = obj["metadata"]
        name = meta.get("name")
        if not name:
            meta["name"] = f"{meta.get('generateName') or ''}{uuid.uuid4().hex[:5]}"
        elif self.cache.get(kind, str(meta.get("namespace") or ""), str(name)) is not None:
            raise errors.AlreadyExists(
                f'{kind.plural} "{name}" already exists', kind=kind.plural, name=str(name)
            )
        return obj

    def _namespace_open(self, namespace: str) -> None:
        ns = self.cache.get(BY_KIND["Namespace"], "", namespace)
        if ns is None:
            raise errors.NotFound(
                f'namespaces "{namespace}" not found', kind="namespaces", name=namespace
            )
        if b'"deletionTimestamp"' in ns.raw:
            raise errors.Forbidden(
                f"unable to create new content in namespace {namespace} because it is being "
                "terminated",
                kind="namespaces",
                name=namespace,
            )

    def _resolve_priority(
        self, kind: Kind, obj: dict[str, Any], old: dict[str, Any] | None = None
    ) -> None:
        """Set a pod's (or pod template's) numeric priority from its PriorityClass."""
        specs = []
        if kind.kind == "Pod":
            specs.append(("spec", obj.get("spec")))
        elif kind.kind in ("Deployment", "ReplicaSet", "Job"):
            tmpl = (
                (obj.get("spec") or {}).get("template")
                if isinstance(obj.get("spec"), dict)
                else None
            )
            if isinstance(tmpl, dict):
                specs.append(("spec.template.spec", tmpl.get("spec")))
        for path, spec in specs:
            if not isinstance(spec, dict):
                continue
            if old is not None and kind.kind == "Pod":
                spec.setdefault("priority", (old.get("spec") or {}).get("priority"))
                continue
            name = spec.get("priorityClassName")
            pcs = BY_KIND["PriorityClass"]
            if name:
                pc = self.cache.get(pcs, "", str(name))
                if pc is None:
                    raise errors.invalid(
                        kind.kind,
                        (obj.get("metadata") or {}).get("name"),
                        [
                            errors.Cause(
                                f"{path}.priorityClassName",
                                "FieldValueNotFound",
                                f"no PriorityClass with name {name} was found",
                            )
                        ],
                    )
                spec["priority"] = pc.obj().get("value", 0)
            elif "priority" not in spec:
                default = next(
                    (c for c in self.cache.iter(pcs, None) if c.obj().get("globalDefault") is True),
                    None,
                )
                spec["priority"] = default.obj().get("value", 0) if default else 0
                if default is not None:
                    spec["priorityClassName"] = default.name


def _dry_run(kind: Kind, obj: dict[str, Any], current: Cached | None) -> Cached:
    """What a write would have stored, for a ``dryRun=All`` answer: a create gets a uid and a
    creation time of its own and no resourceVersion, an update keeps the current ones."""
    meta = obj.setdefault("metadata", {})
    if current is None:
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        meta.pop("resourceVersion", None)
    obj.setdefault("apiVersion", API_VERSION)
    obj.setdefault("kind", kind.kind)
    return Cached(
        kind=kind,
        uid=str(meta.get("uid") or ""),
        namespace=str(meta.get("namespace") or ""),
        name=str(meta.get("name") or ""),
        revision=current.revision if current else 0,
        row_version=current.row_version if current else 0,
        raw=_enc.encode(obj),
        labels=dict(meta.get("labels") or {}),
        fields={},
    )


def _plain(kind: Kind, current: Cached) -> dict[str, Any]:
    """The cached object to patch or compare with: a Secret's data opened (ADR 0048)."""
    obj = current.obj()
    return secret_keys.open_object(obj) if kind.kind == "Secret" else obj


STORED_BY_UPDATE = ("labels", "annotations", "owner_references", "finalizers", "spec")


def _same_desired(kind: Kind, new: dict[str, Any], old: dict[str, Any]) -> bool:
    """Whether an update would change none of the columns it writes (so it can be skipped);
    compared as stored, so an absent ``spec`` equals an empty one."""
    a, b = split(kind, new), split(kind, old)
    return all(a[c] == b[c] for c in STORED_BY_UPDATE)


def _encode_continue(after: tuple[str, str], revision: int) -> str:
    raw = _enc.encode({"ns": after[0], "name": after[1], "rv": revision})
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_continue(token: str) -> tuple[tuple[str, str], int]:
    try:
        data = _dec.decode(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
        return (str(data["ns"]), str(data["name"])), int(data["rv"])
    except Exception as exc:
        raise errors.BadRequest("invalid continue token") from exc


__all__ = ["API_VERSION", "JSONPATCH", "MERGE", "Objects", "decode_body"]
