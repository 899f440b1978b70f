"""``metadata`` rules shared by every kind, plus label-selector and pod-template metadata checks.

Names, namespaces, labels, annotations, owner references and finalizers are validated the same
way for all kinds; on update the identity fields are carried over from the stored object so a
client that sends a fresh manifest (without ``uid`` or ``creationTimestamp``) still works,
while an attempt to change them is rejected.
"""

from __future__ import annotations

from typing import Any

from app.core.admission._util import INT64_MAX, Errs, Obj, idx, sub
from app.core.admission.values import check_time
from app.core.errors import BadRequest
from app.core.kinds import Kind
from app.core.labels import (
    Selector,
    from_label_selector,
    validate_label_key,
    validate_label_value,
    validate_qualified_name,
)
from app.core.names import validate_dns1123_label, validate_name

ANNOTATIONS_MAX_BYTES = 256 * 1024
SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


def _bytes(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def check_labels(e: Errs, meta: Obj, path: str) -> dict[str, str] | None:
    return e.get_label_map(meta, "labels", path)


def check_annotations(e: Errs, meta: Obj, path: str) -> None:
    annotations = e.get_str_map(meta, "annotations", path)
    if annotations is None:
        return
    p = sub(path, "annotations")
    total = 0
    for k, v in annotations.items():
        e.each_error(p, k, validate_qualified_name(k.lower()))
        total += _bytes(k) + _bytes(v)
    if total > ANNOTATIONS_MAX_BYTES:
        e.too_long(p, ANNOTATIONS_MAX_BYTES)


def check_owner_references(e: Errs, meta: Obj, path: str) -> None:
    refs = e.get_list(meta, "ownerReferences", path)
    if refs is None:
        return
    p = sub(path, "ownerReferences")
    controllers = 0
    for rp, ref in e.objects(refs, p):
        for field in ("apiVersion", "kind", "name", "uid"):
            e.get_str(ref, field, rp, required=True)
        if e.get_bool(ref, "controller", rp):
            controllers += 1
        e.get_bool(ref, "blockOwnerDeletion", rp)
    if controllers > 1:
        e.invalid(p, refs, "only one reference can have controller set to true")


def check_finalizers(e: Errs, meta: Obj, path: str) -> None:
    finalizers = e.get_str_list(meta, "finalizers", path)
    if finalizers is None:
        return
    p = sub(path, "finalizers")
    seen: set[str] = set()
    for i, f in enumerate(finalizers):
        e.each_error(idx(p, i), f, validate_qualified_name(f))
        if f in seen:
            e.duplicate(idx(p, i), f)
        seen.add(f)


def object_name(obj: Any) -> str | None:
    """Best-effort name for error messages (``name``, else ``generateName``)."""
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    if not isinstance(meta, dict):
        return None
    for key in ("name", "generateName"):
        value = meta.get(key)
        if isinstance(value, str) and value:
            return value if len(value) <= 253 else value[:250] + "..."
    return None


def check_metadata(e: Errs, kind: Kind, obj: Obj) -> None:
    meta = e.get_obj(obj, "metadata", "", required=True)
    if meta is None:
        return
    path = "metadata"
    before = len(e)
    name = e.get_str(meta, "name", path)
    generate = e.get_str(meta, "generateName", path)
    if name:
        e.each_error(sub(path, "name"), name, validate_name(kind.kind, name))
    elif generate:
        e.each_error(
            sub(path, "generateName"), generate, validate_name(kind.kind, generate, prefix=True)
        )
    elif len(e) == before:
        e.required(sub(path, "name"), "name or generateName is required")
    before = len(e)
    namespace = e.get_str(meta, "namespace", path)
    if kind.namespaced:
        if namespace:
            e.each_error(sub(path, "namespace"), namespace, validate_dns1123_label(namespace))
        elif len(e) == before:
            e.required(sub(path, "namespace"), f"{kind.kind} is a namespaced kind")
    elif namespace:
        e.forbidden(sub(path, "namespace"), f"not allowed on a cluster-scoped {kind.kind}")
    elif namespace == "":
        del meta["namespace"]
    e.get_str(meta, "uid", path)
    e.get_str(meta, "resourceVersion", path)
    e.get_str(meta, "selfLink", path)
    e.get_int(meta, "generation", path, minimum=0, maximum=INT64_MAX)
    e.get_int(meta, "deletionGracePeriodSeconds", path, minimum=0, maximum=INT64_MAX)
    check_time(e, meta, "creationTimestamp", path)
    check_time(e, meta, "deletionTimestamp", path)
    check_labels(e, meta, path)
    check_annotations(e, meta, path)
    check_owner_references(e, meta, path)
    check_finalizers(e, meta, path)
    e.get_list(meta, "managedFields", path)


def carry_identity(e: Errs, new: Obj, old: Obj) -> None:
    """On update, keep identity and system fields from ``old``; reject changes to them."""
    meta, old_meta = new.get("metadata"), old.get("metadata")
    if meta is None:
        meta = new["metadata"] = {}
    if not isinstance(meta, dict) or not isinstance(old_meta, dict):
        return
    for field in ("name", "namespace", "uid"):
        current, previous = meta.get(field), old_meta.get(field)
        if previous in (None, ""):
            continue
        if current in (None, ""):
            meta[field] = previous
        elif current != previous:
            e.immutable(sub("metadata", field))
    for field in ("creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds"):
        if old_meta.get(field) is not None:
            meta[field] = old_meta[field]


# ---------------------------------------------------------------------------- selectors


def check_selector(
    e: Errs, d: Obj, key: str, path: str, *, required: bool = False, non_empty: bool = False
) -> Selector | None:
    """Validate a structured ``LabelSelector`` field; return it parsed when it is valid."""
    sel = e.get_obj(d, key, path, required=required)
    if sel is None:
        return None
    p = sub(path, key)
    before = len(e)
    e.get_label_map(sel, "matchLabels", p)
    exprs = e.get_list(sel, "matchExpressions", p)
    for ep, expr in e.objects(exprs or [], sub(p, "matchExpressions")):
        k = e.get_str(expr, "key", ep, required=True)
        if k:
            e.each_error(sub(ep, "key"), k, validate_label_key(k))
        op = e.get_enum(expr, "operator", ep, SELECTOR_OPERATORS, required=True)
        values = e.get_str_list(expr, "values", ep)
        vp = sub(ep, "values")
        if op in ("In", "NotIn") and not expr.get("values"):
            e.required(vp, "must be specified when `operator` is 'In' or 'NotIn'")
        elif op in ("Exists", "DoesNotExist") and values:
            e.forbidden(vp, "may not be specified when `operator` is 'Exists' or 'DoesNotExist'")
        for i, v in enumerate(values or []):
            e.each_error(idx(vp, i), v, validate_label_value(v))
    if len(e) > before:
        return None
    try:
        selector = from_label_selector(sel)
    except BadRequest as exc:
        e.invalid(p, sel, exc.message)
        return None
    if non_empty and selector.empty:
        e.invalid(p, sel, "empty selector is invalid for this kind: it would match every pod")
        return None
    return selector


def check_template_metadata(e: Errs, template: Obj, path: str) -> dict[str, str] | None:
    """Metadata of a pod or job template: only labels and annotations matter here."""
    meta = e.get_obj(template, "metadata", path)
    if meta is None:
        return {}
    p = sub(path, "metadata")
    labels = check_labels(e, meta, p)
    check_annotations(e, meta, p)
    return labels if "labels" in meta else {}
