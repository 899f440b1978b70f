"""Pure rendering: paths, cells, ages, tables, describe."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import yaml

from app.cli import printers
from app.cli.printers import MISSING, format_age, lookup
from app.core.kinds import BY_KIND

NOW = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)


def ts(delta: timedelta) -> str:
    return (NOW - delta).strftime("%Y-%m-%dT%H:%M:%SZ")


NODE = {
    "apiVersion": "quaymaster.io/v1",
    "kind": "Node",
    "metadata": {
        "name": "n1",
        "creationTimestamp": ts(timedelta(hours=2)),
        "labels": {
            "topology.kubernetes.io/zone": "eu-1a",
            "topology.kubernetes.io": "shadow",
            "kubernetes.io/hostname": "n1",
        },
    },
    "status": {"allocatable": {"cpu": "4", "memory": "8Gi"}},
}


class TestLookup:
    def test_plain_path(self) -> None:
        assert lookup(NODE, "status.allocatable.cpu") == "4"

    def test_label_key_with_dots_and_slash(self) -> None:
        assert lookup(NODE, "metadata.labels.topology.kubernetes.io/zone") == "eu-1a"

    def test_longest_key_wins_but_falls_back(self) -> None:
        obj = {"a": {"b.c": {"d": 1}, "b": {"c": {"e": 2}}}}
        assert lookup(obj, "a.b.c.d") == 1
        assert lookup(obj, "a.b.c.e") == 2

    def test_missing(self) -> None:
        assert lookup(NODE, "spec.nodeName") is MISSING
        assert lookup(NODE, "metadata.labels.nope.example.com/x") is MISSING

    def test_list_index(self) -> None:
        obj = {"spec": {"containers": [{"image": "nginx"}]}}
        assert lookup(obj, "spec.containers[0].image") == "nginx"
        assert lookup(obj, "spec.containers[3].image") is MISSING

    def test_falsy_values_are_found(self) -> None:
        obj = {"spec": {"suspend": False, "priority": 0}}
        assert lookup(obj, "spec.suspend") is False
        assert lookup(obj, "spec.priority") == 0


class TestFormatValue:
    @pytest.mark.parametrize(
        ("value", "text"),
        [
            (MISSING, "<none>"),
            (None, "<none>"),
            ("", "<none>"),
            (True, "true"),
            (False, "false"),
            (0, "0"),
            ({"cpu": "4", "pods": 10}, "cpu=4,pods=10"),
            (["a", "b"], "a,b"),
            ({}, "<none>"),
        ],
    )
    def test_cells(self, value: object, text: str) -> None:
        assert printers.format_value(value) == text


class TestAge:
    @pytest.mark.parametrize(
        ("delta", "text"),
        [
            (timedelta(seconds=5), "5s"),
            (timedelta(seconds=59), "59s"),
            (timedelta(minutes=3, seconds=20), "3m"),
            (timedelta(hours=2, minutes=59), "2h"),
            (timedelta(days=4, hours=3), "4d"),
            (timedelta(days=800), "2y"),
        ],
    )
    def test_units(self, delta: timedelta, text: str) -> None:
        assert format_age(ts(delta), NOW) == text

    def test_fractional_and_offset_timestamps(self) -> None:
        assert format_age("2024-05-01T11:59:50.123456Z", NOW) == "9s"
        assert format_age("2024-05-01T13:59:00+02:00", NOW) == "1m"

    def test_future_is_zero(self) -> None:
        assert format_age(ts(timedelta(seconds=-30)), NOW) == "0s"

    def test_unknown(self) -> None:
        assert format_age(None, NOW) == "<unknown>"
        assert format_age("yesterday", NOW) == "<unknown>"


class TestTables:
    def test_node_table(self) -> None:
        kind = BY_KIND["Node"]
        headers = printers.table_headers(kind, all_namespaces=True)
        assert headers == ["NAME", "ZONE", "CPU", "MEMORY", "AGE"]
        row = printers.table_row(kind, NODE, all_namespaces=True, now=NOW)
        assert row == ["n1", "eu-1a", "4", "8Gi", "2h"]

    def test_namespace_column_only_for_namespaced_kinds_with_all(self) -> None:
        pod = {
            "metadata": {
                "name": "web",
                "namespace": "prod",
                "creationTimestamp": ts(timedelta(seconds=5)),
            },
            "spec": {"nodeName": "n1", "priority": 0},
            "status": {"phase": "Running"},
        }
        kind = BY_KIND["Pod"]
        assert printers.table_headers(kind) == ["NAME", "NODE", "PHASE", "PRIORITY", "AGE"]
        headers = printers.table_headers(kind, all_namespaces=True, event=True)
        assert headers[:3] == ["EVENT", "NAMESPACE", "NAME"]
        row = printers.table_row(kind, pod, all_namespaces=True, now=NOW, event="ADDED")
        assert row == ["ADDED", "prod", "web", "n1", "Running", "0", "5s"]

    def test_wide_adds_labels(self) -> None:
        kind = BY_KIND["ConfigMap"]
        obj = {"metadata": {"name": "cm", "labels": {"app": "web"}}}
        assert printers.table_headers(kind, wide=True) == ["NAME", "AGE", "LABELS"]
        assert printers.table_row(kind, obj, wide=True, now=NOW) == ["cm", "<unknown>", "app=web"]

    def test_render_aligns_columns(self) -> None:
        text = printers.render_table(["NAME", "AGE"], [["a-long-name", "5s"], ["b", "10m"]])
        lines = text.splitlines()
        assert lines[0] == "NAME          AGE"
        assert lines[1] == "a-long-name   5s"
        assert lines[2] == "b             10m"

    def test_kind_prefix(self) -> None:
        kind = BY_KIND["Pod"]
        row = printers.table_row(kind, {"metadata": {"name": "web"}}, kind_prefix=True, now=NOW)
        assert row[0] == "pod/web"


def test_structured_output() -> None:
    listed = printers.as_list([NODE], "42")
    assert listed["kind"] == "List"
    assert yaml.safe_load(printers.to_yaml(listed))["items"][0]["metadata"]["name"] == "n1"
    assert printers.resource_name(BY_KIND["Node"], NODE) == "node/n1"


class TestDescribe:
    def pod(self) -> dict:
        return {
            "apiVersion": "quaymaster.io/v1",
            "kind": "Pod",
            "metadata": {
                "name": "web",
                "namespace": "default",
                "uid": "u-1",
                "creationTimestamp": ts(timedelta(minutes=5)),
                "labels": {"app": "web", "tier": "fe"},
                "ownerReferences": [
                    {"kind": "ReplicaSet", "name": "web-abc", "controller": True},
                ],
            },
            "spec": {"containers": [{"name": "c", "image": "nginx"}]},
            "status": {
                "phase": "Running",
                "conditions": [
                    {"type": "Ready", "status": "True", "reason": "", "message": ""},
                    {"type": "PodScheduled", "status": "True", "reason": "Scheduled"},
                ],
            },
        }

    def test_sections(self) -> None:
        events: list[dict[str, Any]] = [
            {
                "type": "Normal",
                "reason": "Started",
                "message": "started container",
                "lastTimestamp": ts(timedelta(minutes=1)),
                "source": {"component": "agent"},
            },
            {
                "type": "Normal",
                "reason": "Scheduled",
                "message": "assigned to n1",
                "firstTimestamp": ts(timedelta(minutes=9)),
                "lastTimestamp": ts(timedelta(minutes=4)),
                "count": 3,
                "source": {"component": "scheduler"},
            },
        ]
        text = printers.describe(BY_KIND["Pod"], self.pod(), events, NOW)
        lines = text.splitlines()
        assert lines[0].split() == ["Name:", "web"]
        assert lines[1].split() == ["Namespace:", "default"]
        assert lines[2].split() == ["Labels:", "app=web"]
        assert lines[3].strip() == "tier=fe"
        assert "Annotations:    <none>" in text
        assert "UID:            u-1" in text
        assert "Controlled By:  ReplicaSet/web-abc" in text
        assert "Spec:\n  containers:\n  - name: c\n    image: nginx" in text
        assert "Status:\n  phase: Running" in text
        conditions = text.split("Conditions:\n")[1].splitlines()
        assert conditions[0].split() == ["Type", "Status", "Reason", "Message"]
        assert conditions[2].split() == ["Ready", "True"]
        assert conditions[3].split() == ["PodScheduled", "True", "Scheduled"]
        event_lines = text.split("Events:\n")[1].splitlines()
        assert event_lines[0].split() == ["Type", "Reason", "Age", "From", "Message"]
        # Sorted by lastTimestamp: the older Scheduled event first.
        assert "Scheduled" in event_lines[2] and "4m (x3 over 9m)" in event_lines[2]
        assert "Started" in event_lines[3] and "agent" in event_lines[3]

    def test_no_events_and_cluster_scoped(self) -> None:
        text = printers.describe(BY_KIND["Node"], NODE, [], NOW)
        assert "Namespace:" not in text
        assert text.rstrip().endswith("Events:         <none>")
        assert "topology.kubernetes.io/zone=eu-1a" in text

    def test_configmap_data_and_secret_masking(self) -> None:
        cm = {"kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"k": "v"}}
        assert "Data:\n  k: v" in printers.describe(BY_KIND["ConfigMap"], cm, None, NOW)
        secret = {"metadata": {"name": "s"}, "type": "Opaque", "data": {"pw": "c2VjcmV0"}}
        text = printers.describe(BY_KIND["Secret"], secret, [], NOW)
        assert "c2VjcmV0" not in text
        assert "pw: <8 bytes>" in text
        assert "Type:           Opaque" in text
