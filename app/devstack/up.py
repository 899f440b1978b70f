"""``make up``: the whole control plane on one machine, with one command.

Starts PostgreSQL and Redis from wheels (unless ``DATABASE_URL`` /
``QM_BROKER_URL`` point at servers already running), applies the migrations,
sets up the bootstrap token, starts the control-plane processes, writes the CLI
config so ``qm`` works straight away, and on Ctrl-C stops everything in reverse
order. State lives in ``.qm/`` at the repository root.

The processes are listed in :data:`COMPONENTS`. An entry whose module does not
exist yet is skipped, so a new component joins the dev stack by adding one line.

As root, each local node gets a network namespace of its own (:mod:`app.devstack.network`,
ADR 0039), built before the agents and removed on the way out: its agent runs pods there
(``--netns``, ``--pod-ip``) and its node proxy listens there. Otherwise (host mode) pods use
the host's network, each node its own 127.0.0.x, and only local-a's proxy runs.
"""

from __future__ import annotations

import importlib.util
import os
import secrets
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

import yaml

from app.devstack import joins, network
from app.devstack.kubeconfig import kubeconfig
from app.devstack.network import NetworkPlan
from app.devstack.pgbouncer import EmbeddedPgBouncer, pooled_env
from app.devstack.pki import ClusterPki, cluster_pki
from app.devstack.postgres import EmbeddedPostgres
from app.devstack.redis import EmbeddedRedis
from app.devstack.supervise import LOOPBACK, Supervisor, port_is_free, wait_http_ok
from app.store.secret_keys import ENV as SECRET_KEYS_ENV
from app.store.secret_keys import ensure_keys_file

ROOT = Path(__file__).resolve().parents[2]
STATE_DIR = Path(os.environ.get("QM_STATE_DIR") or ROOT / ".qm")
DEFAULT_API_PORT = 8080
CLUSTER_DNS = "127.0.0.53"
EDGE_ADDRESS = "127.0.0.200"  # where the edge proxy serves services of type LoadBalancer
DISCOVERY_PORTS = (9470, 9471)  # the discovery replicas' stream ports ...
DISCOVERY_HTTP_PORTS = (9480, 9481)  # ... and their HTTP ports
DISCOVERY = ",".join(f"{LOOPBACK}:{port}" for port in DISCOVERY_PORTS)
DISCOVERY_HTTP = ",".join(f"http://{LOOPBACK}:{port}" for port in DISCOVERY_HTTP_PORTS)


@dataclass(frozen=True)
class Component:
    """One long-running process of the control plane.

    ``argv`` may use the placeholders ``{python}``, ``{api_port}``, ``{api_url}``
    and ``{state}``. The component is started only if module ``requires``
    exists; when ``argv`` runs that module with ``-m``, it must be runnable
    (a package needs a ``__main__``). ``health`` is a path on the API that must
    answer 200 before the next component starts.

    A process of local node ``node`` (its zone letter) gets ``network_args`` when the
    local network is up (placeholders ``{netns}`` and ``{pod_ip}``); without it, it runs
    only if ``host_mode``.
    """

    name: str
    argv: tuple[str, ...]
    requires: str
    health: str | None = None
    required: bool = False
    node: str = ""
    network_args: tuple[str, ...] = ()
    host_mode: bool = True


COMPONENTS: tuple[Component, ...] = (
    Component(
        "api",
        ("{python}", "-m", "app.api", "--host", LOOPBACK, "--port", "{api_port}"),
        requires="app.api",
        health="/healthz",
        required=True,
    ),
    Component("scheduler", ("{python}", "-m", "app.scheduler"), requires="app.scheduler"),
    Component(
        "worker",
        ("{python}", "-m", "celery", "-A", "workers.app", "worker", "--loglevel=INFO"),
        requires="workers.app",
    ),
    Component("dispatcher", ("{python}", "-m", "workers.dispatch"), requires="workers.dispatch"),
    Component("manager", ("{python}", "-m", "workers.manager"), requires="workers.manager"),
    *(
        Component(
            f"discovery-{i}",
            (
                "{python}",
                "-m",
                "app.discovery",
                "--host",
                LOOPBACK,
                "--port",
                str(port),
                "--http-port",
                str(http_port),
            ),
            requires="app.discovery",
        )
        for i, (port, http_port) in enumerate(
            zip(DISCOVERY_PORTS, DISCOVERY_HTTP_PORTS, strict=True)
        )
    ),  # stateless replicas: subscribers may use either
    Component(
        "beat",
        (
            "{python}",
            "-m",
            "celery",
            "-A",
            "workers.app",
            "beat",
            "--loglevel=INFO",
            "--schedule",
            "{state}/celerybeat-schedule",
        ),
        requires="workers.app",
    ),
    *(
        Component(
            f"agent-{zone}",
            (
                "{python}",
                "-m",
                "agent",
                "--node-name",
                f"local-{zone}",
                "--zone",
                f"zone-{zone}",
                "--state-dir",
                f"{{state}}/agent-{zone}",
                "--bootstrap-token-file",  # joins once, then keeps its node's credential
                f"{{state}}/agent-{zone}/{joins.TOKEN_FILE}",
                "--port",  # each agent's log server needs its own port on one host
                str(10250 + i),
                "--node-ip",  # each machine its own address: pods may all listen on one port
                f"127.0.0.{i + 1}",
                "--address",
                f"127.0.0.{i + 1}",
                "--discovery-http",
                DISCOVERY_HTTP,
                "--tls-cert-file",  # its log server speaks HTTPS with a cluster certificate
                f"{{state}}/pki/agent-{zone}.crt",
                "--tls-key-file",
                f"{{state}}/pki/agent-{zone}.key",
            ),
            requires="agent",
            node=zone,
            # The node proxy answers DNS on 127.0.0.53 inside the node's namespace.
            network_args=(
                "--netns",
                "{netns}",
                "--pod-ip",
                "{pod_ip}",
                "--cluster-dns",
                CLUSTER_DNS,
            ),
        )
        for i, zone in enumerate(network.ZONES)
    ),  # three local machines in three zones, running pods as processes
    *(
        Component(
            f"proxy-{zone}",
            (
                "{python}",
                "-m",
                "agent.proxy",
                "--node-name",
                f"local-{zone}",
                "--zone",
                f"zone-{zone}",
                "--discovery",
                DISCOVERY,
                "--state-dir",
                f"{{state}}/proxy-{zone}",
            ),
            requires="agent.proxy",
            node=zone,
            network_args=("--netns", "{netns}"),
            host_mode=zone == "a",  # one host network holds one set of virtual IPs
        )
        for zone in network.ZONES
    ),  # a node proxy beside each agent
    Component(
        "edge",
        (
            "{python}",
            "-m",
            "agent.proxy",
            "--node-name",
            "edge",
            "--edge",
            "--listen",
            EDGE_ADDRESS,
            "--discovery",
            DISCOVERY,
            "--state-dir",
            "{state}/proxy-edge",
            "--dns",
            "off",
        ),
        requires="agent.proxy",
        # It listens on the host; it reaches the pods (and checks them) from local-a's network.
        node="a",
        network_args=("--netns", "{netns}"),
        host_mode=True,
    ),  # the edge load balancer: LoadBalancer services on EDGE_ADDRESS, on the host
)


def component_argv(
    component: Component, values: dict[str, str], plan: NetworkPlan | None
) -> list[str] | None:
    """The argv ``component`` runs with, given the local network (None: host mode); None
    when it does not run in this mode."""
    argv = [part.format(**values) for part in component.argv]
    if not component.node:
        return argv
    if plan is None:
        return argv if component.host_mode else None
    node = plan.node(component.node)
    return argv + [
        a.format(netns=node.namespace, pod_ip=node.address) for a in component.network_args
    ]


def launchable(component: Component) -> bool:
    """Tell whether the module a component needs exists (and is runnable, for ``-m``)."""
    try:
        spec = importlib.util.find_spec(component.requires)
        if spec is None:
            return False
        runs_with_m = component.requires in component.argv
        if runs_with_m and spec.submodule_search_locations is not None:
            return importlib.util.find_spec(f"{component.requires}.__main__") is not None
    except (ImportError, ValueError):
        return False
    return True


def bootstrap_token(state_dir: Path) -> tuple[str, str]:
    """Return the bootstrap token and where it is kept.

    ``$QM_BOOTSTRAP_TOKEN`` wins; otherwise ``.qm/bootstrap-token`` is read, or
    created with a new random token (mode 0600).
    """
    from_env = os.environ.get("QM_BOOTSTRAP_TOKEN")
    if from_env:
        return from_env, "$QM_BOOTSTRAP_TOKEN"
    path = state_dir / "bootstrap-token"
    if path.exists():
        token = path.read_text().strip()
        if token:
            return token, str(path)
    token = secrets.token_urlsafe(32)
    _write_private(path, token + "\n")
    return token, str(path)


def cli_config_path() -> Path:
    """``$QM_CONFIG``, else ``$XDG_CONFIG_HOME`` (default ``~/.config``)
    ``/quaymaster/config.yaml`` -- the same place ``qm`` reads."""
    configured = os.environ.get("QM_CONFIG")
    return (
        Path(configured)
        if configured
        else Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
        / "quaymaster"
        / "config.yaml"
    )


def write_cli_config(server: str, token: str, ca_file: Path | None = None) -> Path:
    """Point the CLI at this server, trusting ``ca_file`` (keeping any other keys already in
    the file)."""
    path = cli_config_path()
    config: dict[str, object] = {}
    if path.exists():
        loaded = yaml.safe_load(path.read_text())
        if isinstance(loaded, dict):
            config = loaded
    config.update(server=server, token=token)
    if ca_file is not None:
        config["certificate-authority"] = str(ca_file)
    _write_private(path, yaml.safe_dump(config, sort_keys=False))
    return path


def wal_archive(state_dir: Path) -> Path | None:
    """Where the embedded PostgreSQL copies each finished WAL segment, for ``qm db backup``'s
    point-in-time restores (ADR 0058): ``QM_WAL_ARCHIVE``, ``off`` for nowhere."""
    chosen = os.environ.get("QM_WAL_ARCHIVE", str(state_dir / "wal-archive"))
    return None if chosen in ("", "0", "off") else Path(chosen)


def stack_pki(state_dir: Path) -> ClusterPki:
    """The CA (kept across runs), the API server's certificate for the addresses clients use,
    and each local agent's for its own address and node name (ADR 0050)."""
    agents = {
        zone: [f"127.0.0.{i + 1}", f"local-{zone}", "localhost"]
        for i, zone in enumerate(network.ZONES)
    }
    return cluster_pki(state_dir / "pki", [LOOPBACK, "localhost", "::1"], agents)


def write_kubeconfig(state_dir: Path, server: str, pki: ClusterPki, token: str) -> Path:
    """``.qm/kubeconfig``: kubectl as the admin, trusting the cluster CA (private: it holds the
    token)."""
    path = state_dir / "kubeconfig"
    text = yaml.safe_dump(kubeconfig(server, pki.ca.read_bytes(), token), sort_keys=False)
    _write_private(path, text)
    return path


def _write_private(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    path.chmod(0o600)


# The metrics endpoints of the processes ``make up`` starts (the scheduler's is its own flag).
METRICS_PORTS = {
    "QM_WORKER_METRICS_PORT": 9461,
    "QM_DISPATCH_METRICS_PORT": 9462,
    "QM_MANAGER_METRICS_PORT": 9463,
}
_METRICS_OF = {
    "worker": "QM_WORKER_METRICS_PORT",
    "dispatcher": "QM_DISPATCH_METRICS_PORT",
    "manager": "QM_MANAGER_METRICS_PORT",
}


def metrics_urls(env: dict[str, str], started: list[str]) -> str:
    """``name http://127.0.0.1:port/metrics`` for every started process that serves them."""
    shown = [
        f"{name} http://{LOOPBACK}:{env[var]}/metrics"
        for name, var in _METRICS_OF.items()
        if name in started and int(env.get(var) or -1) >= 0
    ]
    return ", ".join(shown) or "none"


def say(message: str) -> None:
    print(f"[up] {message}", flush=True)


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


class Stack:
    """The servers and processes of one ``make up`` run, and their teardown."""

    def __init__(self) -> None:
        self.postgres: EmbeddedPostgres | None = None
        self.redis: EmbeddedRedis | None = None
        self.pgbouncer: EmbeddedPgBouncer | None = None
        self.children = Supervisor()
        self.network: NetworkPlan | None = None  # the local network, once built

    def run(self) -> int:
        STATE_DIR.mkdir(exist_ok=True)
        api_port = int(os.environ.get("QM_API_PORT", DEFAULT_API_PORT))
        if not port_is_free(api_port):
            say(f"port {api_port} is already in use; set QM_API_PORT to another port")
            return 1
        api_url = f"https://{LOOPBACK}:{api_port}"
        pki = stack_pki(STATE_DIR)

        database_url = os.environ.get("DATABASE_URL")
        if not database_url:
            say(f"starting PostgreSQL in {STATE_DIR / 'postgres'}")
            self.postgres = EmbeddedPostgres(
                STATE_DIR / "postgres", wal_archive=wal_archive(STATE_DIR)
            )
            database_url = self.postgres.start()
        broker_url = os.environ.get("QM_BROKER_URL")
        if not broker_url:
            say(f"starting Redis in {STATE_DIR / 'redis'}")
            self.redis = EmbeddedRedis(STATE_DIR / "redis")
            broker_url = self.redis.start()
        token, token_location = bootstrap_token(STATE_DIR)

        env = dict(os.environ)
        env.update(
            DATABASE_URL=database_url,
            QM_BROKER_URL=broker_url,
            QM_BOOTSTRAP_TOKEN=token,
            QM_API_PORT=str(api_port),
            QM_API_URL=api_url,
            QM_CA_FILE=str(pki.ca),  # what the agents (and qm) check the API's certificate with
            QM_TLS_CERT_FILE=str(pki.apiserver.cert),  # the API serves HTTPS only
            QM_TLS_KEY_FILE=str(pki.apiserver.key),
            QM_AGENT_CA_FILE=str(pki.ca),  # the API checks the agents' log servers with it
            PYTHONUNBUFFERED="1",
        )
        env.setdefault("QM_STREAM_DATABASE_URL", database_url)
        for var, port in METRICS_PORTS.items():  # where each process serves /metrics
            env.setdefault(var, str(port))
        env.setdefault("QM_USAGE_REDIS_URL", broker_url)  # the usage store (ADR 0020)
        env.setdefault("QM_DISCOVERY_HTTP", DISCOVERY_HTTP)  # the API lists their subscribers
        # The keys Secrets are sealed with (ADR 0048): created once, mode 0600, kept across runs.
        env.setdefault(SECRET_KEYS_ENV, str(STATE_DIR / "secret-keys.json"))
        if ensure_keys_file(Path(env[SECRET_KEYS_ENV])):
            say(f"created the Secret encryption keys file {env[SECRET_KEYS_ENV]}")

        say("applying migrations (alembic upgrade head)")
        migrate = subprocess.run(
            [sys.executable, "-m", "alembic", "upgrade", "head"], env=env, cwd=ROOT, check=False
        )
        if migrate.returncode != 0:
            say(f"migrations failed (exit code {migrate.returncode})")
            return 1

        agents = {f"local-{zone}": STATE_DIR / f"agent-{zone}" for zone in network.ZONES}
        joining = joins.write_bootstrap_tokens(database_url, agents)
        if joining:
            say(f"bootstrap tokens for {', '.join(joining)} (ADR 0045)")
        pooled = self._start_pgbouncer(env, database_url)

        plan = network.plan_from_env()
        why_not = network.available()
        if why_not is None:
            say(
                f"building the local network: bridge {plan.bridge}, namespaces "
                + ", ".join(f"{n.namespace} ({n.address})" for n in plan.nodes)
            )
            self.network = plan
            network.setup(plan)
            net_line = f"namespaces {', '.join(n.namespace for n in plan.nodes)} on {plan.bridge}"
        else:
            net_line = f"host network ({why_not}): pods on 127.0.0.x, one node proxy"
            say(f"local network: {net_line}")

        started: list[str] = []
        skipped: list[str] = []
        values = {
            "python": sys.executable,
            "api_port": str(api_port),
            "api_url": api_url,
            "state": str(STATE_DIR),
        }
        for component in COMPONENTS:
            if not launchable(component):
                if component.required:
                    say(f"{component.name}: module {component.requires} is missing")
                    return 1
                skipped.append(component.name)
                continue
            argv = component_argv(component, values, self.network)
            if argv is None:
                continue  # not in host mode
            say(f"starting {component.name}: {' '.join(argv)}")
            proc = self.children.start(component.name, argv, env, ROOT)
            if component.health:
                try:
                    wait_http_ok(api_url + component.health, 60.0, proc, str(pki.ca))
                except (RuntimeError, TimeoutError) as exc:
                    say(f"{component.name} did not become healthy: {exc}")
                    return 1
            started.append(component.name)

        config_path = write_cli_config(api_url, token, pki.ca)
        kubeconfig_path = write_kubeconfig(STATE_DIR, api_url, pki, token)
        print(
            "\nQuaymaster is up.\n"
            f"  API:         {api_url}\n"
            f"  API docs:    {api_url}/schema\n"
            f"  Web UI:      {api_url}/ui  (sign in with the token below; accept the local CA)\n"
            f"  Database:    {database_url}\n"
            f"  Backups:     qm db backup --url {database_url} --dir {STATE_DIR / 'backups'}\n"
            f"  PgBouncer:   {pooled}\n"
            f"  Broker:      {broker_url}\n"
            f"  CLI config:  {config_path}\n"
            f"  kubeconfig:  {kubeconfig_path}  (kubectl --kubeconfig {kubeconfig_path} get pods)\n"
            f"  CA:          {pki.ca}\n"
            f"  Token:       {token_location}\n"
            f"  Metrics:     {metrics_urls(env, started)}\n"
            f"  Network:     {net_line}\n"
            f"  Running:     {', '.join(started)}"
            + (f"  (not present yet: {', '.join(skipped)})" if skipped else "")
            + "\n\nCtrl-C to stop.",
            flush=True,
        )

        while True:
            exited = self.children.exited()
            if exited is not None:
                name, code = exited
                say(f"{name} exited unexpectedly with code {code}; stopping everything")
                return 1
            time.sleep(0.5)

    def _start_pgbouncer(self, env: dict[str, str], direct_url: str) -> str:
        """PgBouncer in front of the embedded PostgreSQL (ADR 0057): requests go through it
        as ``qm_app``; the stream and the migrations stay direct. Not with a ``DATABASE_URL``
        of your own, nor with ``QM_PGBOUNCER=0``."""
        if self.postgres is None or env.get("QM_PGBOUNCER") in ("0", "false"):
            return "off (requests connect directly)"
        say(f"starting PgBouncer in {STATE_DIR / 'pgbouncer'}")
        self.pgbouncer = EmbeddedPgBouncer(STATE_DIR / "pgbouncer", self.postgres.port)
        self.pgbouncer.start()
        env.update(pooled_env(direct_url, self.pgbouncer))
        return f"{env['DATABASE_URL']}  (admin: {env['QM_PGBOUNCER_ADMIN_URL']})"

    def shutdown(self) -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if self.children.children:
            say("stopping " + ", ".join(name for name, _ in reversed(self.children.children)))
        self.children.stop_all()
        if self.network is not None:
            say(f"removing the local network ({self.network.bridge})")
            network.teardown(self.network)
        if self.pgbouncer is not None:
            say("stopping PgBouncer")
            self.pgbouncer.stop()
        if self.redis is not None:
            say("stopping Redis")
            self.redis.stop()
        if self.postgres is not None:
            say("stopping PostgreSQL")
            self.postgres.stop()


def main() -> int:
    # Set both explicitly: a shell may have started us with SIGINT ignored.
    signal.signal(signal.SIGINT, _interrupt)
    signal.signal(signal.SIGTERM, _interrupt)
    stack = Stack()
    try:
        return stack.run()
    except KeyboardInterrupt:
        return 0
    except RuntimeError as exc:  # a server that would not start; its log is in the message
        say(str(exc))
        return 1
    finally:
        stack.shutdown()


if __name__ == "__main__":
    sys.exit(main())
