"""``qm`` as a user runs it: a subprocess talking to a real API server."""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]

Qm = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture(scope="module")
def qm(api_server: Any, tmp_path_factory: pytest.TempPathFactory) -> Qm:
    # The config file points elsewhere: QM_SERVER / QM_TOKEN must take precedence over it.
    config = tmp_path_factory.mktemp("qm-config") / "config.yaml"
    config.write_text("server: http://127.0.0.1:9\ntoken: not-the-token\n")
    env = {
        **os.environ,
        "QM_CONFIG": str(config),
        "QM_SERVER": api_server.url,
        "QM_TOKEN": api_server.token,
    }

    def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "app.cli.main", *args],
            cwd=REPO_ROOT,
            env=env,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    return run


@pytest.fixture(scope="module")
def ns(qm: Qm) -> Iterator[str]:
    name = f"cli-e2e-{secrets.token_hex(3)}"
    manifest = f"apiVersion: quaymaster.io/v1\nkind: Namespace\nmetadata:\n  name: {name}\n"
    result = qm("apply", "-f", "-", stdin=manifest)
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"namespace/{name} created\n"
    yield name
    qm("delete", "namespace", name)


def configmap(name: str, data: dict[str, str], labels: dict[str, str] | None = None) -> str:
    doc = {
        "apiVersion": "quaymaster.io/v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "labels": labels or {}},
        "data": data,
    }
    return json.dumps(doc)


def test_version(qm: Qm) -> None:
    result = qm("version")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0].startswith("Client Version: v")
    assert re.search(r"^Server Version: v\d", result.stdout, re.MULTILINE)


def test_apply_creates_then_is_unchanged_then_configures(qm: Qm, ns: str, tmp_path: Path) -> None:
    manifest = tmp_path / "settings.yaml"
    manifest.write_text(
        "apiVersion: quaymaster.io/v1\n"
        "kind: ConfigMap\n"
        "metadata:\n"
        "  name: settings\n"
        "  labels:\n"
        "    app: settings\n"
        "data:\n"
        "  mode: fast\n"
    )
    first = qm("apply", "-n", ns, "-f", str(manifest))
    assert (first.returncode, first.stdout) == (0, "configmap/settings created\n"), first.stderr

    again = qm("apply", "-n", ns, "-f", str(manifest))
    assert (again.returncode, again.stdout) == (0, "configmap/settings unchanged\n"), again.stderr

    manifest.write_text(manifest.read_text().replace("mode: fast", "mode: careful"))
    changed = qm("apply", "-f", str(manifest), "-n", ns)
    assert (changed.returncode, changed.stdout) == (0, "configmap/settings configured\n"), (
        changed.stderr
    )

    shown = qm("get", "configmap", "settings", "-n", ns, "-o", "json")
    assert shown.returncode == 0, shown.stderr
    obj = json.loads(shown.stdout)
    assert obj["kind"] == "ConfigMap"
    assert obj["metadata"]["namespace"] == ns
    assert obj["metadata"]["labels"] == {"app": "settings"}
    assert obj["data"] == {"mode": "careful"}
    assert obj["metadata"]["uid"]


def test_get_table_and_label_selector(qm: Qm, ns: str) -> None:
    docs = "\n---\n".join(
        [
            configmap("front", {"a": "1"}, {"app": "web", "tier": "front"}),
            configmap("store", {"b": "2"}, {"app": "db"}),
        ]
    )
    applied = qm("apply", "-n", ns, "-f", "-", stdin=docs)
    assert applied.returncode == 0, applied.stderr
    assert applied.stdout.splitlines() == ["configmap/front created", "configmap/store created"]

    table = qm("get", "cm", "-n", ns)
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["NAME", "AGE"]
    names = {line.split()[0] for line in lines[1:]}
    assert {"front", "store"} <= names

    selected = qm("get", "configmaps", "-n", ns, "-l", "app=web")
    assert selected.returncode == 0, selected.stderr
    assert [line.split()[0] for line in selected.stdout.splitlines()] == ["NAME", "front"]

    everywhere = qm("get", "configmaps", "-A", "-l", "app=db", "-o", "wide")
    rows = [line.split() for line in everywhere.stdout.splitlines()]
    assert rows[0] == ["NAMESPACE", "NAME", "AGE", "LABELS"]
    assert [ns, "store"] in [row[:2] for row in rows[1:]]

    names_only = qm("get", "cm", "-n", ns, "-l", "tier=front", "-o", "name")
    assert names_only.stdout == "configmap/front\n"


def test_describe_shows_labels(qm: Qm, ns: str) -> None:
    applied = qm(
        "apply", "-n", ns, "-f", "-", stdin=configmap("described", {"k": "v"}, {"team": "core"})
    )
    assert applied.returncode == 0, applied.stderr
    result = qm("describe", "configmap", "described", "-n", ns)
    assert result.returncode == 0, result.stderr
    text = result.stdout
    assert re.search(r"^Name:\s+described$", text, re.MULTILINE)
    assert re.search(rf"^Namespace:\s+{ns}$", text, re.MULTILINE)
    assert re.search(r"^Labels:\s+team=core$", text, re.MULTILINE)
    assert re.search(r"^Data:\n  k: v$", text, re.MULTILINE)
    assert re.search(r"^Events:", text, re.MULTILINE)


def test_bad_manifest_reports_field_causes(qm: Qm, ns: str) -> None:
    bad_pod = (
        "apiVersion: quaymaster.io/v1\n"
        "kind: Pod\n"
        "metadata:\n"
        "  name: no-image\n"
        "spec:\n"
        "  containers:\n"
        "  - name: main\n"
    )
    docs = bad_pod + "---\n" + configmap("after-bad", {"x": "y"})
    result = qm("apply", "-n", ns, "-f", "-", stdin=docs)
    assert result.returncode == 1
    assert "Error from server (Invalid)" in result.stderr
    assert re.search(r"^  - spec\.containers\[0\]\.image: \S", result.stderr, re.MULTILINE)
    # The failing document does not stop the next one.
    assert result.stdout == "configmap/after-bad created\n"
    missing = qm("get", "pod", "no-image", "-n", ns)
    assert missing.returncode == 1


def test_delete_then_get_is_not_found(qm: Qm, ns: str) -> None:
    applied = qm("apply", "-n", ns, "-f", "-", stdin=configmap("doomed", {"k": "v"}))
    assert applied.returncode == 0, applied.stderr

    deleted = qm("delete", "cm", "doomed", "-n", ns)
    assert (deleted.returncode, deleted.stdout) == (0, 'configmap "doomed" deleted\n')

    gone = qm("get", "cm", "doomed", "-n", ns)
    assert gone.returncode == 1
    assert gone.stderr.startswith("Error from server (NotFound): ")
    assert "doomed" in gone.stderr

    again = qm("delete", "cm", "doomed", "-n", ns)
    assert again.returncode == 1
    assert "Error from server (NotFound)" in again.stderr


def test_unknown_kind_is_a_usage_error(qm: Qm) -> None:
    result = qm("get", "gizmos")
    assert result.returncode == 2
    assert 'resource type "gizmos"' in result.stderr
