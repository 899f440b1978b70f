"""Secret content never reaches a command line (agent.sources), and where Secret files go
(agent.runtime.secret_volume's mount lookup), both pure."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agent import sources
from agent.runtime.secret_volume import fs_type

FETCHED: dict[Any, Any] = {
    ("Secret", "db"): {"data": {"PASSWORD": "aHVudGVyMg==", "USER": "YWRtaW4="}},
    ("ConfigMap", "cfg"): {"data": {"USER": "bob", "MODE": "fast"}},
}


@pytest.mark.parametrize(
    ("container", "tainted"),
    [
        ({"envFrom": [{"secretRef": {"name": "db"}}]}, {"PASSWORD", "USER"}),
        ({"envFrom": [{"secretRef": {"name": "db"}, "prefix": "DB_"}]}, {"DB_PASSWORD", "DB_USER"}),
        (
            {"envFrom": [{"secretRef": {"name": "db"}}, {"configMapRef": {"name": "cfg"}}]},
            {"PASSWORD"},  # the ConfigMap's USER replaced the Secret's
        ),
        (
            {
                "env": [
                    {"name": "P", "valueFrom": {"secretKeyRef": {"name": "db", "key": "USER"}}},
                    {"name": "DSN", "value": "pg://u:$(P)@db"},
                    {"name": "PLAIN", "value": "$(MODE)"},
                ]
            },
            {"P", "DSN"},
        ),
        (
            {
                "envFrom": [{"secretRef": {"name": "db"}}],
                "env": [{"name": "PASSWORD", "value": "not-secret"}],
            },
            {"USER"},
        ),
    ],
)
def test_secret_derived_names(container: dict[str, Any], tainted: set[str]) -> None:
    assert sources.secret_derived(container, FETCHED) == tainted


def test_command_line_refuses_a_secret_value() -> None:
    env = {"P": "hunter2", "MODE": "fast"}
    assert sources.command_line(["run", "--mode=$(MODE)", "$$(P)"], env, {"P"}) == [
        "run",
        "--mode=fast",
        "$(P)",  # an escaped reference is text, not the value
    ]
    with pytest.raises(sources.SourceError, match=r"\$\(P\) holds a Secret's value") as exc:
        sources.command_line(["run", "--password=$(P)"], env, {"P"})
    assert "hunter2" not in str(exc.value)


MOUNTINFO = """\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
25 22 0:21 / /dev/shm rw,nosuid,nodev shared:3 - tmpfs tmpfs rw
90 22 0:50 / /var/lib/pods/u1/.secrets rw,nosuid,nodev,noexec - tmpfs tmpfs rw,mode=700
"""


@pytest.mark.parametrize(
    ("path", "kind"),
    [
        ("/var/lib/pods/u1/.secrets/creds/password", "tmpfs"),
        ("/var/lib/pods/u1/.secrets", "tmpfs"),
        ("/var/lib/pods/u1/.secretsX", "ext4"),
        ("/var/lib/pods/u1/creds", "ext4"),
        ("/dev/shm/x", "tmpfs"),
    ],
)
def test_fs_type_of_the_mount_holding_a_path(path: str, kind: str) -> None:
    assert fs_type(Path(path), MOUNTINFO) == kind
