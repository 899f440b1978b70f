"""Rendering from decoded column texts must equal rendering from Python values."""

from __future__ import annotations

import json
import struct

import pytest

from app.core.kinds import KINDS
from app.core.objects import render
from app.stream.pgoutput import UNCHANGED, Decoder, format_lsn, parse_lsn
from app.stream.render import columns_from_object, render_json, with_revision

ROW = {
    "uid": "3f1e6c1a-8a43-4f7e-9d7c-6b0a1c2d3e4f",
    "namespace": "team-a",
    "name": "web-1",
    "generate_name": None,
    "labels": {"app": "web", "tier": "fe"},
    "annotations": {"a/b": "c"},
    "owner_references": [
        {"apiVersion": "quaymaster.io/v1", "kind": "ReplicaSet", "name": "rs", "uid": "u1"}
    ],
    "finalizers": [],
    "creation_timestamp": "2026-11-29 09:30:00.123456+00",
    "deletion_timestamp": None,
    "deletion_grace_period_seconds": None,
    "generation": 3,
    "row_version": 77,
    "spec": {
        "containers": [{"name": "c", "image": "x"}],
        "data": {"k": "v"},
        "value": 5,
        "type": "Opaque",
        "addressType": "IPv4",
    },
    "status": {"phase": "Running"},
}


def texts(row: dict) -> dict:
    out = {}
    for k, v in row.items():
        if isinstance(v, (dict, list)):
            out[k] = json.dumps(v)
        elif v is None:
            out[k] = None
        else:
            out[k] = str(v)
    return out


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.kind)
def test_render_json_matches_render(kind) -> None:  # type: ignore[no-untyped-def]
    expected = render(kind, ROW)
    expected["metadata"]["resourceVersion"] = "42"
    assert json.loads(render_json(kind, texts(ROW), 42)) == expected


def test_deleting_object_renders_deletion_fields() -> None:
    row = dict(
        ROW,
        deletion_timestamp="2026-11-29 10:00:00+00",
        deletion_grace_period_seconds=30,
        finalizers=["x/y"],
    )
    kind = KINDS[3]
    obj = json.loads(render_json(kind, texts(row), 9))
    assert obj["metadata"]["deletionTimestamp"] == "2026-11-29T10:00:00Z"
    assert obj["metadata"]["deletionGracePeriodSeconds"] == 30
    assert obj == dict(
        render(kind, row), metadata=dict(render(kind, row)["metadata"], resourceVersion="9")
    )


def test_columns_round_trip_and_revision_rewrite() -> None:
    kind = KINDS[3]
    obj = json.loads(render_json(kind, texts(ROW), 5))
    cols = columns_from_object(kind, obj)
    assert json.loads(cols["spec"]) == ROW["spec"]
    assert json.loads(cols["labels"]) == ROW["labels"]
    assert json.loads(with_revision(json.dumps(obj), 8))["metadata"]["resourceVersion"] == "8"


def _cstr(s: str) -> bytes:
    return s.encode() + b"\0"


def test_pgoutput_decoder_assembles_transactions() -> None:
    d = Decoder()
    rel = (
        b"R"
        + struct.pack("!i", 7)
        + _cstr("public")
        + _cstr("pods")
        + b"d"
        + struct.pack("!h", 2)
        + b"\1"
        + _cstr("uid")
        + struct.pack("!ii", 2950, -1)
        + b"\0"
        + _cstr("spec")
        + struct.pack("!ii", 3802, -1)
    )
    assert d.feed(b"B" + struct.pack("!qqi", 100, 0, 55)) is None
    d.feed(rel)
    val = b'{"a": 1}'
    d.feed(
        b"I"
        + struct.pack("!i", 7)
        + b"N"
        + struct.pack("!h", 2)
        + b"t"
        + struct.pack("!i", 1)
        + b"u"
        + b"t"
        + struct.pack("!i", len(val))
        + val
    )
    d.feed(
        b"U"
        + struct.pack("!i", 7)
        + b"N"
        + struct.pack("!h", 2)
        + b"t"
        + struct.pack("!i", 1)
        + b"u"
        + b"u"
    )
    d.feed(
        b"D"
        + struct.pack("!i", 7)
        + b"K"
        + struct.pack("!h", 2)
        + b"t"
        + struct.pack("!i", 1)
        + b"u"
        + b"n"
    )
    tx = d.feed(b"C" + struct.pack("!bqqq", 0, 100, 120, 0))
    assert tx is not None and tx.xid == 55 and (tx.commit_lsn, tx.end_lsn) == (100, 120)
    assert [(c.table, c.op) for c in tx.changes] == [("pods", "I"), ("pods", "U"), ("pods", "D")]
    assert tx.changes[0].values == {"uid": "u", "spec": '{"a": 1}'}
    assert tx.changes[1].values["spec"] is UNCHANGED
    assert tx.changes[2].values["spec"] is None


def test_lsn_text_round_trip() -> None:
    for lsn in (0, 1, 0x16B3748, (5 << 32) | 0xABCDEF):
        assert parse_lsn(format_lsn(lsn)) == lsn
