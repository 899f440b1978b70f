"""The node proxy's copy on disk (agent/proxy/subscriber.py ``CopyFile``): what a restarted
proxy routes by before it reaches discovery."""

from __future__ import annotations

from pathlib import Path

from agent.proxy.subscriber import CopyFile
from app.core.traffic.protocol import Replica


def test_a_saved_copy_loads_back(tmp_path: Path) -> None:
    copy = CopyFile(tmp_path / "state" / "copy.json")
    replica = Replica(42, {"s/ns/web": {"ip": "127.100.0.1", "type": "ClusterIP", "ports": []}})
    copy.write(copy.encode(replica))
    assert copy.load() == replica
    assert not (tmp_path / "state" / "copy.json.tmp").exists()


def test_no_copy_or_a_torn_one_starts_empty(tmp_path: Path) -> None:
    copy = CopyFile(tmp_path / "copy.json")
    assert copy.load() == Replica()
    copy.path.write_bytes(b'{"version": 4, "resour')
    assert copy.load() == Replica()
    copy.path.write_bytes(b'{"version": "4", "resources": {}}')
    assert copy.load() == Replica()
