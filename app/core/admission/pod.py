"""Pod specs (also used for the pod templates of workloads) and the pod update rules.

A pod is a running thing: once created its spec is fixed except for what Kubernetes allows
to change in place (container images, a tighter ``activeDeadlineSeconds``, extra tolerations)
and the one-time binding to a node (``spec.nodeName`` set while it was empty).
"""

from __future__ import annotations

import copy

from app.core.admission._util import INT64_MAX, NOT_SUPPORTED, Errs, Obj, sub
from app.core.admission.container import check_container, check_pod_totals
from app.core.admission.scheduling import check_affinity, check_tolerations, check_topology_spread
from app.core.admission.values import check_quantity
from app.core.names import validate_dns1123_label, validate_dns1123_subdomain
from app.core.patch import json_equal

RESTART_POLICIES = ("Always", "OnFailure", "Never")
VOLUME_SOURCES = ("configMap", "secret", "emptyDir")
DEFAULT_SCHEDULER = "default-scheduler"
DEFAULT_GRACE_SECONDS = 30


def _check_key_items(e: Errs, src: Obj, path: str) -> None:
    for ip, item in e.objects(e.get_list(src, "items", path) or [], sub(path, "items")):
        e.get_str(item, "key", ip, required=True)
        target = e.get_str(item, "path", ip, required=True)
        if target and (target.startswith("/") or ".." in target.split("/")):
            e.invalid(sub(ip, "path"), target, "must be a relative path without '..'")
        e.get_int(item, "mode", ip, minimum=0, maximum=0o777)


def check_volumes(e: Errs, spec: Obj, path: str) -> set[str] | None:
    """Validate ``spec.volumes``; return the volume names (``None`` if unusable)."""
    items = e.get_list(spec, "volumes", path)
    if items is None:
        return None if "volumes" in spec else set()
    names: set[str] = set()
    for p, vol in e.objects(items, sub(path, "volumes")):
        name = e.get_str(vol, "name", p, required=True)
        if name:
            e.each_error(sub(p, "name"), name, validate_dns1123_label(name))
            if name in names:
                e.duplicate(sub(p, "name"), name)
            names.add(name)
        extra = [k for k in vol if k not in ("name", *VOLUME_SOURCES)]
        for k in extra:
            e.add(
                sub(p, str(k)),
                NOT_SUPPORTED,
                f"Unsupported volume type {str(k)[:64]!r}: supported types: "
                + ", ".join(VOLUME_SOURCES),
            )
        which = None if extra else e.exactly_one(vol, VOLUME_SOURCES, p, "volume type")
        src = e.get_obj(vol, which, p) if which else None
        if src is None or which is None:
            continue
        sp = sub(p, which)
        if which == "emptyDir":
            e.get_enum(src, "medium", sp, ("", "Memory"))
            check_quantity(e, src, "sizeLimit", sp)
            continue
        e.get_str(src, "name" if which == "configMap" else "secretName", sp, required=True)
        e.get_bool(src, "optional", sp)
        e.get_int(src, "defaultMode", sp, minimum=0, maximum=0o777)
        _check_key_items(e, src, sp)
    return names


def check_pod_spec(
    e: Errs,
    spec: Obj,
    path: str,
    *,
    restart_policies: tuple[str, ...] = RESTART_POLICIES,
    default_restart: str | None = "Always",
) -> None:
    """Validate and default a pod spec in place. ``default_restart=None`` makes
    ``restartPolicy`` required (jobs must choose OnFailure or Never)."""
    volumes = check_volumes(e, spec, path)
    containers = e.get_list(spec, "containers", path, required=True)
    if containers == []:
        e.required(sub(path, "containers"), "must have at least one container")
    seen: set[str] = set()
    for key, init in (("initContainers", True), ("containers", False)):
        items = containers if not init else e.get_list(spec, key, path)
        for cp, c in e.objects(items or [], sub(path, key)):
            name = check_container(e, c, cp, volumes, init=init)
            if name:
                if name in seen:
                    e.duplicate(sub(cp, "name"), name)
                seen.add(name)
    check_pod_totals(e, spec, path)
    e.get_enum(
        spec,
        "restartPolicy",
        path,
        restart_policies,
        required=default_restart is None,
        default=default_restart,
    )
    e.get_int(
        spec,
        "terminationGracePeriodSeconds",
        path,
        minimum=0,
        maximum=INT64_MAX,
        default=DEFAULT_GRACE_SECONDS,
    )
    e.get_int(spec, "activeDeadlineSeconds", path, minimum=1, maximum=INT64_MAX)
    for key, rule in (
        ("nodeName", validate_dns1123_subdomain),
        ("priorityClassName", validate_dns1123_subdomain),
        ("hostname", validate_dns1123_label),
        ("subdomain", validate_dns1123_label),
    ):
        value = e.get_str(spec, key, path)
        if value:
            e.each_error(sub(path, key), value, rule(value))
    e.get_label_map(spec, "nodeSelector", path)
    check_tolerations(e, spec, path)
    check_affinity(e, spec, path)
    check_topology_spread(e, spec, path)
    e.get_int(spec, "priority", path)
    e.get_enum(spec, "preemptionPolicy", path, ("PreemptLowerPriority", "Never"))
    e.get_str(spec, "schedulerName", path, default=DEFAULT_SCHEDULER)
    e.get_str(spec, "serviceAccountName", path)
    e.get_str(spec, "runtimeClassName", path)
    e.get_enum(
        spec, "dnsPolicy", path, ("ClusterFirst", "ClusterFirstWithHostNet", "Default", "None")
    )
    for flag in ("hostNetwork", "hostPID", "hostIPC", "automountServiceAccountToken", "atMostOne"):
        e.get_bool(spec, flag, path)
    # Set by the controller that creates an at-most-one pod (see workers.controllers.apply).
    e.get_int(spec, "fencingEpoch", path, minimum=0, maximum=INT64_MAX)
    e.get_obj(spec, "securityContext", path)
    e.get_obj(spec, "overhead", path)
    secrets = e.get_list(spec, "imagePullSecrets", path)
    for sp, ref in e.objects(secrets or [], sub(path, "imagePullSecrets")):
        e.get_str(ref, "name", sp, required=True)


# ---------------------------------------------------------------------------- Pod kind


def check_pod(e: Errs, obj: Obj, old: Obj | None) -> None:
    spec = e.get_obj(obj, "spec", "", required=True)
    if spec is None:
        return
    old_spec = old.get("spec") if old is not None else None
    if isinstance(old_spec, dict) and spec.get("priority") is None and "priority" in old_spec:
        # Priority is resolved from priorityClassName when the pod is created; a client that
        # resends its original manifest must not look like it is changing it.
        spec["priority"] = old_spec["priority"]
    before = len(e)
    check_pod_spec(e, spec, "spec")
    if isinstance(old_spec, dict) and len(e) == before:
        check_pod_update(e, spec, old_spec, "spec")


MUTABLE_FIELDS = (
    "spec.containers[*].image, spec.initContainers[*].image, spec.activeDeadlineSeconds "
    "(only decreased), spec.tolerations (only additions) and spec.nodeName (only when unset)"
)


def _mask(new: Obj, old: Obj) -> Obj:
    """``new`` with every field that may change replaced by its old value."""
    masked = copy.deepcopy(new)
    for key in ("containers", "initContainers"):
        new_items, old_items = masked.get(key), old.get(key)
        if not isinstance(new_items, list) or not isinstance(old_items, list):
            continue
        for c, o in zip(new_items, old_items, strict=False):
            if isinstance(c, dict) and isinstance(o, dict):
                for k in ("image", "imagePullPolicy"):
                    if o.get(k) is None:
                        c.pop(k, None)
                    else:
                        c[k] = o[k]
    for key in ("activeDeadlineSeconds", "tolerations"):
        masked.pop(key, None)
        if key in old:
            masked[key] = old[key]
    if not old.get("nodeName"):
        masked.pop("nodeName", None)
        if "nodeName" in old:
            masked["nodeName"] = old["nodeName"]
    return masked


def _as_list(value: object) -> list[object]:
    return value if isinstance(value, list) else []


def check_pod_update(e: Errs, new: Obj, old: Obj, path: str) -> None:
    old_node, new_node = old.get("nodeName") or "", new.get("nodeName") or ""
    if old_node and new_node != old_node:
        e.forbidden(sub(path, "nodeName"), f"may not be changed once set (currently {old_node!r})")
    old_deadline, new_deadline = old.get("activeDeadlineSeconds"), new.get("activeDeadlineSeconds")
    if isinstance(old_deadline, int):
        if new_deadline is None:
            e.invalid(sub(path, "activeDeadlineSeconds"), None, "must not be removed once set")
        elif isinstance(new_deadline, int) and new_deadline > old_deadline:
            e.invalid(
                sub(path, "activeDeadlineSeconds"),
                new_deadline,
                f"must be less than or equal to the previous value {old_deadline}",
            )
    old_tols = _as_list(old.get("tolerations"))
    new_tols = _as_list(new.get("tolerations"))
    for t in old_tols:
        if not any(json_equal(t, n) for n in new_tols):
            e.forbidden(
                sub(path, "tolerations"), "existing tolerations may not be removed or changed"
            )
            break
    masked = _mask(new, old)
    changed = sorted(
        str(k) for k in set(masked) | set(old) if not json_equal(masked.get(k), old.get(k))
    )
    changed = [k for k in changed if k not in ("nodeName",)]
    if changed:
        e.forbidden(
            path,
            f"pod updates may not change fields other than {MUTABLE_FIELDS} "
            f"(changed: {', '.join(sub(path, k) for k in changed)})",
        )
