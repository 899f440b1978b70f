"""The backend the traffic tests run as pods (process runtime): an HTTP server on
``$POD_IP:$PORT`` that answers ``GET /`` with its pod's name, ``GET /ready`` with 200 while it
is ready (503 after ``GET /unready``, 200 again after ``GET /readyagain``), and on SIGTERM
stops accepting, finishes the requests it has, and exits: an application that shuts down
properly, with no sleep of its own. Standard library only.
"""

from __future__ import annotations

import asyncio
import os
import signal

NAME = os.environ.get("POD_NAME", "unknown")
state = {"ready": True}
active: set[asyncio.Task[None]] = set()


async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    task = asyncio.current_task()
    assert task is not None
    active.add(task)
    try:
        request = await reader.readuntil(b"\r\n\r\n")
        path = request.split(b" ", 2)[1].decode()
        if path == "/unready":
            state["ready"] = False
        elif path == "/readyagain":
            state["ready"] = True
        ok = path != "/ready" or state["ready"]
        body = NAME.encode() + b"\n"
        status = b"200 OK" if ok else b"503 Service Unavailable"
        writer.write(
            b"HTTP/1.1 " + status + b"\r\nContent-Length: " + str(len(body)).encode()
            + b"\r\nConnection: close\r\n\r\n" + body
        )  # fmt: skip
        await writer.drain()
    except (ConnectionError, asyncio.IncompleteReadError, IndexError):
        pass
    finally:
        writer.close()
        active.discard(task)


async def main() -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    server = await asyncio.start_server(
        handle, os.environ.get("POD_IP", "127.0.0.1"), int(os.environ.get("PORT", "8000"))
    )
    await stop.wait()
    server.close()  # no new connections; those accepted are answered
    await server.wait_closed()
    if active:
        await asyncio.wait(active, timeout=10)


if __name__ == "__main__":
    asyncio.run(main())
