"""The node agent's settings, from command-line flags over environment variables over defaults.

One agent runs per machine and is started by an operator, a service manager or the dev stack,
which all find environment variables easiest to pass; flags win so a person can override one
setting by hand. Parsing is a pure function of ``argv`` and an environment mapping, so tests
need neither the process's arguments nor its environment.

| setting | flag | variable | default |
|---|---|---|---|
| API URL | ``--server`` | ``QM_API_URL`` | ``http://127.0.0.1:8080`` |
| token | ``--token`` | ``QM_AGENT_TOKEN``, else ``QM_BOOTSTRAP_TOKEN`` | none |
| node name | ``--node-name`` | ``QM_NODE_NAME`` | the hostname |
| zone | ``--zone`` | ``QM_AGENT_ZONE`` | none |
| machine class | ``--machine-class`` | ``QM_AGENT_MACHINE_CLASS`` | none |
| runtime | ``--runtime`` | ``QM_AGENT_RUNTIME`` | ``process`` |
| state dir | ``--state-dir`` | ``QM_AGENT_STATE_DIR`` | ``.qm/agent/<node>`` |
| node IP | ``--node-ip`` | ``QM_AGENT_NODE_IP`` | ``127.0.0.1`` |

The system reserve is read by :meth:`agent.machine.Reserve.from_env` (``QM_AGENT_RESERVE_*``).
"""

from __future__ import annotations

import argparse
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from agent.machine import Reserve

RUNTIMES = ("process", "sim")
DEFAULT_SERVER = "http://127.0.0.1:8080"


class ConfigError(ValueError):
    """A setting that cannot be used; the message names it."""


@dataclass(frozen=True)
class AgentConfig:
    server: str
    token: str | None
    node_name: str
    zone: str = ""
    machine_class: str = ""
    runtime: str = "process"
    state_dir: Path = Path(".qm/agent")
    node_ip: str = "127.0.0.1"
    reserve: Reserve = field(default_factory=Reserve)

    @property
    def pods_dir(self) -> Path:
        """Where the process runtime lays out each pod's directory and logs."""
        return self.state_dir / "pods"


def _parser(env: Mapping[str, str]) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m agent", description="Quaymaster node agent")
    p.add_argument("--server", default=env.get("QM_API_URL") or DEFAULT_SERVER)
    p.add_argument(
        "--token", default=env.get("QM_AGENT_TOKEN") or env.get("QM_BOOTSTRAP_TOKEN") or None
    )
    p.add_argument("--node-name", default=env.get("QM_NODE_NAME") or "")
    p.add_argument("--zone", default=env.get("QM_AGENT_ZONE") or "")
    p.add_argument("--machine-class", default=env.get("QM_AGENT_MACHINE_CLASS") or "")
    p.add_argument("--runtime", default=env.get("QM_AGENT_RUNTIME") or "process")
    p.add_argument("--state-dir", default=env.get("QM_AGENT_STATE_DIR") or "")
    p.add_argument("--node-ip", default=env.get("QM_AGENT_NODE_IP") or "127.0.0.1")
    return p


def parse(argv: Sequence[str], env: Mapping[str, str], hostname: str | None = None) -> AgentConfig:
    """Settings from ``argv`` (without the program name) and ``env``; ``ConfigError`` if bad."""
    args = _parser(env).parse_args(list(argv))
    node = (args.node_name or hostname or socket.gethostname()).strip().lower()
    if not node:
        raise ConfigError("the node name is empty (set --node-name or QM_NODE_NAME)")
    if args.runtime not in RUNTIMES:
        raise ConfigError(f"runtime {args.runtime!r} is not one of {', '.join(RUNTIMES)}")
    if not args.server.startswith(("http://", "https://")):
        raise ConfigError(f"server {args.server!r} is not an http(s) URL")
    try:
        reserve = Reserve.from_env(dict(env))
    except ValueError as exc:
        raise ConfigError(f"system reserve: {exc}") from exc
    return AgentConfig(
        server=args.server,
        token=args.token,
        node_name=node,
        zone=args.zone,
        machine_class=args.machine_class,
        runtime=args.runtime,
        state_dir=Path(args.state_dir) if args.state_dir else Path(".qm/agent") / node,
        node_ip=args.node_ip,
        reserve=reserve,
    )
