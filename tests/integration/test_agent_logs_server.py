"""The agent's log server on its own, over a real socket, with log files written by the test:
a follow bridges a copy-truncate rotation without losing or repeating a line and ends when
the run ends; a restart (the file moved to the previous run's) ends it too; malformed
requests get a Status; a silent client is dropped."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from agent import server as server_mod
from agent.logs import ContainerLogs, begin_run, log_path, rotate
from agent.runtime.base import ContainerSpec
from agent.runtime.sim import SimRuntime
from agent.server import AgentServer


class DirSim(SimRuntime):
    def __init__(self, root: Path) -> None:
        super().__init__()
        self.root = root

    def pod_dir(self, pod_uid: str) -> Path:
        return self.root / pod_uid


POD: dict[str, Any] = {
    "metadata": {"namespace": "ns", "name": "p", "uid": "u1"},
    "spec": {"containers": [{"name": "c"}]},
}


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[AgentServer, DirSim, Path]]:
    runtime = DirSim(tmp_path)
    (tmp_path / "u1").mkdir()
    await runtime.start(ContainerSpec("u1", "c", ["x"]))
    logs = ContainerLogs(runtime, lambda: [POD], max_bytes=0, keep=2)  # rotated by hand here
    server = AgentServer(logs, port=0, poll=0.02)
    await server.start()
    try:
        yield server, runtime, log_path(tmp_path / "u1", "c")
    finally:
        await server.stop()


async def request(port: int, raw: bytes) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(raw)
    await writer.drain()
    return reader, writer


def get(path: str) -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode()


async def read_chunks(reader: asyncio.StreamReader, until: bytes, into: list[bytes]) -> None:
    """Decode a chunked body into ``into`` until a chunk holding ``until`` (b"" = the end)."""
    while True:
        size = int((await reader.readuntil(b"\r\n")).strip(), 16)
        if size == 0:
            return
        into.append(await reader.readexactly(size))
        await reader.readexactly(2)
        if until and until in b"".join(into):
            return


async def test_follow_bridges_a_rotation_and_ends_with_the_run(
    served: tuple[AgentServer, DirSim, Path],
) -> None:
    server, runtime, path = served
    path.write_bytes(b"one\ntwo\n")
    reader, writer = await request(server.port, get("/containerLogs/ns/p/c?follow=true"))
    assert b"Transfer-Encoding: chunked" in await reader.readuntil(b"\r\n\r\n")
    got: list[bytes] = []
    await asyncio.wait_for(read_chunks(reader, b"two\n", got), 5)
    long = b"four, longer than all that came before the rotation\n"
    with path.open("ab", buffering=0) as f:  # no await in between: the server reads none
        f.write(b"three\n")  # of this before the rotation copies it to .1
        rotate(path, 2)
        f.write(long)  # the file is longer than the server's offset again: .1 tells
    await asyncio.wait_for(read_chunks(reader, long, got), 5)
    runtime.exit("u1", "c", 0)
    await asyncio.wait_for(read_chunks(reader, b"", got), 5)
    assert b"".join(got) == b"one\ntwo\nthree\n" + long
    writer.close()


async def test_a_restart_ends_the_follow_of_the_old_run(
    served: tuple[AgentServer, DirSim, Path],
) -> None:
    server, _runtime, path = served
    path.write_bytes(b"old run\n")
    reader, writer = await request(server.port, get("/containerLogs/ns/p/c?follow=1&tailLines=5"))
    await reader.readuntil(b"\r\n\r\n")
    got: list[bytes] = []
    await asyncio.wait_for(read_chunks(reader, b"old run\n", got), 5)
    begin_run(path.parent, "c")  # the runtime starts the next run
    path.write_bytes(b"new run\n")
    await asyncio.wait_for(read_chunks(reader, b"", got), 5)
    assert b"".join(got) == b"old run\n"
    writer.close()


@pytest.mark.parametrize(
    ("raw", "code"),
    [
        (b"POST /healthz HTTP/1.1\r\n\r\n", 405),
        (b"GET /nowhere HTTP/1.1\r\n\r\n", 404),
        (b"garbage\r\n\r\n", 400),
        (get("/containerLogs/ns/p/c?tailLines=-4"), 400),
        (get("/containerLogs/ns/p/c?previous=perhaps"), 400),
        (get("/containerLogs/ns/p/zzz"), 404),
        (get("/containerLogs/ns/p"), 404),
    ],
)
async def test_malformed_requests_get_a_status(
    served: tuple[AgentServer, DirSim, Path], raw: bytes, code: int
) -> None:
    server, _runtime, path = served
    path.write_bytes(b"x\n")
    reader, writer = await request(server.port, raw)
    response = await asyncio.wait_for(reader.read(), 5)
    head, _, body = response.partition(b"\r\n\r\n")
    assert head.startswith(f"HTTP/1.1 {code} ".encode())
    assert json.loads(body)["code"] == code
    writer.close()


async def test_a_silent_client_is_dropped(
    served: tuple[AgentServer, DirSim, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    server, _runtime, _path = served
    monkeypatch.setattr(server_mod, "HEAD_TIMEOUT", 0.2)
    reader, writer = await request(server.port, b"GET /healthz HTTP/1.1\r\n")  # never finished
    assert await asyncio.wait_for(reader.read(), 5) == b""
    assert server.connections == 0
    writer.close()
