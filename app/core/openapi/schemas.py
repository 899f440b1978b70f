"""The OpenAPI component schemas: ``Status``, ``ObjectMeta``, and one object and list schema per
kind of the registry (:mod:`app.core.kinds`).

Each schema says what admission (:mod:`app.core.admission`) really enforces and no more: the
top level of an object is closed (admission refuses any field other than ``apiVersion``,
``kind``, ``metadata``, the kind's spec fields and, where the kind has one, ``status``), the
metadata fields have the types admission checks, and the insides of ``spec`` and ``status`` keep
``x-kubernetes-preserve-unknown-fields: true`` because admission checks only the fields it knows
there and keeps the rest. Names follow Kubernetes' own document (``io.k8s.apimachinery...``
for the shared types, ``io.quaymaster.<version>.<Kind>`` for ours), so generated clients and
``kubectl`` find what they expect.
"""

from __future__ import annotations

from typing import Any

from app.core.kinds import GROUP, VERSION, Kind

Schema = dict[str, Any]

META = "io.k8s.apimachinery.pkg.apis.meta.v1"
STATUS = f"{META}.Status"
OBJECT_META = f"{META}.ObjectMeta"
LIST_META = f"{META}.ListMeta"
DELETE_OPTIONS = f"{META}.DeleteOptions"
WATCH_EVENT = f"{META}.WatchEvent"
PATCH = f"{META}.Patch"
ANY_OBJECT = "io.quaymaster.AnyObject"
SCALE = "io.k8s.api.autoscaling.v1.Scale"
GVK = "x-kubernetes-group-version-kind"
PRESERVE = "x-kubernetes-preserve-unknown-fields"

PROPAGATION_POLICIES = ("Background", "Foreground", "Orphan")


def ref(name: str) -> Schema:
    return {"$ref": f"#/components/schemas/{name}"}


def kind_schema_name(kind: Kind) -> str:
    return f"io.quaymaster.{VERSION}.{kind.kind}"


def list_schema_name(kind: Kind) -> str:
    return f"io.quaymaster.{VERSION}.{kind.list_kind}"


def gvk(kind: str, group: str = GROUP, version: str = VERSION) -> dict[str, str]:
    return {"group": group, "version": version, "kind": kind}


def _str(description: str = "") -> Schema:
    return {"type": "string", **({"description": description} if description else {})}


def _int(minimum: int | None = None) -> Schema:
    return {"type": "integer", **({"minimum": minimum} if minimum is not None else {})}


def _map(values: Schema) -> Schema:
    return {"type": "object", "additionalProperties": values}


_OPEN: Schema = {"type": "object", PRESERVE: True}
_ANY: Schema = {PRESERVE: True}

# Types of the top-level data fields that some kinds keep beside metadata (spec_fields other
# than "spec"), as admission checks them. A field a new kind adds is open until listed here.
FIELD_TYPES: dict[str, Schema] = {
    "spec": _OPEN,
    "status": _OPEN,
    "data": _map({"type": "string"}),
    "binaryData": _map({"type": "string"}),
    "stringData": _map({"type": "string"}),
    "immutable": {"type": "boolean"},
    "type": {"type": "string"},
    "value": {"type": "integer", "format": "int32"},
    "globalDefault": {"type": "boolean"},
    "description": {"type": "string"},
    "preemptionPolicy": {"type": "string"},
    "addressType": {"type": "string"},
    "endpoints": {"type": "array", "items": _OPEN},
    "ports": {"type": "array", "items": _OPEN},
    "involvedObject": _OPEN,
    "reason": {"type": "string"},
    "message": {"type": "string"},
    "count": {"type": "integer"},
    "source": _OPEN,
    "firstTimestamp": {"type": "string"},
    "lastTimestamp": {"type": "string"},
    "reportingComponent": {"type": "string"},
    "rules": {"type": "array", "items": _OPEN},
    "subjects": {"type": "array", "items": _OPEN},
    "roleRef": _OPEN,
    "secrets": {"type": "array", "items": _OPEN},
    "imagePullSecrets": {"type": "array", "items": _OPEN},
    "automountServiceAccountToken": {"type": "boolean"},
}


DESCRIPTIONS = {
    "spec": "The desired state. Admission checks the fields it knows and keeps the rest as sent.",
    "status": "The observed state, written by controllers and agents through the status "
    "subresource; a write of the main resource keeps the stored status.",
}


def object_meta() -> Schema:
    owner = {
        "type": "object",
        "required": ["apiVersion", "kind", "name", "uid"],
        "properties": {
            "apiVersion": _str(),
            "kind": _str(),
            "name": _str(),
            "uid": _str(),
            "controller": {"type": "boolean"},
            "blockOwnerDeletion": {"type": "boolean"},
        },
    }
    return {
        "type": "object",
        "description": "Standard object metadata; the server sets uid, resourceVersion, "
        "generation and creationTimestamp.",
        "properties": {
            "name": _str(),
            "generateName": _str(),
            "namespace": _str(),
            "uid": _str(),
            "resourceVersion": _str(),
            "selfLink": _str(),
            "generation": _int(0),
            "deletionGracePeriodSeconds": _int(0),
            "creationTimestamp": _str("RFC 3339 time"),
            "deletionTimestamp": _str("RFC 3339 time"),
            "labels": _map({"type": "string"}),
            "annotations": _map({"type": "string"}),
            "ownerReferences": {"type": "array", "items": owner},
            "finalizers": {"type": "array", "items": {"type": "string"}},
            # Admission checks that it is a list, not what the list holds.
            "managedFields": {"type": "array", "items": _ANY},
        },
    }


def status() -> Schema:
    """Every error the server answers, and the success of a delete that removed the object."""
    cause = {
        "type": "object",
        "properties": {"field": _str(), "reason": _str(), "message": _str()},
    }
    details = {
        "type": "object",
        "properties": {
            "name": _str(),
            "group": _str(),
            "kind": _str(),
            "uid": _str(),
            "causes": {"type": "array", "items": cause},
            "retryAfterSeconds": _int(0),
        },
    }
    return {
        "type": "object",
        "description": "The answer of every error (status Failure, with code and reason) and "
        "of a delete that removed the object at once (status Success).",
        "required": ["kind", "apiVersion", "status"],
        "properties": {
            "kind": {"type": "string", "enum": ["Status"]},
            "apiVersion": {"type": "string", "enum": ["v1"]},
            "metadata": {"type": "object"},
            "status": {"type": "string", "enum": ["Success", "Failure"]},
            "message": _str(),
            "reason": _str(),
            "code": {"type": "integer"},
            "details": details,
        },
        GVK: [gvk("Status", "", "v1")],
    }


def list_meta() -> Schema:
    return {
        "type": "object",
        "properties": {"resourceVersion": _str(), "continue": _str()},
    }


def delete_options() -> Schema:
    return {
        "type": "object",
        "description": "Options of a delete; query parameters of the same names override them.",
        "properties": {
            "apiVersion": _str(),
            "kind": _str(),
            "gracePeriodSeconds": _int(0),
            "propagationPolicy": {"type": "string", "enum": list(PROPAGATION_POLICIES)},
            "preconditions": {
                "type": "object",
                "properties": {"uid": _str(), "resourceVersion": _str()},
            },
            "orphanDependents": {"type": "boolean"},
            "dryRun": {"type": "array", "items": {"type": "string", "enum": ["All"]}},
        },
    }


def watch_event() -> Schema:
    return {
        "type": "object",
        "description": "One line of a watch stream.",
        "required": ["type", "object"],
        "properties": {
            "type": {
                "type": "string",
                "enum": ["ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"],
            },
            "object": _OPEN,
        },
    }


def scale() -> Schema:
    """``autoscaling/v1`` ``Scale``: the wanted size in spec, the current one and the pods'
    label query in status (:mod:`app.core.scale`)."""
    return {
        "type": "object",
        "properties": {
            "apiVersion": _str(),
            "kind": _str(),
            "metadata": ref(OBJECT_META),
            "spec": {"type": "object", "properties": {"replicas": _int(0)}},
            "status": {
                "type": "object",
                "properties": {"replicas": _int(0), "selector": _str()},
            },
        },
        GVK: [gvk("Scale", "autoscaling", "v1")],
    }


def kind_object(kind: Kind) -> Schema:
    """A kind's object: a closed top level, as admission's field check keeps it."""
    fields = list(kind.spec_fields) + (["status"] if kind.has_status else [])
    props: Schema = {
        "apiVersion": {
            "type": "string",
            "enum": [f"{GROUP}/{VERSION}"],
            "description": "The group and version; may be omitted on create.",
        },
        "kind": {
            "type": "string",
            "enum": [kind.kind],
            "description": "The kind; may be omitted on create.",
        },
        "metadata": ref(OBJECT_META),
    }
    for name in fields:
        props[name] = {**FIELD_TYPES.get(name, _ANY)}
        if name in DESCRIPTIONS:
            props[name]["description"] = DESCRIPTIONS[name]
    return {
        "type": "object",
        "description": f"A {kind.kind} ({'namespaced' if kind.namespaced else 'cluster-scoped'}).",
        "properties": props,
        "additionalProperties": False,
        GVK: [gvk(kind.kind)],
    }


def kind_list(kind: Kind) -> Schema:
    return {
        "type": "object",
        "required": ["kind", "apiVersion", "metadata", "items"],
        "properties": {
            "apiVersion": {"type": "string", "enum": [f"{GROUP}/{VERSION}"]},
            "kind": {"type": "string", "enum": [kind.list_kind]},
            "metadata": ref(LIST_META),
            "items": {"type": "array", "items": ref(kind_schema_name(kind))},
        },
        GVK: [gvk(kind.list_kind)],
    }


def components(kinds: tuple[Kind, ...]) -> dict[str, Schema]:
    """Every schema of the document, by name."""
    out: dict[str, Schema] = {
        STATUS: status(),
        OBJECT_META: object_meta(),
        LIST_META: list_meta(),
        DELETE_OPTIONS: delete_options(),
        WATCH_EVENT: watch_event(),
        PATCH: {
            "description": "A JSON merge patch (an object) or a JSON patch (a list of "
            "operations), as the request's content type says.",
            PRESERVE: True,
        },
        ANY_OBJECT: {"type": "object", PRESERVE: True},
        SCALE: scale(),
    }
    for kind in kinds:
        out[kind_schema_name(kind)] = kind_object(kind)
        out[list_schema_name(kind)] = kind_list(kind)
    return out
