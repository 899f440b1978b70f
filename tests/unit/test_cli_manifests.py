"""Manifest parsing and the apply merge."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from app.cli.manifests import (
    Manifest,
    ManifestError,
    expand_paths,
    is_unchanged,
    load_source,
    merge_for_update,
    parse_documents,
    prepare_create,
    target_of,
)

MULTI = """\
apiVersion: quaymaster.io/v1
kind: ConfigMap
metadata:
  name: a
data:
  k: v
---
---
# only a comment
---
apiVersion: quaymaster.io/v1
kind: Pod
metadata:
  name: web
  namespace: prod
spec:
  containers:
  - name: c
    image: nginx
"""


class TestParse:
    def test_multi_document_yaml_skips_empty_documents(self) -> None:
        docs = parse_documents(MULTI, "m.yaml")
        assert [d.obj["metadata"]["name"] for d in docs] == ["a", "web"]
        assert docs[1].where == "document 4"
        assert docs[0].source == "m.yaml"

    def test_json_object_and_array(self) -> None:
        one = {"kind": "ConfigMap", "metadata": {"name": "a"}}
        assert parse_documents(json.dumps(one), "x.json")[0].obj == one
        docs = parse_documents(json.dumps([one, one]), "<stdin>")
        assert len(docs) == 2

    def test_json_with_yaml_fallback_for_flow_mappings(self) -> None:
        docs = parse_documents("{kind: ConfigMap, metadata: {name: a}}", "<stdin>")
        assert docs[0].obj["metadata"]["name"] == "a"

    def test_list_is_expanded(self) -> None:
        text = """
apiVersion: v1
kind: List
items:
- kind: ConfigMap
  metadata: {name: a}
- kind: ConfigMap
  metadata: {name: b}
"""
        docs = parse_documents(text, "l.yaml")
        assert [d.obj["metadata"]["name"] for d in docs] == ["a", "b"]
        assert docs[1].where == "document 1, item 2"

    def test_typed_list_is_expanded_and_empty_list_is_nothing(self) -> None:
        text = json.dumps({"kind": "ConfigMapList", "items": [{"kind": "ConfigMap"}]})
        assert len(parse_documents(text, "l.json")) == 1
        assert parse_documents("kind: List\nitems: []\n", "l.yaml") == []

    def test_empty_input(self) -> None:
        assert parse_documents("", "e.yaml") == []
        assert parse_documents("---\n---\n", "e.yaml") == []

    @pytest.mark.parametrize(
        ("text", "source", "fragment"),
        [
            ("kind: [unclosed\n", "bad.yaml", "bad.yaml: invalid YAML"),
            ("{not json", "bad.json", "bad.json: invalid JSON"),
            ("just some words\n", "words.yaml", "expected a mapping"),
            ("- a\n- b\n", "seq.yaml", "got list"),
            ("kind: List\nitems: 3\n", "l.yaml", "'items' of a List must be a list"),
            ("kind: List\nitems: [3]\n", "l.yaml", "item 1: expected a mapping"),
            ("a: 1\n---\n: : :\n  - x\n", "two.yaml", "two.yaml"),
        ],
    )
    def test_garbage_is_a_clear_error(self, text: str, source: str, fragment: str) -> None:
        with pytest.raises(ManifestError) as info:
            parse_documents(text, source)
        assert fragment in str(info.value)


class TestSources:
    def test_directory_and_stdin(self, tmp_path: Path) -> None:
        (tmp_path / "b.yaml").write_text("kind: ConfigMap\nmetadata: {name: b}\n")
        (tmp_path / "a.json").write_text('{"kind": "ConfigMap", "metadata": {"name": "a"}}')
        (tmp_path / "notes.txt").write_text("ignored")
        (tmp_path / "sub").mkdir()
        paths = expand_paths([str(tmp_path), "-"])
        assert [Path(p).name for p in paths] == ["a.json", "b.yaml", "-"]
        docs = load_source("-", io.StringIO("kind: Pod\nmetadata: {name: p}\n"))
        assert docs[0].source == "<stdin>"

    def test_missing_file(self, tmp_path: Path) -> None:
        with pytest.raises(ManifestError, match="no such file"):
            load_source(str(tmp_path / "nope.yaml"), io.StringIO())


class TestTarget:
    def m(self, obj: dict) -> Manifest:
        return Manifest("f.yaml", "document 1", obj)

    def test_namespace_from_manifest_else_default(self) -> None:
        t = target_of(self.m({"kind": "Pod", "metadata": {"name": "p", "namespace": "x"}}), "d")
        assert (t.kind.kind, t.name, t.namespace) == ("Pod", "p", "x")
        t = target_of(self.m({"kind": "pod", "metadata": {"name": "p"}}), "d")
        assert t.namespace == "d"
        t = target_of(self.m({"kind": "Node", "metadata": {"name": "n", "namespace": "x"}}), "d")
        assert t.namespace is None

    @pytest.mark.parametrize(
        ("obj", "fragment"),
        [
            ({"metadata": {"name": "p"}}, "'kind' is required"),
            ({"kind": "Gadget", "metadata": {"name": "p"}}, "unknown kind 'Gadget'"),
            ({"kind": "Pod"}, "'metadata' with a 'name' is required"),
            ({"kind": "Pod", "metadata": {"generateName": "p-"}}, "'metadata.name' is required"),
        ],
    )
    def test_problems(self, obj: dict, fragment: str) -> None:
        with pytest.raises(ManifestError, match=r"f\.yaml: document 1") as info:
            target_of(self.m(obj), "default")
        assert fragment in str(info.value)

    def test_prepare_create_fills_identity(self) -> None:
        target = target_of(self.m({"kind": "cm", "metadata": {"name": "c"}}), "ns1")
        manifest = {"kind": "cm", "metadata": {"name": "c"}, "data": {"k": "v"}}
        body = prepare_create(manifest, target)
        assert body["apiVersion"] == "quaymaster.io/v1"
        assert body["kind"] == "ConfigMap"
        assert body["metadata"]["namespace"] == "ns1"
        assert "namespace" not in manifest["metadata"]


SERVER: dict[str, Any] = {
    "apiVersion": "quaymaster.io/v1",
    "kind": "ConfigMap",
    "metadata": {
        "name": "c",
        "namespace": "default",
        "uid": "u1",
        "resourceVersion": "7",
        "creationTimestamp": "2024-01-01T00:00:00Z",
        "labels": {"app": "web"},
        "finalizers": ["x"],
    },
    "data": {"k": "v"},
    "binaryData": {"b": "AA=="},
}


class TestMerge:
    def test_same_manifest_is_unchanged(self) -> None:
        manifest = {
            "apiVersion": "quaymaster.io/v1",
            "kind": "ConfigMap",
            "metadata": {"name": "c", "labels": {"app": "web"}},
            "data": {"k": "v"},
            "binaryData": {"b": "AA=="},
        }
        merged = merge_for_update(SERVER, manifest)
        assert merged == SERVER
        assert is_unchanged(SERVER, merged)

    def test_changes_replace_fields_and_keep_server_metadata(self) -> None:
        manifest = {
            "kind": "ConfigMap",
            "metadata": {"name": "c", "annotations": {"note": "x"}},
            "data": {"k": "v2"},
        }
        merged = merge_for_update(SERVER, manifest)
        assert not is_unchanged(SERVER, merged)
        assert merged["data"] == {"k": "v2"}
        assert "binaryData" not in merged  # dropped from the manifest -> removed
        assert "labels" not in merged["metadata"]  # labels replaced by the manifest's (none)
        assert merged["metadata"]["annotations"] == {"note": "x"}
        for key in ("uid", "resourceVersion", "creationTimestamp", "finalizers", "namespace"):
            assert merged["metadata"][key] == SERVER["metadata"][key]
        assert merged["apiVersion"] == "quaymaster.io/v1"
        assert SERVER["data"] == {"k": "v"}  # the server copy is not mutated

    def test_status_is_kept(self) -> None:
        server = {"kind": "Pod", "metadata": {"name": "p"}, "spec": {"a": 1}, "status": {"x": 1}}
        manifest = {"kind": "Pod", "metadata": {"name": "p"}, "spec": {"a": 1}, "status": {}}
        merged = merge_for_update(server, manifest)
        assert merged["status"] == {"x": 1}
        assert is_unchanged(server, merged)

    def test_empty_and_absent_labels_are_the_same(self) -> None:
        server = {"kind": "Pod", "metadata": {"name": "p", "labels": {}}, "spec": {}}
        manifest = {"kind": "Pod", "metadata": {"name": "p"}, "spec": {}}
        assert is_unchanged(server, merge_for_update(server, manifest))

    def test_label_value_change_is_detected(self) -> None:
        manifest = dict(SERVER, metadata={"name": "c", "labels": {"app": "api"}})
        assert not is_unchanged(SERVER, merge_for_update(SERVER, manifest))

    def test_new_top_level_field_is_detected(self) -> None:
        manifest = dict(SERVER, immutable=True)
        merged = merge_for_update(SERVER, manifest)
        assert merged["immutable"] is True
        assert not is_unchanged(SERVER, merged)
