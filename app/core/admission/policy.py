"""``AdmissionPolicy``: the shape of a policy (what it means is :mod:`app.core.policy`).

Cluster-scoped; ``spec.mode`` defaults to ``Enforce``; an absent ``namespaceSelector``
governs every namespace. Every rule is optional; a policy with none is valid and does nothing.
"""

from __future__ import annotations

from app.core.admission._util import NOT_SUPPORTED, Errs, Obj, idx, sub
from app.core.admission.meta import check_selector
from app.core.admission.misc import PRIORITY_MAX_USER, PRIORITY_MIN
from app.core.policy import MODES
from app.core.policy.rules import RULES

FLAGS = ("denyPrivileged", "denyHostNamespaces", "denyHostPath", "requireResources")


def check_admissionpolicy(e: Errs, obj: Obj, old: Obj | None) -> None:
    spec = e.get_obj(obj, "spec", "", required=True)
    if spec is None:
        return
    for key in spec:
        if key not in ("namespaceSelector", "mode", "rules"):
            e.add(sub("spec", key), NOT_SUPPORTED, f'unknown field "{key[:64]}"')
    check_selector(e, spec, "namespaceSelector", "spec")
    e.get_enum(spec, "mode", "spec", MODES, default=MODES[0])
    rules = e.get_obj(spec, "rules", "spec")
    if rules is not None:
        _check_rules(e, rules, "spec.rules")


def _check_rules(e: Errs, rules: Obj, path: str) -> None:
    for key in rules:
        if key not in RULES:
            e.unsupported(sub(path, key), key, tuple(RULES))
    for flag in FLAGS:
        e.get_bool(rules, flag, path)
    e.get_int(rules, "maxPriority", path, minimum=PRIORITY_MIN, maximum=PRIORITY_MAX_USER)
    images = e.get_obj(rules, "allowedImages", path)
    if images is None:
        return
    ip = sub(path, "allowedImages")
    for key in images:
        if key not in ("registries", "digests"):
            e.unsupported(sub(ip, key), key, ("registries", "digests"))
    registries = e.get_str_list(images, "registries", ip)
    for i, prefix in enumerate(registries or []):
        if not prefix:
            e.invalid(idx(sub(ip, "registries"), i), prefix, "must not be empty")
    digests = e.get_bool(images, "digests", ip)
    if not registries and not digests:
        e.required(ip, "must list registries or set digests: true")
