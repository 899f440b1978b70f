"""``qm logs``: print a container's log, or follow it, through the API server.

``qm logs POD [-c CONTAINER] [-f] [--tail N] [--previous]`` calls
``GET .../namespaces/{ns}/pods/{pod}/log``, which the API server answers from the agent of the
pod's node (ADR 0019). The body is written to stdout as it arrives, bytes unchanged, so a
follow shows each line as the container prints it and ends when the run ends or on Ctrl-C.
Errors come back as ``Status`` bodies and are reported like every other command's.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any, BinaryIO, TextIO

from app.client import build

from .client import ApiClient
from .context import Context, UsageError


def add_parsers(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("logs", parents=[common], help="print or follow a container's log")
    p.add_argument("pod", metavar="POD")
    p.add_argument("-c", "--container", help="the container (required if the pod has several)")
    p.add_argument("-f", "--follow", action="store_true", help="stream new output as it comes")
    p.add_argument("--tail", type=int, default=-1, help="only the last N lines (-1: all)")
    p.add_argument("-p", "--previous", action="store_true", help="the run before the restart")


def log_params(args: argparse.Namespace) -> dict[str, str]:
    if args.tail < -1:
        raise UsageError("--tail must be -1 (all) or a non-negative number of lines")
    params = {
        "follow": str(bool(args.follow)).lower(),
        "previous": str(bool(args.previous)).lower(),
    }
    if args.tail >= 0:
        params["tailLines"] = str(args.tail)
    if args.container:
        params["container"] = args.container
    return params


def stream_log(
    client: ApiClient,
    namespace: str,
    pod: str,
    params: dict[str, str],
    write: Callable[[bytes], None],
) -> None:
    """Hand the log to ``write`` as it arrives; a ``StatusError`` if the server refuses."""
    for chunk in client.stream_bytes(build.log(namespace, pod, params)):
        write(chunk)


def _writer(out: TextIO) -> Callable[[bytes], None]:
    """Bytes unchanged to a real stdout; decoded text to a text stream without a buffer."""
    buffer: BinaryIO | None = getattr(out, "buffer", None)

    def write(chunk: bytes) -> None:
        if buffer is not None:
            buffer.write(chunk)
            buffer.flush()
        else:
            out.write(chunk.decode(errors="replace"))
            out.flush()

    return write


def run_logs(ctx: Context, args: argparse.Namespace) -> int:
    stream_log(ctx.client, ctx.namespace, args.pod, log_params(args), _writer(ctx.out))
    return 0


COMMANDS: dict[str, Callable[[Context, argparse.Namespace], int]] = {"logs": run_logs}
