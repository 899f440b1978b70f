"""The manifests in examples/ are what newcomers apply first: they must apply cleanly with
`qm`, twice (the second time unchanged), and come back as written."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _qm(api_server, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:  # type: ignore[no-untyped-def]
    env = {
        **os.environ,
        "QM_SERVER": api_server.url,
        "QM_TOKEN": api_server.token,
        "QM_CONFIG": str(tmp_path / "none.yaml"),
    }
    return subprocess.run(
        [sys.executable, "-m", "app.cli.main", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_examples_apply_and_reapply_unchanged(api_server, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    first = _qm(api_server, tmp_path, "apply", "-f", "examples")
    assert first.returncode == 0, first.stdout + first.stderr
    lines = first.stdout.splitlines()
    assert "namespace/shop created" in lines
    assert "deployment/web created" in lines
    assert len(lines) == 10
    again = _qm(api_server, tmp_path, "apply", "-f", "examples")
    assert again.returncode == 0, again.stderr
    assert all(line.endswith(" unchanged") for line in again.stdout.splitlines()), again.stdout
    got = _qm(api_server, tmp_path, "get", "deployment", "web", "-n", "shop", "-o", "json")
    assert got.returncode == 0, got.stderr
    assert '"priority": 1000' in got.stdout  # resolved from priorityClassName at admission
