"""Placeholder replaced below."""

from __future__ import annotations

from app.core.controllers.plan import Outcome


def reconciled(kind: str, result: str, outcome: Outcome, seconds: float) -> None:
    del kind, result, outcome, seconds
