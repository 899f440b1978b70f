"""Where a container's environment and files come from: ``env``, ``envFrom`` and volumes.

A container's environment is more than its literal ``env`` values: ``envFrom`` pulls in every
key of a ConfigMap or Secret, ``valueFrom`` takes one key of either, a field of the pod itself
(``fieldRef``) or one of its resource figures (``resourceFieldRef``). ConfigMap and Secret
volumes put keys into files. The agent fetches the objects a pod names once, before its first
container starts (:func:`references` lists them), and resolves everything here, purely, from
what it fetched. The resolved values are kept for the pod's life, so a container restarted
while the API is away gets the same environment (static stability); as in Kubernetes, a
changed ConfigMap reaches environment variables only through a new pod.

The ``process`` runtime has no mount namespace: a volume's ``mountPath`` is laid out under the
pod's directory, the container's working directory, with its leading ``/`` dropped (a mount at
``/etc/app`` is ``etc/app`` relative to it). The ``runc`` runtime binds the same directory into
the container.

A missing object or key that is not ``optional`` raises :class:`SourceError`, which the worker
reports as ``CreateContainerConfigError`` and retries. The Service variables
(:mod:`agent.service_env`) sit under all of these.
"""

from __future__ import annotations

import base64
import binascii
import math
import re
from collections.abc import Iterable, Mapping
from typing import Any

from app.core.quantity import cpu_millis, to_bytes

Obj = dict[str, Any]
Key = tuple[str, str]  # (kind, name): ("ConfigMap", "app-config")
Fetched = Mapping[Key, Obj | None]  # None: looked up and not found

CONFIG_MAP, SECRET = "ConfigMap", "Secret"
_FIELD = re.compile(r"^metadata\.(labels|annotations)\['([^']*)'\]$")
_REFERENCE = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


def expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes' ``$(VAR)`` expansion in ``command``, ``args`` and ``env`` values: a defined
    variable is replaced, an undefined reference is left as written, ``$$`` is a literal ``$``."""

    def one(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        return env.get(m.group(1), m.group(0))

    return _REFERENCE.sub(one, text)


class SourceError(Exception):
    """A non-optional ConfigMap, Secret or key is missing, or a reference cannot be read."""

    reason = "CreateContainerConfigError"


def _containers(spec: Mapping[str, Any]) -> Iterable[Obj]:
    yield from spec.get("initContainers") or []
    yield from spec.get("containers") or []


def references(pod: Mapping[str, Any]) -> set[Key]:
    """Every ConfigMap and Secret the pod's containers and volumes name."""
    spec = pod.get("spec") or {}
    out: set[Key] = set()
    for c in _containers(spec):
        for var in c.get("env") or []:
            source = var.get("valueFrom") or {}
            if ref := source.get("configMapKeyRef"):
                out.add((CONFIG_MAP, str(ref["name"])))
            if ref := source.get("secretKeyRef"):
                out.add((SECRET, str(ref["name"])))
        for src in c.get("envFrom") or []:
            if ref := src.get("configMapRef"):
                out.add((CONFIG_MAP, str(ref["name"])))
            if ref := src.get("secretRef"):
                out.add((SECRET, str(ref["name"])))
    for vol in spec.get("volumes") or []:
        if src := vol.get("configMap"):
            out.add((CONFIG_MAP, str(src["name"])))
        if src := vol.get("secret"):
            out.add((SECRET, str(src["secretName"])))
    return out


def data_of(kind: str, obj: Mapping[str, Any]) -> dict[str, bytes]:
    """An object's keys as bytes: a Secret's ``data`` and a ConfigMap's ``binaryData`` are
    base64, a ConfigMap's ``data`` is text."""
    out: dict[str, bytes] = {}
    try:
        if kind == CONFIG_MAP:
            for k, v in (obj.get("binaryData") or {}).items():
                out[str(k)] = base64.b64decode(str(v), validate=True)
            for k, v in (obj.get("data") or {}).items():
                out[str(k)] = str(v).encode()
        else:
            for k, v in (obj.get("data") or {}).items():
                out[str(k)] = base64.b64decode(str(v), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise SourceError(f"{kind.lower()} {obj.get('metadata', {}).get('name')!r}: {exc}") from exc
    return out


def _object(fetched: Fetched, kind: str, name: str, optional: bool) -> dict[str, bytes] | None:
    obj = fetched.get((kind, name))
    if obj is None:
        if optional:
            return None
        raise SourceError(f'{kind.lower()} "{name}" not found')
    return data_of(kind, obj)


def _key(fetched: Fetched, kind: str, ref: Mapping[str, Any]) -> str | None:
    optional = ref.get("optional") is True
    data = _object(fetched, kind, str(ref["name"]), optional)
    key = str(ref["key"])
    if data is None or key not in data:
        if optional:
            return None
        raise SourceError(f"couldn't find key {key} in {kind} {ref['name']}")
    return data[key].decode(errors="replace")


def field_value(pod: Mapping[str, Any], path: str, host_ip: str, pod_ip: str = "") -> str:
    """A ``fieldRef``: the pod's name, namespace, uid, a label or annotation, its node, its
    service account, or the host's and pod's address (``pod_ip``; without one the host's,
    pods sharing its network)."""
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    simple = {
        "metadata.name": meta.get("name"),
        "metadata.namespace": meta.get("namespace"),
        "metadata.uid": meta.get("uid"),
        "spec.nodeName": spec.get("nodeName"),
        "spec.serviceAccountName": spec.get("serviceAccountName") or "default",
        "status.hostIP": host_ip,
        "status.podIP": pod_ip or host_ip,
    }
    if path in simple:
        return str(simple[path] or "")
    if m := _FIELD.match(path):
        return str((meta.get(m.group(1)) or {}).get(m.group(2), ""))
    raise SourceError(f"unsupported fieldRef fieldPath {path!r}")


def resource_value(container: Mapping[str, Any], ref: Mapping[str, Any]) -> str:
    """A ``resourceFieldRef``: a request or limit of the container, in units of ``divisor``
    (rounded up, as Kubernetes does); an unset figure is 0."""
    resource = str(ref.get("resource") or "")
    section, _, name = resource.partition(".")
    if section not in ("requests", "limits") or name not in ("cpu", "memory"):
        raise SourceError(f"unsupported resourceFieldRef resource {resource!r}")
    amounts = (container.get("resources") or {}).get(section) or {}
    raw = amounts.get(name)
    divisor = ref.get("divisor")
    if name == "cpu":
        value = cpu_millis(raw) if raw is not None else 0
        unit = cpu_millis(divisor) if divisor is not None else 1000
    else:
        value = to_bytes(raw) if raw is not None else 0
        unit = to_bytes(divisor) if divisor is not None else 1
    if unit <= 0:
        raise SourceError(f"resourceFieldRef divisor {divisor!r} must be positive")
    return str(math.ceil(value / unit))


def environment(
    pod: Mapping[str, Any],
    container: Mapping[str, Any],
    fetched: Fetched,
    host_ip: str = "",
    services: Mapping[str, str] | None = None,
    pod_ip: str = "",
) -> dict[str, str]:
    """The container's whole environment: the Service variables (:mod:`agent.service_env`),
    ``envFrom`` in order over them, then ``env`` over it; ``$(VAR)`` in an ``env`` value may
    name a Service variable, as in Kubernetes."""
    env: dict[str, str] = dict(services or {})
    for src in container.get("envFrom") or []:
        prefix = str(src.get("prefix") or "")
        kind, ref = (
            (CONFIG_MAP, src.get("configMapRef"))
            if "configMapRef" in src
            else (
                SECRET,
                src.get("secretRef"),
            )
        )
        data = _object(fetched, kind, str(ref["name"]), ref.get("optional") is True)
        for k, v in (data or {}).items():
            env[prefix + k] = v.decode(errors="replace")
    for var in container.get("env") or []:
        name, source = str(var["name"]), var.get("valueFrom")
        if not source:
            env[name] = expand(str(var.get("value", "")), env)  # earlier variables only
            continue
        value: str | None
        if ref := source.get("configMapKeyRef"):
            value = _key(fetched, CONFIG_MAP, ref)
        elif ref := source.get("secretKeyRef"):
            value = _key(fetched, SECRET, ref)
        elif ref := source.get("fieldRef"):
            value = field_value(pod, str(ref.get("fieldPath") or ""), host_ip, pod_ip)
        elif ref := source.get("resourceFieldRef"):
            value = resource_value(container, ref)
        else:
            raise SourceError(f"env {name}: unsupported valueFrom")
        if value is not None:
            env[name] = value
    return env


def secret_derived(container: Mapping[str, Any], fetched: Fetched) -> set[str]:
    """The names of the container's variables that hold Secret content: from a Secret
    (``envFrom`` ``secretRef``, ``secretKeyRef``), or an ``env`` value expanding one of those;
    a later variable of the same name from elsewhere clears it, as it replaces the value."""
    tainted: set[str] = set()
    for src in container.get("envFrom") or []:
        prefix = str(src.get("prefix") or "")
        kind, ref = (SECRET, src.get("secretRef")) if "secretRef" in src else (
            CONFIG_MAP, src.get("configMapRef"))  # fmt: skip
        obj = fetched.get((kind, str((ref or {}).get("name"))))
        names = {prefix + str(k) for k in (obj or {}).get("data") or {}}
        names |= {prefix + str(k) for k in (obj or {}).get("binaryData") or {}}
        tainted = tainted | names if kind == SECRET else tainted - names
    for var in container.get("env") or []:
        name, source = str(var["name"]), var.get("valueFrom")
        refs = [] if source else [m.group(1) for m in _REFERENCE.finditer(str(var.get("value")))]
        if (source and "secretKeyRef" in source) or tainted.intersection(refs):
            tainted.add(name)
        else:
            tainted.discard(name)
    return tainted


def command_line(args: Iterable[str], env: Mapping[str, str], secret: set[str]) -> list[str]:
    """``$(VAR)`` expansion of ``command`` and ``args``, refusing a variable holding Secret
    content: a command line is readable by every user of the node (``ps``,
    ``/proc/<pid>/cmdline``) and ends up in diagnostics; the environment is not."""
    for arg in args:
        for m in _REFERENCE.finditer(arg):
            if m.group(1) in secret:
                raise SourceError(
                    f"$({m.group(1)}) holds a Secret's value and may not be expanded into the"
                    f" command line; read it from the environment (${m.group(1)}) instead"
                )
    return [expand(arg, env) for arg in args]


def _volume_keys(
    vol: Mapping[str, Any], fetched: Fetched, only: str | None = None
) -> dict[str, bytes] | None:
    """A ConfigMap or Secret volume's files, relative to its mount (None: not one, not of the
    kind ``only`` names, or an optional object that is missing)."""
    if src := vol.get("configMap"):
        kind, name = CONFIG_MAP, str(src["name"])
    elif src := vol.get("secret"):
        kind, name = SECRET, str(src["secretName"])
    else:
        return None
    if only is not None and kind != only:
        return None
    data = _object(fetched, kind, name, src.get("optional") is True)
    if data is None:
        return None
    items = src.get("items")
    if not items:
        return dict(data)
    out: dict[str, bytes] = {}
    for item in items:
        key = str(item["key"])
        if key not in data:
            if src.get("optional") is True:
                continue
            raise SourceError(f"couldn't find key {key} in {kind} {name}")
        out[str(item.get("path") or key)] = data[key]
    return out


def files(
    pod: Mapping[str, Any], container: Mapping[str, Any], fetched: Fetched, only: str | None = None
) -> dict[str, bytes]:
    """The files the container's ConfigMap and Secret mounts (or only those of the kind
    ``only``) lay out, as paths relative to the pod directory (``mountPath`` without its
    leading ``/``; a ``subPath`` mount is one file)."""
    volumes = {str(v.get("name")): v for v in (pod.get("spec") or {}).get("volumes") or []}
    out: dict[str, bytes] = {}
    for mount in container.get("volumeMounts") or []:
        vol = volumes.get(str(mount.get("name")))
        keys = None if vol is None else _volume_keys(vol, fetched, only)
        if keys is None:
            continue
        target = str(mount.get("mountPath") or "").strip("/")
        if sub_path := mount.get("subPath"):
            if str(sub_path) in keys:
                out[target] = keys[str(sub_path)]
            continue
        for path, content in keys.items():
            out[f"{target}/{path}" if target else path] = content
    return out
