"""The rules an ``AdmissionPolicy`` may list, each a small pure check of one pod spec.

A rule is ``check(setting, spec) -> [Finding]``: ``setting`` is the rule's value in the
policy's ``spec.rules`` (admission has checked its shape, :mod:`app.core.admission.policy`),
``spec`` a pod spec (a pod's, or a workload's template's). A finding's ``field`` is relative
to the spec; its ``message`` says what must change, in the words of Kubernetes' Pod Security
admission. ``RULES`` keeps them in the order messages list them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

Obj = dict[str, Any]
HOST_NAMESPACES = ("hostNetwork", "hostPID", "hostIPC")
RESOURCES = ("cpu", "memory")
# A pinned image ends in a whole SHA-256 digest; ``name@sha256:`` with anything else is not one.
DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$")


@dataclass(frozen=True)
class Finding:
    field: str
    message: str


def containers(spec: Obj) -> Iterator[tuple[str, Obj]]:
    """``(path, container)`` for the init containers, then the containers."""
    for key in ("initContainers", "containers"):
        items = spec.get(key)
        for i, c in enumerate(items if isinstance(items, list) else []):
            if isinstance(c, dict):
                yield f"{key}[{i}]", c


def _named(c: Obj) -> str:
    return f'container "{c.get("name", "")}"'


def deny_privileged(setting: Any, spec: Obj) -> list[Finding]:
    """No container runs privileged."""
    out = []
    for path, c in containers(spec):
        ctx = c.get("securityContext")
        if isinstance(ctx, dict) and ctx.get("privileged") is True:
            field = f"{path}.securityContext.privileged"
            out.append(Finding(field, f"{_named(c)} must not set securityContext.privileged=true"))
    return out


def deny_host_namespaces(setting: Any, spec: Obj) -> list[Finding]:
    """The pod shares none of the node's network, process or IPC namespaces."""
    return [
        Finding(flag, f"{flag}=true is not allowed")
        for flag in HOST_NAMESPACES
        if spec.get(flag) is True
    ]


def deny_host_path(setting: Any, spec: Obj) -> list[Finding]:
    """No volume mounts a path of the node."""
    volumes = spec.get("volumes")
    return [
        Finding(f"volumes[{i}].hostPath", f'hostPath volume "{v.get("name", "")}" is not allowed')
        for i, v in enumerate(volumes if isinstance(volumes, list) else [])
        if isinstance(v, dict) and "hostPath" in v
    ]


def require_resources(setting: Any, spec: Obj) -> list[Finding]:
    """Every container asks for cpu and memory and is capped on both."""
    out = []
    for path, c in containers(spec):
        res: Obj = c["resources"] if isinstance(c.get("resources"), dict) else {}
        missing = [
            f"resources.{which}.{r}"
            for which in ("requests", "limits")
            for r in RESOURCES
            if not isinstance(res.get(which), dict) or res[which].get(r) in (None, "")
        ]
        if missing:
            out.append(Finding(f"{path}.resources", f"{_named(c)} must set {', '.join(missing)}"))
    return out


def from_listed(image: str, prefix: str) -> bool:
    """Whether ``image`` is under ``prefix`` (a registry, ``registry.example.com`` or
    ``registry.example.com/``, or a repository, ``registry.example.com/team/app``) at a name
    boundary: ``registry.example.com`` does not allow ``registry.example.com.evil.io/x``, nor
    ``…/team`` allow ``…/team-b/x``. A prefix ending in ``/`` is one already; otherwise the
    image is the prefix itself, or goes on with ``/``, ``@`` (a digest) or ``:`` and a tag (a
    ``:`` followed by a path is another registry's port)."""
    if not prefix or not image.startswith(prefix):
        return False
    rest = image[len(prefix) :]
    if prefix.endswith("/") or not rest or rest[0] in "/@":
        return True
    return rest[0] == ":" and "/" not in rest


def allowed_images(setting: Any, spec: Obj) -> list[Finding]:
    """Each image comes from a listed registry or repository (:func:`from_listed`) or, when
    ``digests`` is true, is pinned by digest (``name@sha256:<64 hex digits>``)."""
    setting = setting if isinstance(setting, dict) else {}
    prefixes = [str(p) for p in setting.get("registries") or []]
    digests = setting.get("digests") is True
    out = []
    for path, c in containers(spec):
        image = str(c.get("image", ""))
        if any(from_listed(image, p) for p in prefixes) or (digests and DIGEST.search(image)):
            continue
        allowed = [f"from {', '.join(repr(p) for p in prefixes)}"] if prefixes else []
        allowed += ["pinned by digest"] if digests else []
        out.append(Finding(f"{path}.image", f"{_named(c)} image {image!r} must be "
                           + (" or ".join(allowed) or "allowed")))  # fmt: skip
    return out


def max_priority(setting: Any, spec: Obj) -> list[Finding]:
    """The pod's priority (resolved from its ``priorityClassName``) is at most ``setting``."""
    priority = spec.get("priority")
    if not isinstance(priority, int) or isinstance(priority, bool) or priority <= int(setting):
        return []
    cls = spec.get("priorityClassName")
    named = f' (priorityClassName "{cls}")' if cls else ""
    return [Finding("priority", f"priority {priority}{named} exceeds this namespace's maximum "
                                f"of {int(setting)}")]  # fmt: skip


Check = Callable[[Any, Obj], list[Finding]]
RULES: dict[str, Check] = {
    "denyPrivileged": deny_privileged,
    "denyHostNamespaces": deny_host_namespaces,
    "denyHostPath": deny_host_path,
    "requireResources": require_resources,
    "allowedImages": allowed_images,
    "maxPriority": max_priority,
}
