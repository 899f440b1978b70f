"""The forwarder's pair of protocols (``agent.proxy.forward``) on fake transports: bytes go
straight across, EOF becomes a half-close, a reset resets the other side, the write buffer's
high-water mark pauses the other side's reading, and what arrives before the pair is joined
is held. The same behaviour on real sockets is in tests/integration/test_proxy.py."""

from __future__ import annotations

from typing import Any, cast

from agent.proxy.forward import Forwarder, _End, join


class FakeTransport:
    def __init__(self) -> None:
        self.written = bytearray()
        self.eofs = 0
        self.closed = self.aborted = False
        self.reading = True

    def write(self, data: bytes) -> None:
        assert not self.eofs and not self.is_closing(), "written after EOF or close"
        self.written += data

    def writelines(self, chunks: list[bytes]) -> None:
        for chunk in chunks:
            self.write(chunk)

    def write_eof(self) -> None:
        self.eofs += 1

    def is_closing(self) -> bool:
        return self.closed or self.aborted

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.aborted = True

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default  # no socket: reset() only aborts


class FakeForwarder:
    def __init__(self) -> None:
        self.gone: list[tuple[_End, _End]] = []

    def accepted(self, client: _End, target: Any) -> None:
        raise AssertionError("only ends made by a listener have a target")

    def ended(self, a: _End, b: _End) -> None:
        self.gone.append((a, b))


def ends(joined: bool = True) -> tuple[_End, _End, FakeTransport, FakeTransport, FakeForwarder]:
    fwd = FakeForwarder()
    a, b = _End(cast(Forwarder, fwd)), _End(cast(Forwarder, fwd))
    ta, tb = FakeTransport(), FakeTransport()
    a.connection_made(cast(Any, ta))
    b.connection_made(cast(Any, tb))
    if joined:
        assert join(a, b)
    return a, b, ta, tb, fwd


def test_bytes_go_straight_across_both_ways() -> None:
    a, b, ta, tb, _ = ends()
    a.data_received(b"request")
    b.data_received(b"response")
    b.data_received(b" more")
    assert tb.written == b"request"
    assert ta.written == b"response more"


def test_what_arrives_before_the_join_is_held_with_reading_paused() -> None:
    a, b, ta, tb, _ = ends(joined=False)
    a.data_received(b"one ")
    a.data_received(b"two")
    assert not ta.reading and tb.written == b""
    assert join(a, b)
    assert tb.written == b"one two" and ta.reading and a.held == []
    a.data_received(b" three")
    assert tb.written == b"one two three"


def test_an_eof_before_the_join_follows_the_held_bytes() -> None:
    a, b, ta, tb, _ = ends(joined=False)
    a.data_received(b"last words")
    a.eof_received()
    assert join(a, b)
    assert (tb.written, tb.eofs) == (b"last words", 1)
    assert not ta.reading  # no resume after its EOF: it would report the EOF again
    assert not tb.is_closing() and not ta.is_closing()  # the other way is still open


def test_eof_is_a_half_close_and_both_eofs_close_both() -> None:
    a, b, ta, tb, _ = ends()
    assert a.eof_received() is True  # keep the socket open: the other way still flows
    assert tb.eofs == 1 and not ta.is_closing() and not tb.is_closing()
    a.eof_received()  # reported again after a resume: passed on once
    assert tb.eofs == 1
    b.data_received(b"answer after the client's EOF")
    assert ta.written == b"answer after the client's EOF"
    b.eof_received()
    assert ta.closed and tb.closed and not ta.aborted and not tb.aborted


def test_an_error_on_one_side_resets_the_other() -> None:
    a, b, ta, _, fwd = ends()
    b.connection_lost(ConnectionResetError(104, "reset by peer"))
    assert ta.aborted and not ta.closed
    assert fwd.gone == []  # until the other side has gone too
    a.connection_lost(None)
    assert fwd.gone == [(a, b)]


def test_a_clean_close_on_one_side_closes_the_other() -> None:
    a, b, ta, tb, fwd = ends()
    a.connection_lost(None)
    assert ta.is_closing() is False and tb.closed and not tb.aborted
    b.connection_lost(None)
    assert fwd.gone == [(b, a)]


def test_a_full_write_buffer_pauses_the_other_side_until_it_drains() -> None:
    a, b, ta, tb, _ = ends()
    b.pause_writing()  # b's socket cannot take more of what a reads
    assert not ta.reading and tb.reading
    b.resume_writing()
    assert ta.reading
    a.pause_writing()
    assert not tb.reading
    b.eof_received()
    a.resume_writing()
    assert not tb.reading  # b is done reading: resuming would report its EOF again


def test_a_side_lost_before_the_join_resets_the_other() -> None:
    a, b, _, tb, fwd = ends(joined=False)
    a.connection_lost(ConnectionResetError())
    assert join(a, b) is False
    assert tb.aborted and fwd.gone == []
