"""``qm secrets``' output and its notion of a finished rotation (app.cli.secrets), pure."""

from __future__ import annotations

from typing import Any

from app.cli.secrets import done, key_table, summary


def status(running: bool = False, old: int = 0, plain: int = 0, **more: Any) -> dict[str, Any]:
    return {
        "activeKeyId": "k2",
        "keys": [
            {"id": "k1", "active": False, "secrets": old},
            {"id": "k2", "active": True, "secrets": 7},
        ],
        "plaintextSecrets": plain,
        "unknownKeySecrets": 0,
        "reencryption": {"running": running, "reencrypted": 5, "conflicts": 1, "failed": []},
        **more,
    }


def test_key_table_and_summary() -> None:
    lines = key_table(status(old=2)).splitlines()
    assert lines[0].split() == ["KEY", "ID", "ACTIVE", "SECRETS"]
    assert lines[1].split() == ["k1", "2"] and lines[2].split() == ["k2", "yes", "7"]
    assert summary(status(plain=3)) == (
        "re-encryption: idle, 5 rewritten, 1 raced by writes, 0 failed;"
        " 3 Secrets still in plaintext"
    )


def test_done_only_when_idle_and_everything_on_the_active_key() -> None:
    assert done(status())
    assert not done(status(running=True))
    assert not done(status(old=1))
    assert not done(status(plain=1))
    assert not done(status(unknownKeySecrets=1))
