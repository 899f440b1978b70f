"""The node proxy's settings, from command-line flags over ``QM_PROXY_*`` variables over defaults.

``make up`` and service managers start one proxy per node beside the agent (and, for
LoadBalancer services, one in edge mode); parsing is a pure function of ``argv`` and an
environment mapping so tests need neither.

| setting | flag | variable | default |
|---|---|---|---|
| node name | ``--node-name`` | ``QM_PROXY_NODE_NAME`` | required unless ``--edge`` |
| zone | ``--zone`` | ``QM_PROXY_ZONE`` | none |
| discovery replicas | ``--discovery`` | ``QM_PROXY_DISCOVERY`` | ``127.0.0.1:9470`` |
| network namespace | ``--netns`` | ``QM_PROXY_NETNS`` | none (host network) |
| DNS address | ``--dns`` | ``QM_PROXY_DNS`` | ``127.0.0.53:53`` with a namespace, else off |
| state dir | ``--state-dir`` | ``QM_PROXY_STATE_DIR`` | ``.qm/proxy/<id>`` |
| metrics port | ``--metrics-port`` | ``QM_PROXY_METRICS_PORT`` | none (off); 0: any |
| metrics address | ``--metrics-address`` | ``QM_PROXY_METRICS_ADDRESS`` | ``127.0.0.1`` |
| edge mode | ``--edge`` | ``QM_PROXY_EDGE`` (``1``) | off |
| edge address | ``--listen`` | ``QM_PROXY_LISTEN`` | required with ``--edge`` |
| fail-open fraction | ``--fail-open`` | ``QM_PROXY_FAIL_OPEN`` | ``0.5`` |
| health interval (s) | ``--health-interval`` | ``QM_PROXY_HEALTH_INTERVAL`` | ``2`` |
| discovery silence (s) | ``--discovery-timeout`` | ``QM_PROXY_DISCOVERY_TIMEOUT`` | ``15`` |
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

DEFAULT_DISCOVERY = "127.0.0.1:9470"
NETNS_DNS = "127.0.0.53:53"
Address = tuple[str, int]


class ConfigError(ValueError):
    """A setting that cannot be used; the message names it."""


@dataclass(frozen=True)
class ProxyConfig:
    node_name: str
    zone: str = ""
    discovery: tuple[Address, ...] = (("127.0.0.1", 9470),)
    netns: str | None = None
    dns: Address | None = None
    state_dir: Path = Path(".qm/proxy")
    metrics_port: int | None = None
    metrics_address: str = "127.0.0.1"
    edge: bool = False
    listen: str = ""
    fail_open: float = 0.5
    health_interval: float = 2.0
    discovery_timeout: float = 15.0

    @property
    def ident(self) -> str:
        """The subscriber id discovery knows this proxy by."""
        return f"edge-{self.listen}" if self.edge else self.node_name

    @property
    def scope(self) -> str:
        return "exposed" if self.edge else "all"


def _parser(env: Mapping[str, str]) -> argparse.ArgumentParser:
    def var(name: str, default: str = "") -> str:
        return env.get("QM_PROXY_" + name) or default

    p = argparse.ArgumentParser(prog="python -m agent.proxy", description="Quaymaster node proxy")
    p.add_argument("--node-name", default=var("NODE_NAME"))
    p.add_argument("--zone", default=var("ZONE"))
    p.add_argument("--discovery", default=var("DISCOVERY", DEFAULT_DISCOVERY))
    p.add_argument("--netns", default=var("NETNS"))
    p.add_argument("--dns", default=env.get("QM_PROXY_DNS"))
    p.add_argument("--state-dir", default=var("STATE_DIR"))
    p.add_argument("--metrics-port", default=var("METRICS_PORT"))
    p.add_argument("--metrics-address", default=var("METRICS_ADDRESS", "127.0.0.1"))
    p.add_argument(
        "--edge", action="store_true", default=var("EDGE").lower() in ("1", "true", "yes")
    )
    p.add_argument("--listen", default=var("LISTEN"))
    p.add_argument("--fail-open", default=var("FAIL_OPEN", "0.5"))
    p.add_argument("--health-interval", default=var("HEALTH_INTERVAL", "2"))
    p.add_argument("--discovery-timeout", default=var("DISCOVERY_TIMEOUT", "15"))
    return p


def address(text: str, what: str) -> Address:
    """``host:port`` with a port from 0 to 65535."""
    host, sep, port = text.strip().rpartition(":")
    if not sep or not host:
        raise ConfigError(f"{what} {text!r} is not host:port")
    try:
        number = int(port)
    except ValueError:
        raise ConfigError(f"{what} {text!r}: the port is not an integer") from None
    if not 0 <= number <= 65535:
        raise ConfigError(f"{what} {text!r}: the port is not between 0 and 65535")
    return host.strip("[]"), number


def _number(what: str, text: str, low: float, high: float) -> float:
    try:
        n = float(text.removesuffix("s"))
    except ValueError:
        raise ConfigError(f"{what} {text!r} is not a number") from None
    if not low <= n <= high:  # also refuses NaN
        raise ConfigError(f"{what} {text!r} is not between {low:g} and {high:g}")
    return n


def parse(argv: Sequence[str], env: Mapping[str, str]) -> ProxyConfig:
    """Settings from ``argv`` (without the program name) and ``env``; ``ConfigError`` if bad."""
    args = _parser(env).parse_args(list(argv))
    node = args.node_name.strip().lower()
    if args.edge and not args.listen:
        raise ConfigError("--edge needs --listen ADDRESS (or QM_PROXY_LISTEN)")
    if not args.edge and not node:
        raise ConfigError("the node name is empty (set --node-name or QM_PROXY_NODE_NAME)")
    discovery = tuple(
        address(part, "discovery address") for part in args.discovery.split(",") if part.strip()
    )
    if not discovery:
        raise ConfigError("no discovery address (set --discovery host:port[,host:port...])")
    netns = args.netns.strip() or None
    dns_text = args.dns if args.dns is not None else (NETNS_DNS if netns else "")
    dns = None if dns_text.strip().lower() in ("", "off") else address(dns_text, "dns address")
    metrics = None
    if args.metrics_port.strip():
        metrics = int(_number("metrics port", args.metrics_port, 0, 65535))
    config = ProxyConfig(
        node_name=node,
        zone=args.zone.strip(),
        discovery=discovery,
        netns=netns,
        dns=dns,
        metrics_port=metrics,
        metrics_address=args.metrics_address,
        edge=args.edge,
        listen=args.listen.strip(),
        fail_open=_number("fail-open fraction", args.fail_open, 0.0, 1.0),
        health_interval=_number("health interval", args.health_interval, 0.05, 3600.0),
        discovery_timeout=_number("discovery timeout", args.discovery_timeout, 0.1, 3600.0),
    )
    state = Path(args.state_dir) if args.state_dir else Path(".qm/proxy") / config.ident
    return replace(config, state_dir=state)
