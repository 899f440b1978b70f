"""The node agent's settings, from command-line flags over environment variables over defaults.

One agent runs per machine and is started by an operator, a service manager or the dev stack,
which all find environment variables easiest to pass; flags win so a person can override one
setting by hand. Parsing is a pure function of ``argv`` and an environment mapping, so tests
need neither the process's arguments nor its environment.

| setting | flag | variable | default |
|---|---|---|---|
| API URL | ``--server`` | ``QM_API_URL`` | ``http://127.0.0.1:8080`` |
| token (skips the join) | ``--token`` | ``QM_AGENT_TOKEN`` | none: the node's own credential |
| bootstrap token | ``--bootstrap-token`` | ``QM_AGENT_BOOTSTRAP_TOKEN`` | none |
| bootstrap token file | ``--bootstrap-token-file`` | ``QM_AGENT_BOOTSTRAP_TOKEN_FILE`` | none |
| node name | ``--node-name`` | ``QM_NODE_NAME`` | the hostname override, else the hostname |
| node hostname | ``--hostname-override`` | ``QM_HOSTNAME_OVERRIDE`` | the node name |
| zone | ``--zone`` | ``QM_AGENT_ZONE`` | none |
| machine class | ``--machine-class`` | ``QM_AGENT_MACHINE_CLASS`` | none |
| runtime | ``--runtime`` | ``QM_AGENT_RUNTIME`` | ``process`` |
| state dir | ``--state-dir`` | ``QM_AGENT_STATE_DIR`` | ``.qm/agent/<node>`` |
| runc images | ``--images-dir`` | ``QM_AGENT_IMAGES_DIR`` | ``<state dir>/images`` |
| node IP | ``--node-ip`` | ``QM_AGENT_NODE_IP`` | ``127.0.0.1`` |
| network namespace of the pods | ``--netns`` | ``QM_AGENT_NETNS`` | none (the host's) |
| pod IP | ``--pod-ip`` | ``QM_AGENT_POD_IP`` | the node IP |
| discovery HTTP URLs (comma-separated) | ``--discovery-http`` | ``QM_DISCOVERY_HTTP`` | none |
| longest wait for the proxies before SIGTERM | ``--drain-max`` | ``QM_AGENT_DRAIN_MAX`` | ``10s`` |
| runc pods' nameserver | ``--cluster-dns`` | ``QM_AGENT_CLUSTER_DNS`` | none |
| cluster DNS domain | ``--cluster-domain`` | ``QM_AGENT_CLUSTER_DOMAIN`` | ``cluster.local`` |
| agent server address | ``--address`` | ``QM_AGENT_ADDRESS`` | ``127.0.0.1`` |
| agent server port (0: any) | ``--port`` | ``QM_AGENT_PORT`` | ``10250`` |
| CA that signed the API server's certificate | ``--ca-file`` | ``QM_CA_FILE`` | the system's |
| agent server cert (HTTPS) | ``--tls-cert-file`` | ``QM_AGENT_TLS_CERT_FILE`` | none (HTTP) |
| agent server key | ``--tls-key-file`` | ``QM_AGENT_TLS_KEY_FILE`` | none |
| log rotation size | ``--log-max-bytes`` | ``QM_AGENT_LOG_MAX_BYTES`` | 10 MiB |
| rotated logs kept | ``--log-keep`` | ``QM_AGENT_LOG_KEEP`` | ``3`` |
| usage sample interval (s) | ``--usage-interval`` | ``QM_AGENT_USAGE_INTERVAL`` | ``10`` |

Node-pressure eviction (:mod:`agent.pressure`) takes ``--eviction-hard``
(``memory.available<100Mi``), ``--eviction-minimum-reclaim`` (``0``),
``--eviction-pressure-transition-period`` (``30s``), ``--pressure-interval`` (``5s``) and
``--pressure-source`` (``meminfo`` or ``pods``), each also as ``QM_AGENT_`` + the flag's name in
capitals with underscores (``QM_AGENT_EVICTION_HARD`` ...).

The system reserve is read by :meth:`agent.machine.Reserve.from_env` (``QM_AGENT_RESERVE_*``).

The other half is a container's configuration as the runtime takes it, resolved from its pod:
argv, environment, resources, grace period, restart rule and ``preStop`` hook
(:func:`container_spec` and friends), pure functions the pod workers call.
"""

from __future__ import annotations

import argparse
import ipaddress
import socket
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent import probes
from agent.machine import Reserve
from agent.pressure import EvictionConfig, eviction_config
from agent.probes import Action
from agent.runtime import ContainerSpec, Resources
from app.core.quantity import cpu_millis, to_bytes

Obj = dict[str, Any]

RUNTIMES = ("process", "runc", "sim")
DEFAULT_SERVER = "http://127.0.0.1:8080"


class ConfigError(ValueError):
    """A setting that cannot be used; the message names it."""


@dataclass(frozen=True)
class AgentConfig:
    server: str
    token: str | None
    node_name: str
    hostname_override: str = ""  # the node's kubernetes.io/hostname; empty: the node name
    zone: str = ""
    machine_class: str = ""
    runtime: str = "process"
    state_dir: Path = Path(".qm/agent")
    node_ip: str = "127.0.0.1"
    reserve: Reserve = field(default_factory=Reserve)
    images_dir: Path | None = None  # the runc runtime's images; None: <state dir>/images
    address: str = "127.0.0.1"
    port: int = 10250
    bootstrap_token: str | None = None  # joins the cluster once (agent.credentials)
    log_max_bytes: int = 10 * 2**20
    log_keep: int = 3
    eviction: EvictionConfig = field(default_factory=EvictionConfig)
    usage_interval: float = 10.0
    netns: str = ""  # the pods' network namespace (/var/run/netns/<name>); "": the host's
    pod_ip: str = ""  # the pods' address; "": the node IP (pods share the host's network)
    discovery_http: tuple[str, ...] = ()  # the discovery replicas' HTTP URLs
    drain_max: float = 10.0  # the longest wait for the proxies before SIGTERM (agent.drain)
    cluster_dns: str = ""  # the nameserver of runc pods' resolv.conf; "": none written
    cluster_domain: str = "cluster.local"
    ca_file: str | None = None  # checks an https API server's certificate; None: system CAs
    tls_cert_file: str | None = None  # with tls_key_file: the agent server serves HTTPS
    tls_key_file: str | None = None

    @property
    def pods_ip(self) -> str:
        """The address every pod of this node has (``status.podIP``)."""
        return self.pod_ip or self.node_ip

    @property
    def pods_dir(self) -> Path:
        """Where the process runtime lays out each pod's directory and logs."""
        return self.state_dir / "pods"


_EVICTION_FLAGS = (
    ("--eviction-hard", "memory.available<100Mi"),
    ("--eviction-minimum-reclaim", "0"),
    ("--eviction-pressure-transition-period", "30s"),
    ("--pressure-interval", "5s"),
    ("--pressure-source", "meminfo"),
)


def _parser(env: Mapping[str, str]) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m agent", description="Quaymaster node agent")
    p.add_argument("--server", default=env.get("QM_API_URL") or DEFAULT_SERVER)
    p.add_argument("--token", default=env.get("QM_AGENT_TOKEN") or None)
    p.add_argument("--bootstrap-token", default=env.get("QM_AGENT_BOOTSTRAP_TOKEN") or None)
    p.add_argument(
        "--bootstrap-token-file", default=env.get("QM_AGENT_BOOTSTRAP_TOKEN_FILE") or None
    )
    p.add_argument("--node-name", default=env.get("QM_NODE_NAME") or "")
    p.add_argument("--hostname-override", default=env.get("QM_HOSTNAME_OVERRIDE") or "")
    p.add_argument("--zone", default=env.get("QM_AGENT_ZONE") or "")
    p.add_argument("--machine-class", default=env.get("QM_AGENT_MACHINE_CLASS") or "")
    p.add_argument("--runtime", default=env.get("QM_AGENT_RUNTIME") or "process")
    p.add_argument("--state-dir", default=env.get("QM_AGENT_STATE_DIR") or "")
    p.add_argument("--images-dir", default=env.get("QM_AGENT_IMAGES_DIR") or "")
    p.add_argument("--node-ip", default=env.get("QM_AGENT_NODE_IP") or "127.0.0.1")
    p.add_argument("--address", default=env.get("QM_AGENT_ADDRESS") or "127.0.0.1")
    p.add_argument("--port", default=env.get("QM_AGENT_PORT") or "10250")
    p.add_argument("--log-max-bytes", default=env.get("QM_AGENT_LOG_MAX_BYTES") or "10485760")
    p.add_argument("--log-keep", default=env.get("QM_AGENT_LOG_KEEP") or "3")
    p.add_argument("--usage-interval", default=env.get("QM_AGENT_USAGE_INTERVAL") or "10")
    p.add_argument("--netns", default=env.get("QM_AGENT_NETNS") or "")
    p.add_argument("--pod-ip", default=env.get("QM_AGENT_POD_IP") or "")
    p.add_argument("--discovery-http", default=env.get("QM_DISCOVERY_HTTP") or "")
    p.add_argument("--drain-max", default=env.get("QM_AGENT_DRAIN_MAX") or "10")
    p.add_argument("--cluster-dns", default=env.get("QM_AGENT_CLUSTER_DNS") or "")
    p.add_argument(
        "--cluster-domain", default=env.get("QM_AGENT_CLUSTER_DOMAIN") or "cluster.local"
    )
    p.add_argument("--ca-file", default=env.get("QM_CA_FILE") or None)
    p.add_argument("--tls-cert-file", default=env.get("QM_AGENT_TLS_CERT_FILE") or None)
    p.add_argument("--tls-key-file", default=env.get("QM_AGENT_TLS_KEY_FILE") or None)
    for flag, default in _EVICTION_FLAGS:
        var = "QM_AGENT_" + flag.removeprefix("--").replace("-", "_").upper()
        p.add_argument(flag, default=env.get(var) or default)
    return p


def parse(argv: Sequence[str], env: Mapping[str, str], hostname: str | None = None) -> AgentConfig:
    """Settings from ``argv`` (without the program name) and ``env``; ``ConfigError`` if bad."""
    args = _parser(env).parse_args(list(argv))
    override = args.hostname_override.strip().lower()
    node = (args.node_name or override or hostname or socket.gethostname()).strip().lower()
    if not node:
        raise ConfigError("the node name is empty (set --node-name or QM_NODE_NAME)")
    if args.runtime not in RUNTIMES:
        raise ConfigError(f"runtime {args.runtime!r} is not one of {', '.join(RUNTIMES)}")
    if not args.server.startswith(("http://", "https://")):
        raise ConfigError(f"server {args.server!r} is not an http(s) URL")
    if (args.tls_cert_file is None) != (args.tls_key_file is None):
        raise ConfigError("--tls-cert-file and --tls-key-file go together")
    try:
        reserve = Reserve.from_env(dict(env))
    except ValueError as exc:
        raise ConfigError(f"system reserve: {exc}") from exc
    try:
        eviction = eviction_config(
            args.eviction_hard,
            args.eviction_minimum_reclaim,
            args.eviction_pressure_transition_period,
            args.pressure_interval,
            args.pressure_source,
        )
    except ValueError as exc:
        raise ConfigError(f"eviction: {exc}") from exc
    return AgentConfig(
        server=args.server,
        token=args.token,
        node_name=node,
        hostname_override=override,
        zone=args.zone,
        machine_class=args.machine_class,
        runtime=args.runtime,
        state_dir=Path(args.state_dir) if args.state_dir else Path(".qm/agent") / node,
        images_dir=Path(args.images_dir) if args.images_dir else None,
        node_ip=args.node_ip,
        reserve=reserve,
        address=args.address,
        port=_int_setting("port", args.port, 0, 65535),
        bootstrap_token=_bootstrap_token(args.bootstrap_token, args.bootstrap_token_file),
        log_max_bytes=_int_setting("log max bytes", args.log_max_bytes, 0, 2**40),
        log_keep=_int_setting("log keep", args.log_keep, 0, 100),
        eviction=eviction,
        usage_interval=_seconds_setting("usage interval", args.usage_interval, 0.1, 3600.0),
        netns=_netns_setting(args.netns),
        pod_ip=args.pod_ip.strip(),
        discovery_http=tuple(u.strip() for u in args.discovery_http.split(",") if u.strip()),
        drain_max=_seconds_setting("drain max", args.drain_max, 0.0, 3600.0),
        cluster_dns=_cluster_dns_setting(args.cluster_dns),
        cluster_domain=args.cluster_domain.strip().strip(".") or "cluster.local",
        ca_file=args.ca_file,
        tls_cert_file=args.tls_cert_file,
        tls_key_file=args.tls_key_file,
    )


def _bootstrap_token(value: str | None, path: str | None) -> str | None:
    """The bootstrap token given, else the first line of the file named (kept out of the
    command line, where any user of the machine could read it)."""
    if value or not path:
        return value or None
    try:
        return Path(path).read_text().strip() or None
    except FileNotFoundError:
        return None  # spent and removed: the saved credential is what counts now
    except OSError as exc:
        raise ConfigError(f"bootstrap token file {path}: {exc.strerror}") from None


def _netns_setting(value: str) -> str:
    name = value.strip()
    if name and ("/" in name or name in (".", "..")):
        raise ConfigError(f"netns {name!r} is not a namespace name (one under /var/run/netns)")
    return name


def _cluster_dns_setting(value: str) -> str:
    """The nameserver address, which must be an IP address (resolv.conf takes no names)."""
    address = value.strip()
    if address:
        try:
            ipaddress.ip_address(address)
        except ValueError:
            raise ConfigError(f"cluster DNS {address!r} is not an IP address") from None
    return address


def _int_setting(what: str, value: str, low: int, high: int) -> int:
    try:
        n = int(value)
    except ValueError:
        raise ConfigError(f"{what} {value!r} is not an integer") from None
    if not low <= n <= high:
        raise ConfigError(f"{what} {n} is not between {low} and {high}")
    return n


def _seconds_setting(what: str, value: str, low: float, high: float) -> float:
    """Seconds as a number, with or without an ``s`` (``10``, ``2.5s``)."""
    try:
        n = float(value.removesuffix("s"))
    except ValueError:
        raise ConfigError(f"{what} {value!r} is not a number of seconds") from None
    if not low <= n <= high:  # also refuses NaN
        raise ConfigError(f"{what} {value!r} is not between {low:g} and {high:g} seconds")
    return n


# -- the pod spec, resolved for the runtime ----------------------------------------------------


def _quantity(amounts: Obj, key: str, parse: Callable[[Any], int]) -> int | None:
    return parse(amounts[key]) if amounts.get(key) is not None else None


def container_spec(pod_uid: str, c: Obj) -> ContainerSpec:
    """argv = ``command`` + ``args``; literal ``env`` values (``valueFrom`` is not resolved);
    the memory limit, and the CPU request (the limit when no request is given) and limit."""
    res = c.get("resources") or {}
    limits, requests = res.get("limits") or {}, res.get("requests") or {}
    cpu_limit = _quantity(limits, "cpu", cpu_millis)
    cpu_request = _quantity(requests, "cpu", cpu_millis)
    env = {
        str(e["name"]): str(e.get("value", "")) for e in c.get("env") or [] if "valueFrom" not in e
    }
    return ContainerSpec(
        pod_uid=pod_uid,
        name=str(c["name"]),
        command=[str(a) for a in [*(c.get("command") or []), *(c.get("args") or [])]],
        env=env,
        resources=Resources(
            memory_limit_bytes=_quantity(limits, "memory", to_bytes),
            cpu_request_millis=cpu_request if cpu_request is not None else cpu_limit,
            cpu_limit_millis=cpu_limit,
        ),
        image=str(c.get("image") or ""),
    )


def grace_seconds(pod: Obj) -> float:
    """``metadata.deletionGracePeriodSeconds`` once deleting, else the spec's (default 30)."""
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    for value in (
        meta.get("deletionGracePeriodSeconds"),
        spec.get("terminationGracePeriodSeconds"),
    ):
        if isinstance(value, int | float) and not isinstance(value, bool):
            return max(0.0, float(value))
    return 30.0


def restarts(policy: str, exit_code: int) -> bool:
    return policy == "Always" or (policy == "OnFailure" and exit_code != 0)


def pre_stop_action(c: Obj) -> Action | None:
    hook = (c.get("lifecycle") or {}).get("preStop")
    if not hook:
        return None
    try:
        return probes.parse_probe("liveness", hook, {}).action
    except probes.ProbeSpecError:
        return None
