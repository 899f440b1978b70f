"""One pod's lifecycle on this node: the per-pod worker the agent's loop runs for each pod.

The loop (:mod:`agent.loop`) decides *which* pods run here; a :class:`PodWorker` makes one of
them run: it starts the containers in spec order through the runtime, probes them, restarts
crashed ones in place by the pod's ``restartPolicy`` on the crash-loop backoff, restarts on a
liveness or startup verdict, keeps a :class:`~agent.status.PodView` and writes the pod's status
when the :class:`~agent.status.Coalescer` says a client would notice. Termination (deletion,
unassignment, an at-most-one pod whose lease ran out) ends in this worker too.

Every pod has its own worker and its own asyncio task, so a pod waiting out a 30 s grace
period never delays another (one queue per object). ``step()`` does one pass and returns when
to look again; tests call it directly on a fake clock with the ``sim`` runtime, ``run()`` is
the real loop. The control plane is reached through :class:`PodApi` only: an unreachable API
never stops a running pod, status writes are retried later.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from agent import drain, probes, service_env, sources, status
from agent.api import Unreachable
from agent.backoff import CrashLoopBackoff
from agent.config import container_spec, grace_seconds, pre_stop_action, restarts
from agent.probe_exec import ProbeContext, run_probe
from agent.probes import Action, Outcome, ProbeKind, ProbeResult, ProbeSpec, Restart, Ticket
from agent.resolv import ClusterDns, resolv_conf
from agent.runtime import ContainerSpec, Running, Runtime, StartError, Terminated
from agent.runtime.oci import RESOLV_CONF_FILE
from app.core.errors import Conflict, NotFound, StatusError

log = logging.getLogger(__name__)
Obj = dict[str, Any]
Prober = Callable[[Action, float, ProbeContext], Awaitable[ProbeResult]]
LEASE_LOST = "NodeLeaseExpired"


class PodApi(Protocol):
    """What a worker asks of the control plane; :class:`agent.loop.RestPodApi` is the real
    one, tests pass a fake. Errors are ``StatusError`` subclasses or ``Unreachable``."""

    async def get(self, namespace: str, name: str) -> Obj: ...

    async def write_status(self, pod: Obj, new_status: Obj) -> Obj:
        """PUT ``pods/<name>/status`` conditional on ``pod``'s resourceVersion."""
        ...

    async def confirm_deleted(self, namespace: str, name: str, uid: str) -> None:
        """DELETE with ``gracePeriodSeconds=0`` and the uid as precondition."""
        ...

    async def get_source(self, kind: str, namespace: str, name: str) -> Obj | None:
        """A ConfigMap or Secret the pod names; None when there is none by that name."""
        ...

    async def list_services(self, namespace: str) -> list[Obj]:
        """Every Service of the namespace (for :mod:`agent.service_env`)."""
        ...


@dataclass(frozen=True)
class Clocks:
    """``wall`` (epoch seconds) stamps the status; ``mono`` drives backoff, probes, retries."""

    wall: Callable[[], float] = time.time
    mono: Callable[[], float] = time.monotonic


@dataclass
class _Box:
    """One container: its resolved spec, its probes, and what the status says of it."""

    spec: ContainerSpec
    raw: Obj
    probe_specs: dict[ProbeKind, ProbeSpec]
    view: status.ContainerView
    cp: probes.ContainerProbes | None = None
    ran: bool = False
    started_mono: float | None = None
    restart_due: float | None = None
    done: bool = False  # ended for good: not restarted again
    tasks: dict[ProbeKind, tuple[Ticket, asyncio.Task[ProbeResult]]] = field(default_factory=dict)

    @property
    def running(self) -> bool:
        return isinstance(self.view.state, status.Running)

    def cancel_probes(self) -> None:
        for _, task in self.tasks.values():
            task.cancel()
        self.tasks.clear()
        self.cp = None


def _view_of(term: Terminated, message: str = "") -> status.Terminated:
    return status.Terminated(
        exit_code=term.exit_code,
        reason=term.reason,
        finished_at=term.finished_at.timestamp(),
        started_at=term.started_at.timestamp(),
        signal=term.signal,
        message=message,
    )


def _meta(pod: Obj) -> Obj:
    return pod.get("metadata") or {}


def _newer(candidate: Obj, known: Obj) -> bool:
    """Whether ``candidate`` is a later copy of the pod than ``known`` (by resourceVersion)."""
    a, b = str(_meta(candidate).get("resourceVersion")), str(_meta(known).get("resourceVersion"))
    if a.isdigit() and b.isdigit():
        return int(a) > int(b)
    return a != b


class PodWorker:
    def __init__(
        self,
        pod: Obj,
        runtime: Runtime,
        api: PodApi,
        backoff: CrashLoopBackoff,
        *,
        clocks: Clocks | None = None,
        prober: Prober = run_probe,
        probe_context: Callable[[ContainerSpec], ProbeContext] | None = None,
        host_ip: str = "",
        poll: float = 1.0,
        retry_after: float = 2.0,
        cluster_dns: ClusterDns | None = None,
        drainer: drain.Drainer | None = None,
        pod_ip: str = "",
    ) -> None:
        self.pod = pod
        self.runtime, self.api, self.backoff = runtime, api, backoff
        self.clocks = clocks or Clocks()
        self.prober = prober
        self.probe_context = probe_context or (lambda s: ProbeContext(env=dict(s.env)))
        self.host_ip, self.poll, self.retry_after = host_ip, poll, retry_after
        self.cluster_dns, self.drainer = cluster_dns, drainer
        self.pod_ip = pod_ip or host_ip  # the node's namespace address, or the node's own
        self.uid = str(_meta(pod).get("uid"))
        self.namespace = str(_meta(pod).get("namespace") or "")
        self.name = str(_meta(pod).get("name"))
        spec = pod.get("spec") or {}
        self.policy = str(spec.get("restartPolicy") or "Always")
        self.at_most_one = spec.get("atMostOne") is True
        self.boxes = [self._box(c) for c in spec.get("containers") or []]
        self.inits = [self._box(c, init=True) for c in spec.get("initContainers") or []]
        self.initialized = not self.inits
        self.resolved = False  # env and files resolved from the pod and the objects it names
        self._resolve_due: float | None = None
        self._resolve_failures = 0
        self.coalescer = status.Coalescer()
        self.accepted_at = self.clocks.wall()
        self.wake = asyncio.Event()
        self.writes = 0
        self.lease_ok = True  # set by the loop; at-most-one pods need it
        self.finished = False
        self._stop: tuple[float, bool] | None = None  # (grace, confirm by deleting)
        self._stopped = False
        self._killed = ""
        self._evicted = ""  # the eviction message, once evicted for node pressure
        self._retry_at: float | None = None

    def _box(self, raw: Obj, *, init: bool = False) -> _Box:
        spec = container_spec(self.uid, raw)
        view = status.ContainerView(spec.name, status.Waiting(), image=str(raw.get("image") or ""))
        return _Box(spec, raw, {} if init else probes.parse_container(raw), view)

    @property
    def all_boxes(self) -> list[_Box]:
        return [*self.inits, *self.boxes]

    # -- what the loop tells the worker ----------------------------------------------------------

    def update(self, pod: Obj) -> None:
        """A newer copy from the assignments (the spec is fixed; metadata and status move)."""
        if _newer(pod, self.pod):
            self.pod = pod
            self.wake.set()

    def request_stop(self, *, confirm: bool, grace: float | None = None) -> None:
        """Stop the pod for good: ``confirm`` for a deletion (then delete it with grace 0),
        not for a pod that is simply no longer assigned here (no API write at all)."""
        if self._stop is None or (confirm and not self._stop[1]):
            self._stop = (grace_seconds(self.pod) if grace is None else grace, confirm)
            self.wake.set()

    def evict(self, message: str, grace: float = 0.0) -> None:
        """Stop the pod for good (node pressure) and report it ``Failed``/``Evicted``; the pod
        stays in the API for its controller to replace. A pod already stopping is left be."""
        if self._stop is None:
            self._evicted = message
            self.request_stop(confirm=False, grace=grace)

    @property
    def stopping(self) -> bool:
        return self._stop is not None

    # -- one pass ----------------------------------------------------------------------------------

    async def step(self) -> float | None:
        """Observe, act, write status; the monotonic time to look again (None: on news only)."""
        now = self.clocks.mono()
        if self.finished:
            return None
        if self._stop is not None:
            await self._terminate(now)
            return self._retry_at
        if self.at_most_one and not self.lease_ok:
            await self._kill_for_lease()
        if not self.resolved and not await self._resolve(now):
            await self._sync_status(now)
            return self._next_wakeup()
        if not self.initialized:
            await self._initialize(now)
            if not self.initialized:
                await self._sync_status(now)
                return self._next_wakeup()
        for box in self.boxes:
            self._observe(box, now)
        for box in self.boxes:
            await self._collect(box, now)
        for box in self.boxes:
            if not await self._maybe_start(box, now):
                break  # spec order: a later container waits for an earlier one to start
        for box in self.boxes:
            self._launch(box, now)
        await self._sync_status(now)
        return self._next_wakeup()

    async def _resolve(self, now: float) -> bool:
        """Fetch the ConfigMaps and Secrets the pod names and its namespace's Services, and
        resolve every container's environment and files, once for the pod's life; on failure
        every container waits with ``CreateContainerConfigError`` and it is tried again, 1 s,
        2 s, ... up to 30 s on."""
        if self._resolve_due is not None and now < self._resolve_due:
            return False
        try:
            fetched: dict[sources.Key, Obj | None] = {}
            for kind, name in sorted(sources.references(self.pod)):
                fetched[(kind, name)] = await self.api.get_source(kind, self.namespace, name)
            listed = await self.api.list_services(self.namespace)
            services = service_env.variables(listed, links=service_env.links_enabled(self.pod))
            pod_files = self._pod_files()
            resolved = []
            for box in self.all_boxes:
                env = sources.environment(
                    self.pod, box.raw, fetched, self.host_ip, services, pod_ip=self.pod_ip
                )
                secret = sources.secret_derived(box.raw, fetched)
                spec = dataclasses.replace(
                    box.spec,
                    command=sources.command_line(box.spec.command, env, secret),
                    env=env,
                    files={
                        **box.spec.files,
                        **sources.files(self.pod, box.raw, fetched, sources.CONFIG_MAP),
                        **pod_files,
                    },
                    secret_files=sources.files(self.pod, box.raw, fetched, sources.SECRET),
                )
                resolved.append(spec)
        except (sources.SourceError, Unreachable, StatusError) as exc:
            self._resolve_failures += 1
            self._resolve_due = now + min(30.0, 2.0 ** (self._resolve_failures - 1))
            waiting = status.Waiting(sources.SourceError.reason, str(exc))
            for box in self.all_boxes:
                box.view = dataclasses.replace(box.view, state=waiting)
            return False
        for box, spec in zip(self.all_boxes, resolved, strict=True):
            box.spec = spec
            box.view = dataclasses.replace(box.view, state=status.Waiting())
        self.resolved, self._resolve_due = True, None
        return True

    def _pod_files(self) -> dict[str, bytes]:
        """Files of the pod itself: a ``runc`` pod's resolv.conf (:mod:`agent.resolv`)."""
        if self.runtime.name != "runc":
            return {}  # no mount namespace: the process runtime's pods keep the host's file
        text = resolv_conf(self.pod, self.cluster_dns)
        return {} if text is None else {RESOLV_CONF_FILE: text.encode()}

    async def _initialize(self, now: float) -> None:
        """Run the init containers one after another, each to a successful exit, before any
        other container starts. A failed one is restarted on the crash-loop backoff, or, with
        ``restartPolicy: Never``, fails the pod."""
        policy = "Never" if self.policy == "Never" else "OnFailure"
        if any(isinstance(self.runtime.state(self.uid, b.spec.name), Running) for b in self.boxes):
            self.initialized = True  # adopted after a restart of the agent: inits ran before
            return
        for box in self.inits:
            self._observe(box, now, policy)
            if box.done:
                ended = box.view.state
                if isinstance(ended, status.Terminated) and ended.exit_code == 0:
                    continue
                return  # failed for good: the pod is Failed
            if not box.running:
                await self._maybe_start(box, now)
            return
        self.initialized = True

    def _observe(self, box: _Box, now: float, policy: str | None = None) -> None:
        if box.running and isinstance(
            term := self.runtime.state(self.uid, box.spec.name), Terminated
        ):
            self._exited(box, term, now, policy=policy)

    def _exited(
        self, box: _Box, term: Terminated, now: float, message: str = "", policy: str | None = None
    ) -> None:
        box.cancel_probes()
        ended = _view_of(term, message)
        if self._killed or not restarts(policy or self.policy, term.exit_code):
            box.view = dataclasses.replace(box.view, state=ended, ready=False, started=False)
            box.done = True
            return
        delay = self.backoff.record_crash(box.spec.key, now, box.started_mono)
        box.restart_due = now + delay
        wait = status.Waiting(
            "CrashLoopBackOff",
            f"back-off {delay:g}s restarting failed container={box.spec.name} "
            f"pod={self.name}_{self.namespace}({self.uid})",
        )
        box.view = dataclasses.replace(
            box.view, state=wait, last_state=ended, ready=False, started=False
        )

    async def _maybe_start(self, box: _Box, now: float) -> bool:
        """Start ``box`` if it should run and may; whether it runs (or is done) afterwards."""
        if box.running or box.done:
            return True
        if box.restart_due is not None and now < box.restart_due:
            return False
        if self.at_most_one and not self.lease_ok:
            return False  # no renewed lease, no at-most-one pod
        current = None if box.ran else self.runtime.state(self.uid, box.spec.name)
        if isinstance(current, Running):
            self._adopt(box, current, now)
            return True
        try:
            running = await self.runtime.start(box.spec)
        except StartError as exc:
            delay = self.backoff.record_crash(box.spec.key, now)
            box.restart_due = now + delay
            waiting = status.Waiting(exc.reason, str(exc))
            box.view = dataclasses.replace(box.view, state=waiting)
            return False
        box.cp = probes.start(box.probe_specs, now)
        box.view = dataclasses.replace(
            box.view,
            state=status.Running(running.started_at.timestamp()),
            restart_count=box.view.restart_count + (1 if box.ran else 0),
            ready=box.cp.ready,
            started=box.cp.started,
            container_id=f"{self.runtime.name}://{running.pid}",
        )
        box.ran, box.started_mono, box.restart_due = True, now, None
        return True

    def _adopt(self, box: _Box, running: Running, now: float) -> None:
        """Carry on with a container an earlier run of the agent started: its restart count
        comes from the status that run wrote; its probes start afresh."""
        key = "initContainerStatuses" if box in self.inits else "containerStatuses"
        written = (self.pod.get("status") or {}).get(key) or []
        restarts = next(
            (c.get("restartCount", 0) for c in written if c.get("name") == box.spec.name), 0
        )
        box.cp = probes.start(box.probe_specs, now)
        box.view = dataclasses.replace(
            box.view,
            state=status.Running(running.started_at.timestamp()),
            restart_count=int(restarts or 0),
            ready=box.cp.ready,
            started=box.cp.started,
            container_id=f"{self.runtime.name}://{running.pid}",
        )
        box.ran, box.started_mono, box.restart_due = True, now, None
        log.info("pod %s/%s: adopted container %s", self.namespace, self.name, box.spec.name)

    # -- probes ----------------------------------------------------------------------------------

    def _launch(self, box: _Box, now: float) -> None:
        if box.cp is None:
            return
        for kind in probes.due(box.cp, now):
            box.cp, ticket = probes.launch(box.cp, kind, now)
            spec = box.probe_specs[kind]
            run = self.prober(spec.action, spec.timeout, self.probe_context(box.spec))
            task = asyncio.ensure_future(run)
            task.add_done_callback(lambda _: self.wake.set())
            box.tasks[kind] = (ticket, task)

    async def _collect(self, box: _Box, now: float) -> None:
        for kind, (ticket, task) in list(box.tasks.items()):
            if not task.done() or box.cp is None:
                continue
            del box.tasks[kind]
            if task.cancelled():
                continue
            exc = task.exception()
            result = ProbeResult(Outcome.FAILURE, repr(exc)) if exc else task.result()
            box.cp, verdicts = probes.observe(box.cp, ticket, result, now)
            box.view = dataclasses.replace(box.view, ready=box.cp.ready, started=box.cp.started)
            for verdict in verdicts:
                if isinstance(verdict, Restart):
                    await self._restart_in_place(box, verdict, now)
                    return

    async def _restart_in_place(self, box: _Box, verdict: Restart, now: float) -> None:
        box.cancel_probes()
        term = await self.runtime.stop(self.uid, box.spec.name, grace_seconds(self.pod))
        if term is not None:
            message = f"Container {box.spec.name} {verdict.message}, will be restarted"
            self._exited(box, term, now, message)

    # -- ending ----------------------------------------------------------------------------------

    async def _stop_box(self, box: _Box, grace: float) -> None:
        box.cancel_probes()
        if box.running and (hook := pre_stop_action(box.raw)) is not None:
            began = self.clocks.mono()
            with contextlib.suppress(Exception):
                await self.prober(hook, max(grace, 1.0), self.probe_context(box.spec))
            grace = max(0.0, grace - (self.clocks.mono() - began))
        term = await self.runtime.stop(self.uid, box.spec.name, grace)
        if term is not None and box.running:
            box.view = dataclasses.replace(box.view, state=_view_of(term), ready=False)
        box.done = True

    async def _kill_for_lease(self) -> None:
        """An at-most-one pod whose node lost its lease: SIGKILL now, never restart."""
        if self._killed or not any(b.ran for b in self.all_boxes):
            return
        self._killed = LEASE_LOST
        log.warning(
            "pod %s/%s: no lease renewal for too long; killing it", self.namespace, self.name
        )
        await asyncio.gather(*(self._stop_box(b, 0.0) for b in self.all_boxes))

    async def _drain(self, grace: float, deletion: bool) -> float:
        """Before the ``preStop`` hook and SIGTERM of a deleted pod, wait (bounded) until the
        node proxies stopped sending it new connections (:mod:`agent.drain`, ADR 0041); the
        grace period that is left."""
        d = self.drainer
        applies = d is not None and drain.applies(
            deletion=deletion, evicted=bool(self._evicted), grace=grace, replicas=d.replicas
        )
        if d is None or not applies or not any(b.running for b in self.all_boxes):
            return grace
        outcome = await d.wait(self.namespace, self.name, grace)
        log.info("pod %s/%s: before SIGTERM, %s", self.namespace, self.name, outcome.summary())
        return max(0.0, grace - outcome.waited)

    async def _terminate(self, now: float) -> None:
        assert self._stop is not None
        grace, confirm = self._stop
        if not self._stopped:
            grace = await self._drain(grace, confirm)
            await asyncio.gather(*(self._stop_box(b, grace) for b in self.all_boxes))
            await self.runtime.cleanup(self.uid)
            for box in self.all_boxes:
                self.backoff.forget(box.spec.key)
            self._stopped = True
        if confirm and (self._retry_at is None or now >= self._retry_at):
            try:
                await self.api.confirm_deleted(self.namespace, self.name, self.uid)
            except (NotFound, Conflict):
                pass  # already gone, or the name now belongs to another pod
            except (Unreachable, StatusError) as exc:
                log.warning(
                    "pod %s/%s: cannot confirm deletion: %s", self.namespace, self.name, exc
                )
                self._retry_at = now + self.retry_after
                return
        elif confirm:
            return
        elif self._evicted:
            await self._sync_status(now)  # Failed/Evicted must reach the API before we forget
            if self._retry_at is not None:
                return
        self.finished = True

    # -- status ----------------------------------------------------------------------------------

    def view(self) -> status.PodView:
        return status.PodView(
            tuple(b.view for b in self.boxes),
            start_time=self.accepted_at,
            initialized=self.initialized,
            init_containers=tuple(b.view for b in self.inits),
            terminating=bool(self._killed or self._evicted),
            host_ip=self.host_ip,
            pod_ip=self.pod_ip,
        )

    def candidate(self) -> Obj:
        built = status.build_status(self.pod, self.view(), self.clocks.wall())
        if self._killed:
            built.update(reason=self._killed, message="the node's lease was not renewed in time")
        if self._evicted:
            built = status.evicted(built, self._evicted, self.clocks.wall())
        return built

    async def _sync_status(self, now: float) -> None:
        if self._retry_at is not None and now < self._retry_at:
            return
        self._retry_at = None
        wanted = self.candidate()
        if not self.coalescer.offer(self.pod.get("status") or {}, wanted, now):
            return
        for _ in range(3):
            try:
                self.pod = await self.api.write_status(self.pod, wanted)
                self.writes += 1
                return
            except Conflict:
                fresh = await self._reread()
                if fresh is None:
                    return
                self.pod = fresh
                wanted = self.candidate()
                if not status.needs_write(self.pod.get("status") or {}, wanted):
                    return
            except NotFound:
                self.request_stop(confirm=False)  # the pod is gone: stop, write nothing
                return
            except (Unreachable, StatusError) as exc:
                log.info("pod %s/%s: status write failed: %s", self.namespace, self.name, exc)
                break
        self._retry_at = now + self.retry_after

    async def _reread(self) -> Obj | None:
        try:
            fresh = await self.api.get(self.namespace, self.name)
        except NotFound:
            fresh = None
        except (Unreachable, StatusError):
            return None
        if fresh is None or str(_meta(fresh).get("uid")) != self.uid:
            self.request_stop(confirm=False)
            return None
        return fresh

    def _next_wakeup(self) -> float | None:
        times = [b.restart_due for b in self.all_boxes if b.restart_due is not None]
        times += [self._resolve_due] if self._resolve_due is not None else []
        times += [t for b in self.boxes if b.cp and (t := probes.next_wakeup(b.cp)) is not None]
        times += [t for t in (self.coalescer.wake_at(), self._retry_at) if t is not None]
        return min(times, default=None)

    async def run(self) -> None:
        """Step until the pod is finished; wake on news, on the next due time, or every poll
        (the runtime is polled for exits)."""
        try:
            while not self.finished:
                self.wake.clear()
                try:
                    wake_at = await self.step()
                except Exception:
                    log.exception("pod %s/%s: step failed", self.namespace, self.name)
                    wake_at = None
                if self.finished:
                    break  # not one more poll: the agent may reuse the pod's slot at once
                timeout = self.poll
                if wake_at is not None:
                    timeout = min(timeout, max(0.0, wake_at - self.clocks.mono()))
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.wake.wait(), timeout)
        finally:
            for box in self.all_boxes:
                box.cancel_probes()
