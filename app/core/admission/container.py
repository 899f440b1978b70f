"""Container rules: image, command, env, ports, resources, probes and lifecycle hooks.

Resources get the most care because the scheduler and quota trust them blindly: every amount
must be a valid non-negative quantity, a request may not exceed its limit, and (as in
Kubernetes) a resource with only a limit gets a request equal to that limit.
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction

from app.core.admission._util import INT32_MAX, INT64_MAX, Errs, Obj, show, sub
from app.core.admission.values import check_port, is_svc_name, normalize_quantity
from app.core.labels import validate_qualified_name
from app.core.names import validate_dns1123_label
from app.core.quantity import cpu_millis, parse_quantity, to_bytes

PROTOCOLS = ("TCP", "UDP", "SCTP")
PULL_POLICIES = ("Always", "IfNotPresent", "Never")
NATIVE_RESOURCES = ("cpu", "memory", "ephemeral-storage")
PROBE_HANDLERS = ("exec", "httpGet", "tcpSocket", "grpc")
HOOK_HANDLERS = ("exec", "httpGet", "tcpSocket", "sleep")
PROBES = ("livenessProbe", "readinessProbe", "startupProbe")


def default_pull_policy(image: str) -> str:
    """``Always`` for ``:latest`` or untagged images, ``IfNotPresent`` otherwise."""
    if "@" in image:
        return "IfNotPresent"
    last = image.rsplit("/", 1)[-1]
    if ":" not in last:
        return "Always"
    return "Always" if last.rsplit(":", 1)[1] == "latest" else "IfNotPresent"


def is_extended_resource(name: str) -> bool:
    return "/" in name


def resource_name_errors(name: str) -> list[str]:
    if name in NATIVE_RESOURCES or name.startswith("hugepages-"):
        return []
    if "/" in name:
        return validate_qualified_name(name)
    return [
        "must be a standard resource (cpu, memory, ephemeral-storage, hugepages-<size>) or an "
        "extended resource with a domain prefix (e.g. nvidia.com/gpu)"
    ]


# Resources the database counts in millicores; every other amount is counted in whole units.
MILLI_RESOURCES = frozenset({"cpu", "requests.cpu", "limits.cpu"})


def stored_units(name: str, amount: Fraction | str) -> int:
    """The integer the SQL helpers (``qm_cpu_milli``, ``qm_bytes``) store for an amount."""
    return cpu_millis(amount) if name in MILLI_RESOURCES else to_bytes(amount)


def too_large(name: str, amount: Fraction | str) -> str | None:
    """Why the database cannot store ``amount`` of ``name``, or ``None`` when it can.

    The columns fed from quantities are bigints (``pods``: an integer); the SQL helpers read a
    larger amount as NULL, so admission refuses it rather than let the two sides disagree."""
    limit = INT32_MAX if name == "pods" else INT64_MAX
    if stored_units(name, amount) <= limit:
        return None
    unit = "m" if name in MILLI_RESOURCES else ""
    return f"must be at most {limit}{unit}, the largest amount that can be stored"


def check_quantity_map(
    e: Errs,
    m: Obj,
    path: str,
    name_errors: Callable[[str], list[str]],
    *,
    stored: bool = True,
) -> dict[str, Fraction]:
    """Validate a ``resource name -> quantity`` map in place; return the parsed amounts.

    ``stored``: the SQL helpers read these amounts into integer columns, so each must fit."""
    parsed: dict[str, Fraction] = {}
    for name, raw in list(m.items()):
        if not isinstance(name, str):
            e.wrong_type(path, name, "an object with string keys")
            continue
        p = sub(path, name)
        problems = name_errors(name)
        if problems:
            e.each_error(p, name, problems)
            continue
        if isinstance(raw, bool) or not isinstance(raw, str | int | float):
            e.wrong_type(p, raw, 'a quantity (a string such as "500m" or "1Gi", or a number)')
            continue
        try:
            amount = parse_quantity(raw)
            m[name] = normalize_quantity(raw)
        except ValueError as exc:
            e.invalid(p, raw, str(exc))
            continue
        problem = too_large(name, m[name]) if stored else None
        if problem:
            e.invalid(p, raw, problem)
            continue
        parsed[name] = amount
    return parsed


def check_pod_totals(e: Errs, spec: Obj, path: str) -> None:
    """The containers' summed requests and limits, which the pod's bigint columns hold, must
    fit as well as each amount (the trigger that sums them would fail the write instead)."""
    totals: dict[str, int] = {}
    containers = spec.get("containers")
    for c in containers if isinstance(containers, list) else ():
        res = c.get("resources") if isinstance(c, dict) else None
        for part in ("requests", "limits"):
            m = res.get(part) if isinstance(res, dict) else None
            for name, raw in m.items() if isinstance(m, dict) else ():
                try:
                    units = stored_units(name, raw)
                except (ValueError, TypeError):
                    continue  # check_resources has reported it
                if units <= INT64_MAX:  # a larger one too
                    totals[f"{part}.{name}"] = totals.get(f"{part}.{name}", 0) + units
    for name, total in sorted(totals.items()):
        if total > INT64_MAX:
            e.invalid(
                sub(path, "containers"),
                f"{name} = {total}",
                f"the containers' {name} add up to more than {INT64_MAX}, the largest total "
                "that can be stored",
            )


def check_resources(e: Errs, c: Obj, path: str) -> None:
    res = e.get_obj(c, "resources", path)
    if res is None:
        return
    p = sub(path, "resources")
    amounts: dict[str, dict[str, Fraction]] = {}
    for part in ("requests", "limits"):
        m = e.get_obj(res, part, p)
        if m is not None:
            amounts[part] = check_quantity_map(e, m, sub(p, part), resource_name_errors)
    requests, limits = amounts.get("requests", {}), amounts.get("limits", {})
    rp, lp = sub(p, "requests"), sub(p, "limits")
    if limits and isinstance(res.setdefault("requests", {}), dict):
        target = res["requests"]
        for name, amount in limits.items():
            if name not in target:
                target[name] = res["limits"][name]
                requests[name] = amount
    for name, amount in requests.items():
        raw = res["requests"][name]
        if name in limits:
            limit_raw = res["limits"][name]
            if is_extended_resource(name) and amount != limits[name]:
                e.invalid(sub(rp, name), raw, f"must be equal to {name} limit of {show(limit_raw)}")
            elif amount > limits[name]:
                e.invalid(
                    sub(rp, name),
                    raw,
                    f"must be less than or equal to {name} limit of {show(limit_raw)}",
                )
        elif is_extended_resource(name):
            e.required(sub(lp, name), f"a limit must be set for the extended resource {name}")
    for part, parsed in amounts.items():
        for name, amount in parsed.items():
            if is_extended_resource(name) and amount.denominator != 1:
                e.invalid(sub(sub(p, part), name), res[part][name], "must be a whole number")


def check_handler(e: Errs, h: Obj, path: str, kinds: tuple[str, ...]) -> None:
    which = e.exactly_one(h, kinds, path, "handler type")
    if which is None:
        return
    body = e.get_obj(h, which, path)
    if body is None:
        return
    p = sub(path, which)
    if which == "exec":
        cmd = e.get_str_list(body, "command", p, required=True)
        if cmd == []:
            e.required(sub(p, "command"))
    elif which == "httpGet":
        e.get_str(body, "path", p)
        e.get_str(body, "host", p)
        check_port(e, body, "port", p, required=True)
        e.get_enum(body, "scheme", p, ("HTTP", "HTTPS"), default="HTTP")
        for hp, header in e.objects(
            e.get_list(body, "httpHeaders", p) or [], sub(p, "httpHeaders")
        ):
            e.get_str(header, "name", hp, required=True)
            e.get_str(header, "value", hp)
    elif which == "tcpSocket":
        e.get_str(body, "host", p)
        check_port(e, body, "port", p, required=True)
    elif which == "grpc":
        e.get_int(body, "port", p, required=True, minimum=1, maximum=65535)
        e.get_str(body, "service", p)
    else:
        e.get_int(body, "seconds", p, required=True, minimum=1, maximum=INT64_MAX)


def check_probe(e: Errs, c: Obj, key: str, path: str) -> None:
    probe = e.get_obj(c, key, path)
    if probe is None:
        return
    p = sub(path, key)
    check_handler(e, probe, p, PROBE_HANDLERS)
    e.get_int(probe, "initialDelaySeconds", p, minimum=0)
    e.get_int(probe, "periodSeconds", p, minimum=1, default=10)
    e.get_int(probe, "timeoutSeconds", p, minimum=1, default=1)
    success = e.get_int(probe, "successThreshold", p, minimum=1, default=1)
    e.get_int(probe, "failureThreshold", p, minimum=1, default=3)
    if key != "readinessProbe" and success not in (None, 1):
        e.invalid(sub(p, "successThreshold"), success, "must be 1")
    grace = e.get_int(probe, "terminationGracePeriodSeconds", p, minimum=1, maximum=INT64_MAX)
    if key == "readinessProbe" and grace is not None:
        e.forbidden(sub(p, "terminationGracePeriodSeconds"), "may not be set for readiness probes")


def check_env(e: Errs, c: Obj, path: str) -> None:
    p = sub(path, "env")
    for vp, var in e.objects(e.get_list(c, "env", path) or [], p):
        name = e.get_str(var, "name", vp, required=True)
        if name and "=" in name:
            e.invalid(sub(vp, "name"), name, "must not contain '='")
        value = e.get_str(var, "value", vp)
        source = e.get_obj(var, "valueFrom", vp)
        if source is None:
            continue
        sp = sub(vp, "valueFrom")
        if value:
            e.invalid(sp, "", "may not be specified when `value` is not empty")
        kinds = ("fieldRef", "resourceFieldRef", "configMapKeyRef", "secretKeyRef")
        which = e.exactly_one(source, kinds, sp, "source")
        ref = e.get_obj(source, which, sp) if which else None
        if ref is None or which is None:
            continue
        rp = sub(sp, which)
        required = {
            "fieldRef": ("fieldPath",),
            "resourceFieldRef": ("resource",),
            "configMapKeyRef": ("name", "key"),
            "secretKeyRef": ("name", "key"),
        }[which]
        for field in required:
            e.get_str(ref, field, rp, required=True)
        if which.endswith("KeyRef"):
            e.get_bool(ref, "optional", rp)
    for fp, src in e.objects(e.get_list(c, "envFrom", path) or [], sub(path, "envFrom")):
        e.get_str(src, "prefix", fp)
        which = e.exactly_one(src, ("configMapRef", "secretRef"), fp, "source")
        ref = e.get_obj(src, which, fp) if which else None
        if ref is not None and which is not None:
            e.get_str(ref, "name", sub(fp, which), required=True)
            e.get_bool(ref, "optional", sub(fp, which))


def check_ports(e: Errs, c: Obj, path: str) -> None:
    names: set[str] = set()
    for pp, port in e.objects(e.get_list(c, "ports", path) or [], sub(path, "ports")):
        e.get_int(port, "containerPort", pp, required=True, minimum=1, maximum=65535)
        e.get_int(port, "hostPort", pp, minimum=0, maximum=65535)
        e.get_enum(port, "protocol", pp, PROTOCOLS, default="TCP")
        e.get_str(port, "hostIP", pp)
        name = e.get_str(port, "name", pp)
        if name:
            e.each_error(sub(pp, "name"), name, is_svc_name(name))
            if name in names:
                e.duplicate(sub(pp, "name"), name)
            names.add(name)


def check_mounts(e: Errs, c: Obj, path: str, volumes: set[str] | None) -> None:
    paths: set[str] = set()
    for mp, mount in e.objects(
        e.get_list(c, "volumeMounts", path) or [], sub(path, "volumeMounts")
    ):
        name = e.get_str(mount, "name", mp, required=True)
        if name and volumes is not None and name not in volumes:
            e.add(
                sub(mp, "name"),
                "FieldValueNotFound",
                f"Not found: {show(name)}: no volume with this name",
            )
        target = e.get_str(mount, "mountPath", mp, required=True)
        if target:
            if target in paths:
                e.invalid(sub(mp, "mountPath"), target, "must be unique")
            paths.add(target)
        e.get_bool(mount, "readOnly", mp)
        sub_path = e.get_str(mount, "subPath", mp)
        if sub_path and (sub_path.startswith("/") or ".." in sub_path.split("/")):
            e.invalid(sub(mp, "subPath"), sub_path, "must be a relative path without '..'")


def check_container(
    e: Errs, c: Obj, path: str, volumes: set[str] | None, *, init: bool
) -> str | None:
    """Validate and default one container; returns its name when valid."""
    name = e.get_str(c, "name", path, required=True)
    if name:
        problems = validate_dns1123_label(name)
        e.each_error(sub(path, "name"), name, problems)
        name = None if problems else name
    image = e.get_str(c, "image", path, required=True)
    if image and image != image.strip():
        e.invalid(sub(path, "image"), image, "must not have leading or trailing whitespace")
    e.get_str_list(c, "command", path)
    e.get_str_list(c, "args", path)
    e.get_str(c, "workingDir", path)
    e.get_enum(c, "imagePullPolicy", path, PULL_POLICIES, default=default_pull_policy(image or ""))
    check_env(e, c, path)
    check_ports(e, c, path)
    check_resources(e, c, path)
    check_mounts(e, c, path, volumes)
    for probe in PROBES:
        if init and c.get(probe) is not None:
            e.forbidden(sub(path, probe), "may not be set for init containers")
        else:
            check_probe(e, c, probe, path)
    lifecycle = e.get_obj(c, "lifecycle", path)
    if lifecycle is not None:
        lp = sub(path, "lifecycle")
        if init:
            e.forbidden(lp, "may not be set for init containers")
        for hook in ("postStart", "preStop"):
            handler = e.get_obj(lifecycle, hook, lp)
            if handler is not None:
                check_handler(e, handler, sub(lp, hook), HOOK_HANDLERS)
    e.get_enum(
        c, "terminationMessagePolicy", path, ("File", "FallbackToLogsOnError"), default="File"
    )
    e.get_str(c, "terminationMessagePath", path)
    for flag in ("stdin", "stdinOnce", "tty"):
        e.get_bool(c, flag, path)
    e.get_obj(c, "securityContext", path)
    if c.get("restartPolicy") is not None:
        e.get_enum(c, "restartPolicy", path, ("Always",))
        if not init:
            e.forbidden(sub(path, "restartPolicy"), "may only be set for init containers")
    return name
