"""Reading the two protobuf bodies kubectl sends us: access reviews.

Most of kubectl speaks JSON to our group, but ``kubectl auth can-i`` posts its
``SelfSubjectAccessReview`` (and ``--list`` its ``SelfSubjectRulesReview``) with the typed
client of ``authorization.k8s.io``, which encodes protobuf (``application/vnd.kubernetes.
protobuf``) and accepts JSON back. Rather than a protobuf runtime and Kubernetes' generated
types, this reads the wire format of exactly those messages into the JSON object the review
handlers take (ADR 0050). Pure.

The envelope is ``k8s\\x00`` then a ``runtime.Unknown``: ``typeMeta`` (1: apiVersion, 2: kind)
and ``raw`` (2), the message itself.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from app.core import errors

MEDIA_TYPE = "application/vnd.kubernetes.protobuf"
MAGIC = b"k8s\x00"
Obj = dict[str, Any]
# Field numbers of the messages read here, from Kubernetes' generated.proto files.
RESOURCE_ATTRIBUTES = {1: "namespace", 2: "verb", 3: "group", 4: "version", 5: "resource",
                       6: "subresource", 7: "name"}  # fmt: skip
NON_RESOURCE_ATTRIBUTES = {1: "path", 2: "verb"}


def _varint(data: bytes, i: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        if i >= len(data) or shift > 63:
            raise errors.BadRequest("the protobuf body is truncated")
        byte = data[i]
        value |= (byte & 0x7F) << shift
        i, shift = i + 1, shift + 7
        if not byte & 0x80:
            return value, i


def fields(data: bytes) -> Iterator[tuple[int, bytes | int]]:
    """``(field number, value)`` of a message: bytes for length-delimited fields, ints for
    varints; fixed-width fields are skipped."""
    i = 0
    while i < len(data):
        key, i = _varint(data, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _varint(data, i)
            yield number, value
        elif wire == 2:
            size, i = _varint(data, i)
            if i + size > len(data):
                raise errors.BadRequest("the protobuf body is truncated")
            yield number, data[i : i + size]
            i += size
        elif wire in (1, 5):
            i += 8 if wire == 1 else 4
        else:
            raise errors.BadRequest(f"unsupported protobuf wire type {wire}")


def _strings(data: bytes, names: dict[int, str]) -> Obj:
    out: Obj = {}
    for number, value in fields(data):
        if number in names and isinstance(value, bytes):
            out[names[number]] = value.decode("utf-8", errors="replace")
    return out


def _message(data: bytes, number: int) -> bytes | None:
    for n, value in fields(data):
        if n == number and isinstance(value, bytes):
            return value
    return None


def unwrap(body: bytes) -> tuple[str, str, bytes]:
    """``(apiVersion, kind, message)`` of an enveloped body."""
    if not body.startswith(MAGIC):
        raise errors.BadRequest("a protobuf body must start with the k8s envelope")
    unknown = body[len(MAGIC) :]
    type_meta = _strings(_message(unknown, 1) or b"", {1: "apiVersion", 2: "kind"})
    return type_meta.get("apiVersion", ""), type_meta.get("kind", ""), _message(unknown, 2) or b""


def review(body: bytes) -> Obj:
    """A protobuf ``SelfSubjectAccessReview`` or ``SelfSubjectRulesReview`` as its JSON
    object (metadata and status are not read: a review's answer is computed)."""
    api_version, kind, message = unwrap(body)
    spec_bytes = _message(message, 2) or b""
    spec: Obj = {}
    if kind == "SelfSubjectAccessReview":
        resource = _message(spec_bytes, 1)
        non_resource = _message(spec_bytes, 2)
        if resource is not None:
            spec["resourceAttributes"] = _strings(resource, RESOURCE_ATTRIBUTES)
        if non_resource is not None:
            spec["nonResourceAttributes"] = _strings(non_resource, NON_RESOURCE_ATTRIBUTES)
    elif kind == "SelfSubjectRulesReview":
        spec = _strings(spec_bytes, {1: "namespace"})
    else:
        raise errors.UnsupportedMediaType(f"a protobuf {kind or 'body'} is not accepted here")
    return {"apiVersion": api_version, "kind": kind, "spec": spec}
