"""The node agent: the loop that keeps this machine's pods what the control plane says.

Two threads keep the agent's picture of the control plane (ADR 0017): the :class:`LeaseKeeper`
renews the node's lease every 10 s, the :class:`AssignmentSource` lists and watches the pods
bound to the node. An asyncio loop compares that picture with the pods it runs, a few times a
second: new pods pass the fit re-check and get a :class:`~agent.pods.PodWorker` (its own task),
refused ones get a ``Failed`` status, deleted ones are stopped and their deletion confirmed,
ones no longer assigned after a relist are stopped without a word to the API, and at-most-one
pods learn whether the lease still holds. The node's status is kept by
:class:`NodeStatusWriter`, forced when the lease epoch moved (the controller fenced the node).

Nothing here stops a pod because the API is away: the assignment map keeps its last state and
workers keep running and restarting their containers (static stability).

The future ``python -m agent`` entry point is :func:`main`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import ssl
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from typing import Any

from agent import config as agent_config
from agent import credentials, netns
from agent.api import POD, AgentApi, Unreachable
from agent.assignments import AssignmentSource, Refusal, check_fit, refusal_status
from agent.backoff import CrashLoopBackoff
from agent.credentials import ApiServerReviewer
from agent.drain import Drainer
from agent.lease import LeaseKeeper
from agent.logs import ContainerLogs
from agent.machine import Resources, detect
from agent.node import NodeConfig, NodeStatusWriter
from agent.pods import Clocks, PodApi, PodWorker, Prober
from agent.pressure_monitor import PressureMonitor, signal_for
from agent.probe_exec import ProbeContext, run_probe
from agent.resolv import ClusterDns
from agent.runtime import ContainerSpec, Runtime
from agent.runtime.cgroups import CgroupsUnavailable
from agent.runtime.cgroups import detect as detect_cgroups
from agent.runtime.process import ProcessRuntime, container_env
from agent.runtime.runc import RuncRuntime
from agent.runtime.sim import SimRuntime
from agent.server import AgentServer
from agent.usage import UsageCollector
from app.client import InThreads, RestClient
from app.client.decode import Pager
from app.client.verbs import Verbs
from app.core.errors import NotFound, StatusError
from app.core.kinds import BY_KIND
from app.process import configure_logging, run_until_stopped

log = logging.getLogger(__name__)
Obj = dict[str, Any]


class RestPodApi:
    """:class:`~agent.pods.PodApi` over the shared client's awaited verbs: the agent's
    synchronous client with each call in a thread (a slow API never blocks the loop), or the
    hollow nodes' asynchronous one."""

    def __init__(self, api: RestClient | Verbs[Awaitable[Obj]]) -> None:
        self.api = InThreads(api) if isinstance(api, RestClient) else api

    async def get(self, namespace: str, name: str) -> Obj:
        return await self.api.get(POD, namespace, name)

    async def write_status(self, pod: Obj, new_status: Obj) -> Obj:
        ns = str(pod["metadata"].get("namespace") or "")
        return await self.api.replace(POD, ns, {**pod, "status": new_status}, "status")

    async def get_source(self, kind: str, namespace: str, name: str) -> Obj | None:
        try:
            return await self.api.get(BY_KIND[kind], namespace, name)
        except NotFound:
            return None

    async def confirm_deleted(self, namespace: str, name: str, uid: str) -> None:
        await self.api.delete(POD, namespace, name, grace_seconds=0, uid=uid)

    async def list_services(self, namespace: str) -> list[Obj]:
        """Every page of the namespace's Services; a 404 (no such list) is none."""
        pager = Pager(BY_KIND["Service"], namespace)
        try:
            while pager.add(await self.api.call(pager.request())):
                pass
        except NotFound:
            return []
        return pager.items


def probe_context_for(
    runtime: Runtime, host: str = "127.0.0.1", sockets: netns.NamespaceSockets | None = None
) -> Callable[[ContainerSpec], ProbeContext]:
    """Exec probes run as the container would: its env, its pod directory as cwd, in the pods'
    network namespace. HTTP and TCP probes without a host of their own dial the pod's address
    from inside that namespace (``sockets``; None: the host's network)."""
    host = host or "127.0.0.1"
    socks = sockets or netns.NamespaceSockets(None)
    if isinstance(runtime, ProcessRuntime):
        rt = runtime
        return lambda s: ProbeContext(
            env=container_env(s.env),
            cwd=str(rt.pod_dir(s.pod_uid)),
            host=host,
            exec_prefix=rt.exec_prefix(),
            sockets=socks,
        )
    if isinstance(runtime, RuncRuntime):  # inside the container, with its env and cwd
        rc = runtime
        return lambda s: ProbeContext(
            exec_prefix=rc.exec_prefix(s.pod_uid, s.name), host=host, sockets=socks
        )
    return lambda s: ProbeContext(env=container_env(s.env), host=host, sockets=socks)


def _deleting(pod: Obj) -> bool:
    return bool((pod.get("metadata") or {}).get("deletionTimestamp"))


class Agent:
    def __init__(
        self,
        runtime: Runtime,
        pod_api: PodApi,
        source: AssignmentSource,
        lease: LeaseKeeper,
        allocatable: Resources,
        *,
        node_status: NodeStatusWriter | None = None,
        backoff: CrashLoopBackoff | None = None,
        clocks: Clocks | None = None,
        prober: Prober = run_probe,
        host_ip: str = "",
        poll: float = 0.25,
        tick: float = 0.2,
        pressure: PressureMonitor | None = None,
        pod_ip: str = "",
        sockets: netns.NamespaceSockets | None = None,
    ) -> None:
        self.runtime, self.pod_api, self.source, self.lease = runtime, pod_api, source, lease
        self.pod_ip = pod_ip or host_ip  # the pods' address: the node's, or its namespace's
        self.sockets = sockets or netns.NamespaceSockets(None)  # where probes connect from
        self.pressure = pressure  # node-pressure eviction (agent.pressure_monitor)
        if lease.on_recover is None:  # the API is back: relist now rather than after a backoff
            lease.on_recover = source.poke
        self.allocatable, self.node_status = allocatable, node_status
        self.backoff = CrashLoopBackoff() if backoff is None else backoff  # it has a len()
        self.clocks = clocks or Clocks()
        self.prober, self.host_ip, self.poll, self.tick = prober, host_ip, poll, tick
        self.probe_context = probe_context_for(runtime, self.pod_ip, self.sockets)
        self.workers: dict[str, PodWorker] = {}
        self.tasks: dict[str, asyncio.Task[None]] = {}
        self.done: set[str] = set()  # stopped for good here; never started again
        self.refused: set[str] = set()
        self._epoch_changes = 0
        self._swept = False
        self.server: AgentServer | None = None  # logs, metrics (ADR 0019); set by build()
        self.usage: UsageCollector | None = None  # usage samples (ADR 0020); set by build()
        self.cluster_dns: ClusterDns | None = None  # runc pods' resolv.conf; set by build()
        self.drainer: Drainer | None = None  # the wait for the proxies (ADR 0041); build()

    # -- desired vs running -----------------------------------------------------------------------

    async def reconcile(self) -> None:
        desired = self.source.snapshot()
        if self.source.listed and not self._swept:  # adopted pods no longer assigned here
            self._swept = True
            for uid in {u for u, _ in self.runtime.containers()} - desired.keys():
                log.info("pod %s: adopted but no longer assigned here; stopping it", uid)
                await self.runtime.cleanup(uid)
        if self.source.listed:  # before the first list, an empty map means "unknown"
            for uid, running in self.workers.items():
                if uid not in desired:
                    running.request_stop(confirm=False)
            self.done &= desired.keys()
            self.refused &= desired.keys()
        for uid, pod in desired.items():
            worker = self.workers.get(uid)
            if worker is not None:
                worker.update(pod)
                if _deleting(pod):
                    worker.request_stop(confirm=True)
            elif _deleting(pod) and uid not in self.done:
                self._spawn(pod).request_stop(confirm=True)  # never ran here: confirm only
        fresh = [p for u, p in desired.items() if u not in self.done and u not in self.refused]
        accept, refuse = check_fit(fresh, self.allocatable, set(self.workers))
        for uid in accept:
            self._spawn(desired[uid])
        for refusal in refuse:
            await self._refuse(desired[refusal.uid], refusal)

    def _spawn(self, pod: Obj) -> PodWorker:
        worker = PodWorker(
            pod,
            self.runtime,
            self.pod_api,
            self.backoff,
            clocks=self.clocks,
            prober=self.prober,
            probe_context=self.probe_context,
            host_ip=self.host_ip,
            pod_ip=self.pod_ip,
            poll=self.poll,
            cluster_dns=self.cluster_dns,
            drainer=self.drainer,
        )
        worker.lease_ok = not self.lease.self_kill_due()
        self.workers[worker.uid] = worker
        self.tasks[worker.uid] = asyncio.create_task(self._drive(worker))
        return worker

    async def _drive(self, worker: PodWorker) -> None:
        try:
            await worker.run()
        finally:
            self.workers.pop(worker.uid, None)
            self.tasks.pop(worker.uid, None)
            if worker.finished:
                self.done.add(worker.uid)

    async def _refuse(self, pod: Obj, refusal: Refusal) -> None:
        log.warning("refusing pod %s/%s: %s", refusal.namespace, refusal.name, refusal.message)
        new_status = {**(pod.get("status") or {}), **refusal_status(refusal)}
        try:
            await self.pod_api.write_status(pod, new_status)
        except (Unreachable, StatusError) as exc:
            log.info("refusal of %s not written yet: %s", refusal.name, exc)
            return
        self.refused.add(refusal.uid)

    def check_lease(self) -> None:
        """At-most-one pods run only while the lease holds (killed after 30 s without it)."""
        ok = not self.lease.self_kill_due()
        for worker in self.workers.values():
            if worker.at_most_one and worker.lease_ok != ok:
                worker.lease_ok = ok
                worker.wake.set()

    async def sync_node(self) -> None:
        if self.node_status is None:
            return
        moved = self.lease.epoch_changes != self._epoch_changes
        try:
            await asyncio.to_thread(self.node_status.sync, moved)
        except (Unreachable, StatusError) as exc:
            log.info("node status not written: %s", exc)
            return
        self._epoch_changes = self.lease.epoch_changes

    # -- running ----------------------------------------------------------------------------------

    async def register(self, stop: asyncio.Event) -> None:
        delay = 0.5
        while self.node_status is not None and not stop.is_set():
            try:
                await asyncio.to_thread(self.node_status.register)
                return
            except (Unreachable, StatusError) as exc:
                log.warning("registration failed: %s; retrying in %.1f s", exc, delay)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), delay)
                delay = min(30.0, delay * 2)

    async def run(self, stop: asyncio.Event, *, stop_pods: bool = True) -> None:
        """Register, start the lease and assignment threads, reconcile until ``stop``; then
        stop the threads and (``stop_pods``) every pod this agent runs.

        Containers an earlier run of the agent left running are adopted first: their pods'
        workers carry on with them instead of starting copies."""
        if adopted := self.runtime.adopt():
            log.info("adopted %d running containers", len(adopted))
        if self.server is not None:  # first, so the node's first status carries its port
            port = await self.server.start()
            if self.node_status is not None:
                self.node_status.cfg = replace(self.node_status.cfg, agent_port=port)
        await self.register(stop)
        halt = threading.Event()
        threads = [
            threading.Thread(target=self.lease.run, args=(halt,), daemon=True, name="lease"),
            threading.Thread(target=self.source.run, args=(halt,), daemon=True, name="pods"),
        ]
        for thread in threads:
            thread.start()
        usage = None
        if self.usage is not None:  # best effort, beside the loop: never waits on a pod
            workers = self.workers.values
            usage = asyncio.create_task(self.usage.run(stop, lambda: [w.pod for w in workers()]))
        try:
            while not stop.is_set():
                self.check_lease()
                await self.reconcile()
                if self.pressure is not None:
                    await self.pressure.tick(self.workers, self.runtime)
                await self.sync_node()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), self.tick)
        finally:
            halt.set()
            self.source.poke()
            if usage is not None:
                usage.cancel()
            if stop_pods:
                await self.shutdown()
            for thread in threads:
                await asyncio.to_thread(thread.join, 15.0)
            if self.server is not None:
                await self.server.stop()
            self.sockets.close()

    async def shutdown(self) -> None:
        """Cancel every worker and kill and clean up every pod the runtime still holds."""
        for task in list(self.tasks.values()):
            task.cancel()
        await asyncio.gather(*self.tasks.values(), return_exceptions=True)
        for uid in {uid for uid, _ in self.runtime.containers()}:
            await self.runtime.cleanup(uid)
        self.runtime.close()  # the agent's parent cgroups, once empty


def server_tls(cfg: agent_config.AgentConfig) -> ssl.SSLContext | None:
    """The agent server's TLS context from its certificate and key, if it has them."""
    if not (cfg.tls_cert_file and cfg.tls_key_file):
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cfg.tls_cert_file, cfg.tls_key_file)
    return context


def build(cfg: agent_config.AgentConfig) -> Agent:
    """The agent ``cfg`` describes, with its own clients for each thread."""
    api = AgentApi(cfg.server, cfg.token, ca_file=cfg.ca_file)
    machine = detect()
    node_cfg = NodeConfig(
        cfg.node_name,
        cfg.zone,
        cfg.machine_class,
        reserve=cfg.reserve,
        address=cfg.node_ip,
        hostname=cfg.hostname_override,
    )
    runtime: Runtime
    if cfg.runtime == "sim":
        runtime = SimRuntime()
    elif cfg.runtime == "runc":  # runc needs cgroups: without them the agent does not start
        cgroups = detect_cgroups(f"quaymaster-{cfg.node_name}")
        images = cfg.images_dir.resolve() if cfg.images_dir else None
        runtime = RuncRuntime(
            cfg.state_dir.resolve(), cgroups, images_dir=images, netns_name=cfg.netns or None
        )
    else:
        try:
            cgroups = detect_cgroups(f"quaymaster-{cfg.node_name}")
        except CgroupsUnavailable as exc:
            log.warning("no cgroups, pods run without limits: %s", exc)
            cgroups = None
        runtime = ProcessRuntime(cfg.pods_dir.resolve(), cgroups, netns_name=cfg.netns or None)
    agent = Agent(
        runtime,
        RestPodApi(api),
        AssignmentSource(api.clone(), cfg.node_name),
        LeaseKeeper(api.clone(), cfg.node_name),
        machine.allocatable(cfg.reserve),
        node_status=NodeStatusWriter(api, node_cfg, machine),
        host_ip=cfg.node_ip,
        pod_ip=cfg.pods_ip,
        sockets=netns.NamespaceSockets(cfg.netns or None),
    )
    signal = signal_for(cfg.eviction.source, agent.allocatable.memory_bytes)
    agent.pressure = PressureMonitor(cfg.eviction, signal, api.clone(), cfg.node_name)
    logs = ContainerLogs(
        runtime,
        lambda: [w.pod for w in agent.workers.values()],
        max_bytes=cfg.log_max_bytes,
        keep=cfg.log_keep,
    )
    reviewer = ApiServerReviewer(AgentApi(cfg.server, cfg.token, timeout=5.0, ca_file=cfg.ca_file))
    agent.server = AgentServer(
        logs, address=cfg.address, port=cfg.port, reviewer=reviewer, tls=server_tls(cfg)
    )
    usage_api = AgentApi(cfg.server, cfg.token, timeout=5.0, ca_file=cfg.ca_file)
    agent.usage = UsageCollector(
        runtime,
        cfg.node_name,
        lambda body: usage_api.report_usage(cfg.node_name, body),
        interval=cfg.usage_interval,
    )
    agent.server.add_metrics(agent.usage.metrics_text)
    if cfg.cluster_dns:
        agent.cluster_dns = ClusterDns(cfg.cluster_dns, cfg.cluster_domain)
    if cfg.discovery_http:
        agent.drainer = Drainer(cfg.discovery_http, cfg.drain_max)
    return agent


def main(argv: Sequence[str] | None = None) -> int:
    """Run the agent until SIGINT or SIGTERM; its pods are stopped on the way out."""
    configure_logging(default="info")
    try:
        cfg = agent_config.parse(sys.argv[1:] if argv is None else argv, os.environ)
    except agent_config.ConfigError as exc:
        print(f"agent: {exc}", file=sys.stderr)
        return 2
    if cfg.netns and not netns.exists(cfg.netns):
        print(f"agent: network namespace {cfg.netns} does not exist", file=sys.stderr)
        return 2

    try:
        cfg = with_credential(cfg)
    except credentials.JoinError as exc:
        print(f"agent: {exc}", file=sys.stderr)
        return 2
    run_until_stopped(lambda stop: build(cfg).run(stop))  # built inside the event loop
    return 0


def with_credential(cfg: agent_config.AgentConfig, retry: float = 2.0) -> agent_config.AgentConfig:
    """``cfg`` with the node's own credential (``agent.credentials``) unless a token was
    given; an API that cannot be reached yet is waited for."""
    if cfg.token:
        return cfg
    while True:
        try:
            token = credentials.credential(
                cfg.server, cfg.node_name, cfg.state_dir, cfg.bootstrap_token, ca_file=cfg.ca_file
            )
            return replace(cfg, token=token)
        except Unreachable as exc:
            log.warning("cannot join yet, the API is unreachable: %s", exc)
            time.sleep(retry)
