"""Container log files: tail across rotated chunks, the rotation decision and copy-truncate,
the previous run's files, the agent's lookup, and the agent server's parameter checks."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent.logs import (
    ContainerLogs,
    LogLookupError,
    begin_run,
    last_lines,
    log_path,
    previous_log_path,
    rotate,
    rotate_if_due,
    rotated,
    rotation_due,
    run_files,
    tail,
)
from agent.runtime.base import ContainerSpec
from agent.runtime.sim import SimRuntime
from agent.server import HttpError, flag, tail_lines


@pytest.mark.parametrize(
    ("data", "n", "want"),
    [
        (b"a\nb\nc\n", 2, b"b\nc\n"),
        (b"a\nb\nc\n", 3, b"a\nb\nc\n"),
        (b"a\nb\nc\n", 10, b"a\nb\nc\n"),
        (b"a\nb\nc", 1, b"c"),  # an unterminated last line is a line
        (b"a\nb\nc", 2, b"b\nc"),
        (b"a\nb\n", 0, b""),
        (b"", 5, b""),
        (b"a\nb\n", None, b"a\nb\n"),
        (b"\n\n\n", 2, b"\n\n"),
    ],
)
def test_last_lines(data: bytes, n: int | None, want: bytes) -> None:
    assert last_lines(data, n) == want


@given(st.lists(st.text(alphabet="xy ", max_size=5), max_size=20), st.integers(0, 25))
def test_last_lines_matches_splitlines(lines: list[str], n: int) -> None:
    data = "".join(f"{line}\n" for line in lines).encode()
    want = "".join(f"{line}\n" for line in lines[-n:] if n) if n else ""
    assert last_lines(data, n) == want.encode()


@pytest.mark.parametrize(
    ("size", "max_bytes", "due"),
    [(0, 10, False), (10, 10, False), (11, 10, True), (10**9, 0, False), (5, -1, False)],
)
def test_rotation_due(size: int, max_bytes: int, due: bool) -> None:
    assert rotation_due(size, max_bytes) is due


def _lines(a: int, b: int) -> bytes:
    return b"".join(b"line %d\n" % i for i in range(a, b))


def test_tail_reads_across_rotated_files_oldest_first(tmp_path: Path) -> None:
    current = log_path(tmp_path, "c")
    rotated(current, 2).write_bytes(_lines(0, 10))
    rotated(current, 1).write_bytes(_lines(10, 20))
    current.write_bytes(_lines(20, 23))
    files = run_files(current, 3)  # .3 is missing: skipped
    assert tail(files, 2) == _lines(21, 23)
    assert tail(files, 5) == _lines(18, 23)
    assert tail(files, 15) == _lines(8, 23)
    assert tail(files, None) == _lines(0, 23)
    assert tail(files, 0) == b""


def test_tail_stops_at_the_given_end_of_the_current_file(tmp_path: Path) -> None:
    current = log_path(tmp_path, "c")
    rotated(current, 1).write_bytes(_lines(0, 5))
    current.write_bytes(_lines(5, 10))
    end = len(_lines(5, 7))
    assert tail(run_files(current, 1), 3, end) == _lines(4, 7)


def test_tail_of_a_file_larger_than_a_block(tmp_path: Path) -> None:
    current = log_path(tmp_path, "c")
    current.write_bytes(_lines(0, 50_000))  # ~600 KiB, read backwards in blocks
    assert tail([current], 3) == _lines(49_997, 50_000)
    assert tail([current], None) == _lines(0, 50_000)


def test_copy_truncate_keeps_the_writer_appending_and_shifts_chunks(tmp_path: Path) -> None:
    current = log_path(tmp_path, "c")
    fd = os.open(current, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        os.write(fd, b"first\n")
        rotate(current, 2)
        os.write(fd, b"second\n")
        rotate(current, 2)
        os.write(fd, b"third\n")
        rotate(current, 2)  # "first" falls off the end
        os.write(fd, b"fourth\n")
    finally:
        os.close(fd)
    assert current.read_bytes() == b"fourth\n"  # O_APPEND: written at 0, not past a hole
    assert rotated(current, 1).read_bytes() == b"third\n"
    assert rotated(current, 2).read_bytes() == b"second\n"
    assert not rotated(current, 3).exists()
    assert tail(run_files(current, 2), None) == b"second\nthird\nfourth\n"


def test_rotate_if_due_only_past_the_limit(tmp_path: Path) -> None:
    current = log_path(tmp_path, "c")
    current.write_bytes(b"x" * 100)
    assert not rotate_if_due(current, 100, 3)
    assert rotate_if_due(current, 99, 3)
    assert current.stat().st_size == 0 and rotated(current, 1).stat().st_size == 100
    assert not rotate_if_due(log_path(tmp_path, "missing"), 1, 3)


def test_begin_run_makes_the_last_run_previous_and_drops_the_one_before(
    tmp_path: Path,
) -> None:
    current, previous = log_path(tmp_path, "c"), previous_log_path(tmp_path, "c")
    begin_run(tmp_path, "c")  # first run: nothing to move
    assert not previous.exists()
    current.write_bytes(b"run 1\n")
    begin_run(tmp_path, "c")
    assert previous.read_bytes() == b"run 1\n" and not current.exists()
    current.write_bytes(b"run 2 late\n")
    rotated(current, 1).write_bytes(b"run 2 early\n")
    rotated(previous, 4).write_bytes(b"run 0 stale\n")
    begin_run(tmp_path, "c")
    assert tail(run_files(previous, 3), None) == b"run 2 early\nrun 2 late\n"
    assert not rotated(previous, 4).exists() and not rotated(current, 1).exists()


class _DirSim(SimRuntime):
    def __init__(self, root: Path) -> None:
        super().__init__()
        self.root = root

    def pod_dir(self, pod_uid: str) -> Path:
        return self.root / pod_uid


def _pod(uid: str, *names: str) -> dict[str, Any]:
    return {
        "metadata": {"namespace": "ns", "name": "p", "uid": uid},
        "spec": {"containers": [{"name": n} for n in names]},
    }


async def test_container_logs_find_and_running(tmp_path: Path) -> None:
    runtime = _DirSim(tmp_path)
    logs = ContainerLogs(runtime, lambda: [_pod("u1", "a", "b")], keep=2)
    with pytest.raises(LogLookupError, match="not running on this node"):
        logs.find("ns", "other", "a", False)
    with pytest.raises(LogLookupError, match="one of a, b") as err:
        logs.find("ns", "p", "zzz", False)
    assert err.value.code == 404
    with pytest.raises(LogLookupError, match="previous terminated container") as err:
        logs.find("ns", "p", "a", True)
    assert err.value.code == 400
    (tmp_path / "u1").mkdir()
    log_path(tmp_path / "u1", "a").write_bytes(b"x\n")
    target = logs.find("ns", "p", "a", False)
    assert target.files == run_files(log_path(tmp_path / "u1", "a"), 2)
    assert not logs.running(target)
    await runtime.start(ContainerSpec("u1", "a", ["true"]))
    assert logs.running(target)
    log_path(tmp_path / "u1", "a").write_bytes(b"y" * 50)
    logs.max_bytes = 10
    assert logs.rotate_all() == 1


def test_a_runtime_without_pod_directories_keeps_no_logs() -> None:
    logs = ContainerLogs(SimRuntime(), lambda: [_pod("u1", "a")])
    with pytest.raises(LogLookupError, match="keeps no container logs"):
        logs.find("ns", "p", "a", False)
    assert logs.rotate_all() == 0


@pytest.mark.parametrize(
    ("query", "want"),
    [({}, None), ({"tailLines": ["0"]}, 0), ({"tailLines": ["12"]}, 12)],
)
def test_tail_lines_parameter(query: dict[str, list[str]], want: int | None) -> None:
    assert tail_lines(query) == want


@pytest.mark.parametrize("value", ["-1", "x", "1.5", " 3"])
def test_bad_tail_lines_is_a_400(value: str) -> None:
    with pytest.raises(HttpError) as err:
        tail_lines({"tailLines": [value]})
    assert err.value.code == 400


def test_flags() -> None:
    assert flag({}, "follow") is False
    assert flag({"follow": ["true"]}, "follow") is True
    assert flag({"follow": ["0"]}, "follow") is False
    with pytest.raises(HttpError):
        flag({"follow": ["maybe"]}, "follow")
