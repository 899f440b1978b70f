"""The switch CI sets: a test missing a host capability is skipped, or fails when
``QM_REQUIRE_CAPABILITIES=1``."""

from __future__ import annotations

from pathlib import Path

import capability
import pytest


def test_a_missing_capability_skips_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(capability.SWITCH, raising=False)
    with pytest.raises(pytest.skip.Exception, match="no cgroups"):
        capability.missing("no cgroups")


def test_a_missing_capability_fails_when_the_run_requires_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(capability.SWITCH, "1")
    with pytest.raises(pytest.fail.Exception, match="no cgroups"):
        capability.missing("no cgroups")


def test_ci_sets_the_switch() -> None:
    ci = (Path(__file__).parents[2] / ".ci" / "run").read_text()
    assert f"export {capability.SWITCH}=1" in ci
