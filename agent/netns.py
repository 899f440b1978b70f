"""Network namespaces for the agent and the node proxy: sockets, probes and children inside one.

On ``make up`` as root every local node has a network namespace of its own
(``/var/run/netns/qm-local-<z>``, made by :mod:`app.devstack.network`; ADR 0039), so three
node proxies on one host can all listen on the same virtual IPs. The agent runs its pods'
processes there (:func:`exec_prefix`), probes them from there, and the node proxy
(``agent.proxy``) creates its listening and outgoing sockets there through
:class:`NamespaceSockets` while its discovery connection stays in the host namespace.

A network namespace belongs to a *thread* (``setns(2)`` moves only the calling thread), and a
socket belongs for good to the namespace it was *created* in, whichever thread binds, connects,
reads or writes it later. So one dedicated thread enters the namespace once and does nothing but
call ``socket(2)``; everything else happens on the caller's asyncio loop. Python 3.11 has no
``os.setns``: :func:`enter` calls libc's through ctypes.

``NamespaceSockets(None)`` is host mode: the same interface creating sockets in the caller's
own namespace, so callers need no branches.

Example (the node proxy)::

    sockets = NamespaceSockets("qm-local-b")       # or NamespaceSockets(None): host mode
    await sockets.start()                          # fails fast if the namespace is missing
    vip = await sockets.listen("127.100.3.7", 80)  # TCP, listening, non-blocking
    server = await asyncio.start_server(handle, sock=vip)
    dns = await sockets.listen("127.0.0.53", 53, kind=socket.SOCK_DGRAM)  # UDP, bound
    await loop.create_datagram_endpoint(DnsProtocol, sock=dns)
    reader, writer = await sockets.open_connection("10.88.0.13", 8000)   # to an endpoint
    ...
    sockets.close()
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import shutil
import socket
import ssl as _ssl
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Final

Socket = socket.socket
AF_INET, AF_INET6 = socket.AF_INET, socket.AF_INET6
SOCK_STREAM, SOCK_DGRAM = socket.SOCK_STREAM, socket.SOCK_DGRAM
_SOL_SOCKET, _SO_REUSEADDR, _SO_REUSEPORT = (
    socket.SOL_SOCKET,
    socket.SO_REUSEADDR,
    socket.SO_REUSEPORT,
)
NETNS_DIR: Final = Path("/var/run/netns")  # where `ip netns add` mounts named namespaces
CLONE_NEWNET: Final = 0x40000000
NSENTER: Final = shutil.which("nsenter")

_thread = threading.local()  # .netns: the namespace this thread has entered


class NamespaceError(OSError):
    """A network namespace that does not exist or cannot be entered."""


def path_of(name: str, netns_dir: Path = NETNS_DIR) -> Path:
    """The file that names namespace ``name`` (``ip netns``'s convention)."""
    if not name or "/" in name or name in (".", ".."):
        raise NamespaceError(f"{name!r} is not a network namespace name")
    return netns_dir / name


def exists(name: str, netns_dir: Path = NETNS_DIR) -> bool:
    """Whether namespace ``name`` exists (its file is there)."""
    return path_of(name, netns_dir).exists()


def _setns(fd: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise NamespaceError(err, f"setns: {os.strerror(err)}")


def enter(name: str, netns_dir: Path = NETNS_DIR) -> None:
    """Move the *calling thread* into namespace ``name`` for good (needs CAP_SYS_ADMIN)."""
    path = path_of(name, netns_dir)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        raise NamespaceError(exc.errno, f"network namespace {name}: {exc.strerror}") from exc
    try:
        _setns(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def entered(name: str | None, netns_dir: Path = NETNS_DIR) -> Iterator[None]:
    """The calling thread inside namespace ``name`` for the block, back where it was after
    (``None``: stay put). For short blocks in tests and tools; long-lived users want
    :class:`NamespaceSockets`."""
    if name is None:
        yield
        return
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    try:
        enter(name, netns_dir)
        try:
            yield
        finally:
            _setns(home)
    finally:
        os.close(home)


def preexec(name: str | None, netns_dir: Path = NETNS_DIR) -> Callable[[], None] | None:
    """A ``preexec_fn`` that starts a ``subprocess`` child inside namespace ``name`` (None in
    host mode). Only for single-threaded callers: ``preexec_fn`` is unsafe in a process with
    threads, so the agent uses :func:`exec_prefix` instead."""
    if name is None:
        return None
    path = path_of(name, netns_dir)
    return lambda: enter(path.name, path.parent)


def exec_prefix(name: str | None, netns_dir: Path = NETNS_DIR) -> tuple[str, ...]:
    """argv to put before a command so it runs inside namespace ``name`` (empty in host mode).

    The prefix ``exec``s the command in the same process (no fork), so the pid the caller
    holds stays the command's: util-linux's ``nsenter --net=FILE --`` where present, else this
    module (``python -m agent.netns exec NAME -- command``)."""
    if name is None:
        return ()
    path = path_of(name, netns_dir)
    if NSENTER:
        return (NSENTER, f"--net={path}", "--")
    return (sys.executable, "-m", "agent.netns", "exec", str(path), "--")


def _enter_thread(name: str, netns_dir: Path) -> None:
    """Run in a :class:`NamespaceSockets` thread: enter once, and remember it."""
    if getattr(_thread, "netns", None) != name:
        enter(name, netns_dir)
        _thread.netns = name


def _new_socket(name: str, family: int, kind: int, proto: int) -> Socket:
    """Run in a :class:`NamespaceSockets` thread: refuses if the thread is not (yet) in
    ``name``, so no socket is ever made in the wrong namespace."""
    if getattr(_thread, "netns", None) != name:
        raise NamespaceError(f"this thread is not in network namespace {name}")
    return socket.socket(family, kind, proto)


class NamespaceSockets:
    """Sockets created inside one network namespace, for use on an asyncio loop.

    ``NamespaceSockets(name)`` owns one thread that has entered ``/var/run/netns/<name>``;
    ``NamespaceSockets(None)`` creates sockets in the caller's namespace (host mode). Every
    socket returned is non-blocking and owned by the caller (close it). Call :meth:`start`
    (or use ``async with``) before the first socket to learn early that the namespace is
    missing; otherwise the first call starts it. :meth:`close` stops the thread; sockets
    already made keep working.
    """

    def __init__(self, name: str | None, *, netns_dir: Path = NETNS_DIR) -> None:
        self.name = name
        self._netns_dir = netns_dir
        self._executor: ThreadPoolExecutor | None = None
        self._started = name is None

    @property
    def host_mode(self) -> bool:
        return self.name is None

    def __repr__(self) -> str:
        return f"NamespaceSockets({self.name!r})"

    async def start(self) -> None:
        """Enter the namespace in the dedicated thread; ``NamespaceError`` if it cannot."""
        if self._started:
            return
        if self._executor is None:
            assert self.name is not None
            path_of(self.name, self._netns_dir)  # a bad name fails here
            self._executor = ThreadPoolExecutor(1, thread_name_prefix=f"netns-{self.name}")
        name = self.name
        assert name is not None
        try:
            await asyncio.get_running_loop().run_in_executor(
                self._executor, _enter_thread, name, self._netns_dir
            )
        except BaseException:
            self.close()
            raise
        self._started = True

    async def socket(
        self, family: int = AF_INET, kind: int = SOCK_STREAM, proto: int = 0
    ) -> Socket:
        """A new non-blocking socket inside the namespace (it stays there for good)."""
        if self.name is None:
            sock = Socket(family, kind, proto)
        else:
            await self.start()
            assert self._executor is not None
            sock = await asyncio.get_running_loop().run_in_executor(
                self._executor, _new_socket, self.name, family, kind, proto
            )
        sock.setblocking(False)
        return sock

    async def listen(
        self,
        host: str,
        port: int,
        *,
        kind: int = SOCK_STREAM,
        backlog: int = 128,
        reuse_port: bool = False,
    ) -> Socket:
        """A socket bound to ``host:port`` inside the namespace: listening for TCP (hand it to
        ``asyncio.start_server(sock=...)``), bound for UDP (``create_datagram_endpoint(sock=)``).
        ``host`` may be any address in 127.0.0.0/8 (the namespace's lo routes them all)."""
        family = AF_INET6 if ":" in host else AF_INET
        sock = await self.socket(family, kind)
        try:
            if kind == SOCK_STREAM:
                sock.setsockopt(_SOL_SOCKET, _SO_REUSEADDR, 1)
            if reuse_port:
                sock.setsockopt(_SOL_SOCKET, _SO_REUSEPORT, 1)
            sock.bind((host, port))
            if kind == SOCK_STREAM:
                sock.listen(backlog)
        except BaseException:
            sock.close()
            raise
        return sock

    async def connect(self, host: str, port: int) -> Socket:
        """A TCP socket connected from inside the namespace to ``host:port`` (an IP literal);
        ``OSError`` (refused, unreachable) as ``connect(2)`` says. Bound it with a timeout."""
        family = AF_INET6 if ":" in host else AF_INET
        sock = await self.socket(family, SOCK_STREAM)
        try:
            await asyncio.get_running_loop().sock_connect(sock, (host, port))
        except BaseException:
            sock.close()
            raise
        return sock

    async def open_connection(
        self,
        host: str,
        port: int,
        *,
        ssl: _ssl.SSLContext | None = None,
        server_hostname: str | None = None,
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """:meth:`connect`, then asyncio streams over it (TLS with ``ssl``)."""
        sock = await self.connect(host, port)
        try:
            if ssl is None:
                return await asyncio.open_connection(sock=sock)
            return await asyncio.open_connection(
                sock=sock, ssl=ssl, server_hostname=server_hostname or host
            )
        except BaseException:
            sock.close()
            raise

    def close(self) -> None:
        """Stop the namespace's thread (idempotent)."""
        if self._executor is not None:
            self._executor.shutdown(wait=False)
            self._executor = None
            self._started = self.name is None

    async def __aenter__(self) -> NamespaceSockets:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m agent.netns exec FILE -- command...``: enter the namespace FILE names (or a
    name under /var/run/netns) and become the command (the fallback of :func:`exec_prefix`)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) < 4 or args[0] != "exec" or args[2] != "--":
        print("usage: python -m agent.netns exec NAME|FILE -- command...", file=sys.stderr)
        return 2
    target = Path(args[1])
    try:
        if "/" in args[1]:
            enter(target.name, target.parent)
        else:
            enter(args[1])
        os.execvp(args[3], args[3:])
    except OSError as exc:
        print(f"agent.netns: {exc}", file=sys.stderr)
        return 125  # as container runtimes do: the command never ran
    return 0  # not reached: execvp does not return


if __name__ == "__main__":
    sys.exit(main())
