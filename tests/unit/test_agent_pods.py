"""The per-pod worker on a fake clock with the sim runtime and a fake API that records writes:
start, readiness, crash-loop restarts by policy, liveness restarts, termination and deletion
confirmation, static stability while the API is away, and at-most-one pods losing their lease."""

from __future__ import annotations

import asyncio
import copy
import datetime as dt
from collections.abc import Callable
from typing import Any, cast

import pytest
from pod_api import FakeApi

from agent.backoff import CrashLoopBackoff
from agent.config import ConfigError, container_spec, grace_seconds, parse
from agent.loop import Agent
from agent.machine import Resources
from agent.pods import Clocks, PodWorker
from agent.probe_exec import ProbeContext
from agent.probes import Action, ExecAction, Outcome, ProbeResult
from agent.runtime import Running, Terminated
from agent.runtime.sim import SimRuntime

T0 = 1_800_000_000.0
Obj = dict[str, Any]


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now

    def utc(self) -> dt.datetime:
        return dt.datetime.fromtimestamp(self.now, dt.UTC)


def make_pod(policy: str = "Always", at_most_one: bool = False, **container: Any) -> Obj:
    c = {"name": "app", "image": "app:1", "command": ["serve"], **container}
    spec: Obj = {"nodeName": "n1", "restartPolicy": policy, "containers": [c]}
    if at_most_one:
        spec["atMostOne"] = True
    meta = {"name": "web", "namespace": "ns", "uid": "u1", "resourceVersion": "1"}
    return {"metadata": meta, "spec": spec, "status": {}}


READINESS: dict[str, Any] = {"readinessProbe": {"exec": {"command": ["ready"]}, "periodSeconds": 1}}
LIVENESS: dict[str, Any] = {
    "livenessProbe": {"exec": {"command": ["alive"]}, "periodSeconds": 1, "failureThreshold": 2}
}


class Harness:
    def __init__(self, pod: Obj) -> None:
        self.clock = Clock()
        self.runtime = SimRuntime(self.clock.utc)
        self.api = FakeApi(pod)
        self.answers: dict[str, bool] = {"ready": True, "alive": True}
        self.probed: list[str] = []
        self.worker = PodWorker(
            copy.deepcopy(pod),
            self.runtime,
            self.api,
            CrashLoopBackoff(),
            clocks=Clocks(wall=self.clock, mono=self.clock),
            prober=self.probe,
        )

    async def probe(self, action: Action, timeout: float, ctx: ProbeContext) -> ProbeResult:
        assert isinstance(action, ExecAction)
        self.probed.append(action.command[0])
        ok = self.answers[action.command[0]]
        return ProbeResult(Outcome.SUCCESS if ok else Outcome.FAILURE)

    async def step(self, advance: float = 0.0) -> None:
        """Move the clock, then step until launched probes have reported."""
        self.clock.now += advance
        for _ in range(3):
            await self.worker.step()
            await asyncio.sleep(0)

    def state(self) -> Running | Terminated | None:
        return self.runtime.state("u1", "app")

    def exit(self, code: int) -> None:
        self.runtime.exit("u1", "app", code)

    def container_status(self) -> Obj:
        return dict(self.api.statuses[-1]["containerStatuses"][0])


async def test_start_goes_running_then_ready_in_two_writes() -> None:
    h = Harness(make_pod(**READINESS))
    await h.worker.step()  # started, the first readiness probe in flight
    assert isinstance(h.state(), Running)
    assert h.api.phases == ["Running"] and h.api.ready() == ["False"]
    await h.step()
    for _ in range(10):  # steady probing writes nothing more
        await h.step(1.0)
    assert h.api.phases == ["Running", "Running"]
    assert h.api.ready() == ["False", "True"]
    assert h.worker.writes == 2 and h.probed.count("ready") >= 10


async def test_crash_restarts_after_10_then_20_seconds_with_always() -> None:
    h = Harness(make_pod())
    await h.step()
    first = h.state()
    assert isinstance(first, Running)
    h.exit(1)
    await h.step(1.0)
    cs = h.container_status()
    assert cs["state"]["waiting"]["reason"] == "CrashLoopBackOff"
    assert cs["lastState"]["terminated"]["exitCode"] == 1 and cs["restartCount"] == 0
    await h.step(9.9)
    assert isinstance(h.state(), Terminated)
    await h.step(0.1)
    assert isinstance(h.state(), Running) and h.container_status()["restartCount"] == 1
    h.exit(2)
    await h.step(0.0)
    await h.step(19.9)
    assert isinstance(h.state(), Terminated)
    await h.step(0.1)
    assert isinstance(h.state(), Running) and h.container_status()["restartCount"] == 2
    assert h.api.phases[-1] == "Running"


async def test_crash_with_never_is_not_restarted_and_fails() -> None:
    h = Harness(make_pod("Never"))
    await h.step()
    h.exit(3)
    await h.step(1.0)
    await h.step(600.0)
    assert isinstance(h.state(), Terminated)
    assert h.api.phases[-1] == "Failed"
    assert h.container_status()["state"]["terminated"]["exitCode"] == 3


@pytest.mark.parametrize("policy", ["Never", "OnFailure"])
async def test_exit_zero_completes_a_job_pod(policy: str) -> None:
    h = Harness(make_pod(policy))
    await h.step()
    h.exit(0)
    await h.step(1.0)
    await h.step(60.0)
    assert isinstance(h.state(), Terminated)
    assert h.api.phases[-1] == "Succeeded"
    assert h.container_status()["state"]["terminated"]["reason"] == "Completed"


async def test_liveness_failure_restarts_in_place() -> None:
    h = Harness(make_pod(**LIVENESS))
    await h.step()
    first = h.state()
    assert isinstance(first, Running)
    h.answers["alive"] = False
    await h.step(1.0)
    await h.step(1.0)  # second failure: the threshold
    cs = h.container_status()
    assert cs["state"]["waiting"]["reason"] == "CrashLoopBackOff"
    assert "liveness" in cs["lastState"]["terminated"]["message"]
    h.answers["alive"] = True
    await h.step(10.0)
    now = h.state()
    assert isinstance(now, Running) and now.pid != first.pid
    assert h.container_status()["restartCount"] == 1


async def test_deletion_stops_then_confirms_with_the_uid() -> None:
    h = Harness(make_pod())
    await h.step()
    deleted = copy.deepcopy(h.api.pod)
    deleted["metadata"].update(deletionTimestamp="2027-01-01T00:00:00Z", resourceVersion="9")
    deleted["metadata"]["deletionGracePeriodSeconds"] = 5
    h.worker.update(deleted)
    assert grace_seconds(h.worker.pod) == 5.0
    h.worker.request_stop(confirm=True)
    await h.step()
    assert h.api.deletes == [("ns", "web", "u1")]
    assert h.runtime.containers("u1") == [] and h.worker.finished


async def test_an_unassigned_pod_is_stopped_without_any_write() -> None:
    h = Harness(make_pod())
    await h.step()
    writes = len(h.api.statuses)
    h.worker.request_stop(confirm=False)
    await h.step()
    assert h.worker.finished and h.runtime.containers("u1") == []
    assert len(h.api.statuses) == writes and h.api.deletes == []


async def test_deletion_confirm_is_retried_while_the_api_is_away() -> None:
    h = Harness(make_pod())
    await h.step()
    h.api.down = True
    h.worker.request_stop(confirm=True, grace=0)
    await h.step()
    assert not h.worker.finished and h.runtime.containers("u1") == []
    h.api.down = False
    await h.step(2.0)
    assert h.worker.finished and h.api.deletes == [("ns", "web", "u1")]


async def test_with_the_api_away_a_crash_is_still_restarted() -> None:
    h = Harness(make_pod())
    await h.step()
    writes = len(h.api.statuses)
    h.api.down = True
    h.exit(1)
    await h.step(1.0)
    await h.step(10.0)
    assert isinstance(h.state(), Running)
    assert len(h.api.statuses) == writes  # nothing got through ...
    h.api.down = False
    await h.step(2.0)
    assert h.container_status()["restartCount"] == 1  # ... until it was back


async def test_at_most_one_pod_is_killed_when_the_lease_lapses() -> None:
    h = Harness(make_pod(at_most_one=True))
    h.worker.lease_ok = False
    await h.step()
    assert h.state() is None  # never started without a renewed lease
    h.worker.lease_ok = True
    await h.step()
    assert isinstance(h.state(), Running)
    h.worker.lease_ok = False
    await h.step()
    await h.step(60.0)
    end = h.state()
    assert isinstance(end, Terminated) and end.signal == 9
    assert h.api.statuses[-1]["phase"] == "Failed"
    assert h.api.statuses[-1]["reason"] == "NodeLeaseExpired"


async def test_a_conflicting_write_is_rebuilt_on_the_fresh_pod() -> None:
    h = Harness(make_pod())
    h.api.pod["metadata"]["resourceVersion"] = "7"  # someone else wrote
    h.api.pod["status"] = {"conditions": [{"type": "DisruptionTarget", "status": "True"}]}
    await h.step()
    assert h.api.phases == ["Running"]
    kinds = [c["type"] for c in h.api.statuses[0]["conditions"]]
    assert "DisruptionTarget" in kinds and "Ready" in kinds


def test_container_spec_resolves_argv_env_and_resources() -> None:
    c = {
        "name": "app",
        "command": ["python3", "-c"],
        "args": ["print(1)"],
        "env": [{"name": "A", "value": "1"}, {"name": "B", "valueFrom": {"x": 1}}],
        "resources": {"limits": {"memory": "64Mi", "cpu": "500m"}},
    }
    spec = container_spec("u", c)
    assert list(spec.command) == ["python3", "-c", "print(1)"]
    assert dict(spec.env) == {"A": "1"}
    r = spec.resources
    assert (r.memory_limit_bytes, r.cpu_request_millis, r.cpu_limit_millis) == (64 << 20, 500, 500)


# -- the loop around the workers --------------------------------------------------------------


class FakeSource:
    def __init__(self, *pods: Obj) -> None:
        self.pods = {p["metadata"]["uid"]: p for p in pods}
        self.listed = True

    def snapshot(self) -> dict[str, Obj]:
        return dict(self.pods)

    def poke(self) -> None:
        pass


class FakeLease:
    epoch_changes = 0
    on_recover = None

    def __init__(self) -> None:
        self.lapsed = False

    def self_kill_due(self) -> bool:
        return self.lapsed


def make_agent(pod: Obj, allocatable: Resources) -> tuple[Agent, FakeApi, FakeSource]:
    api, source = FakeApi(pod), FakeSource(pod)
    agent = Agent(
        SimRuntime(),
        api,
        cast(Any, source),
        cast(Any, FakeLease()),
        allocatable,
        poll=3600.0,  # the workers wake on news only: what they do needs no time to pass
        prober=Harness(pod).probe,
    )
    return agent, api, source


async def until(check: Callable[[], bool]) -> None:
    """Yield to the pod workers until ``check`` holds (nothing they do here waits on time)."""
    for _ in range(1000):
        if check():
            return
        await asyncio.sleep(0)
    raise AssertionError("condition not reached")


async def test_the_loop_refuses_a_pod_that_does_not_fit_and_writes_why() -> None:
    pod = make_pod(resources={"requests": {"memory": "2Gi"}})
    agent, api, _ = make_agent(pod, Resources(1000, 1 << 30))
    await agent.reconcile()
    await agent.reconcile()
    assert agent.workers == {} and agent.runtime.containers() == []
    assert len(api.statuses) == 1  # once, not on every tick
    assert (api.statuses[0]["phase"], api.statuses[0]["reason"]) == ("Failed", "OutOfmemory")


async def test_the_loop_stops_a_pod_moved_away_without_writing() -> None:
    agent, api, source = make_agent(make_pod(), Resources(1000, 1 << 30))
    await agent.reconcile()
    await until(lambda: isinstance(agent.runtime.state("u1", "app"), Running))
    writes = len(api.statuses)
    source.pods.clear()  # a relist without it
    await agent.reconcile()
    await until(lambda: not agent.workers)
    assert agent.runtime.containers() == [] and "u1" in agent.done
    assert len(api.statuses) == writes and api.deletes == []


async def test_the_loop_stops_nothing_before_the_first_list() -> None:
    agent, _, source = make_agent(make_pod(), Resources(1000, 1 << 30))
    await agent.reconcile()
    source.pods.clear()
    source.listed = False
    await agent.reconcile()
    for _ in range(100):  # every worker has had its chance to act on the reconcile
        await asyncio.sleep(0)
    assert isinstance(agent.runtime.state("u1", "app"), Running) and agent.workers
    await agent.shutdown()
    assert agent.runtime.containers() == []


def test_settings_come_from_flags_over_environment() -> None:
    env = {"QM_API_URL": "http://api:1", "QM_AGENT_TOKEN": "t", "QM_AGENT_ZONE": "z1"}
    cfg = parse(["--zone", "z2", "--runtime", "sim"], env, hostname="Box")
    assert (cfg.server, cfg.token, cfg.node_name) == ("http://api:1", "t", "box")
    # The administrator's token is never an agent's (it joins with a bootstrap token).
    admin_only = parse([], {"QM_BOOTSTRAP_TOKEN": "admin"}, hostname="box")
    assert (admin_only.token, admin_only.bootstrap_token) == (None, None)
    assert (cfg.zone, cfg.runtime, cfg.pods_dir.name) == ("z2", "sim", "pods")
    with pytest.raises(ConfigError):
        parse(["--runtime", "crun"], env)


# -- init containers ---------------------------------------------------------------------------


def with_inits(policy: str = "Always", count: int = 2) -> Obj:
    pod = make_pod(policy)
    pod["spec"]["initContainers"] = [
        {"name": f"init{i}", "image": "app:1", "command": ["prepare"]} for i in range(count)
    ]
    return pod


def condition(h: Harness, kind: str) -> str:
    conditions = h.api.statuses[-1]["conditions"]
    return str(next(c["status"] for c in conditions if c["type"] == kind))


async def test_init_containers_run_in_order_to_completion_before_the_app() -> None:
    h = Harness(with_inits())
    await h.step()
    assert isinstance(h.runtime.state("u1", "init0"), Running)
    assert h.runtime.state("u1", "init1") is None and h.state() is None
    last = h.api.statuses[-1]
    assert last["phase"] == "Pending" and condition(h, "Initialized") == "False"
    assert last["containerStatuses"][0]["state"]["waiting"]["reason"] == "PodInitializing"
    assert [c["name"] for c in last["initContainerStatuses"]] == ["init0", "init1"]
    h.runtime.exit("u1", "init0", 0)
    await h.step(1.0)
    assert isinstance(h.runtime.state("u1", "init1"), Running) and h.state() is None
    h.runtime.exit("u1", "init1", 0)
    await h.step(1.0)
    assert isinstance(h.state(), Running)
    last = h.api.statuses[-1]
    assert last["phase"] == "Running" and condition(h, "Initialized") == "True"
    done = [c["state"]["terminated"]["reason"] for c in last["initContainerStatuses"]]
    assert done == ["Completed", "Completed"]
    h.exit(1)  # the app's crash restarts the app alone; the inits are not run again
    await h.step(1.0)
    await h.step(10.0)
    assert isinstance(h.state(), Running)
    assert isinstance(h.runtime.state("u1", "init0"), Terminated)


async def test_a_failed_init_container_is_retried_on_the_backoff() -> None:
    h = Harness(with_inits(count=1))
    await h.step()
    h.runtime.exit("u1", "init0", 2)
    await h.step(1.0)
    status = h.api.statuses[-1]["initContainerStatuses"][0]
    assert status["state"]["waiting"]["reason"] == "CrashLoopBackOff"
    assert h.api.phases[-1] == "Pending" and h.state() is None
    await h.step(10.0)
    assert isinstance(h.runtime.state("u1", "init0"), Running) and h.state() is None


async def test_a_failed_init_container_fails_a_never_pod_without_starting_the_app() -> None:
    h = Harness(with_inits("Never", count=1))
    await h.step()
    h.runtime.exit("u1", "init0", 2)
    await h.step(1.0)
    await h.step(60.0)
    assert h.state() is None and h.api.phases[-1] == "Failed"
    terminated = h.api.statuses[-1]["initContainerStatuses"][0]["state"]["terminated"]
    assert terminated["exitCode"] == 2 and terminated["reason"] == "Error"


# -- environment and files from the objects a pod names ------------------------------------------


async def test_a_missing_config_map_holds_the_pod_until_it_exists() -> None:
    pod = make_pod(
        env=[{"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "mode"}}}],
        volumeMounts=[{"name": "conf", "mountPath": "/etc/app"}],
    )
    pod["spec"]["volumes"] = [{"name": "conf", "configMap": {"name": "cfg"}}]
    h = Harness(pod)
    await h.step()
    assert h.state() is None and h.api.phases[-1] == "Pending"
    waiting = h.container_status()["state"]["waiting"]
    assert waiting["reason"] == "CreateContainerConfigError"
    assert waiting["message"] == 'configmap "cfg" not found'
    h.api.sources[("ConfigMap", "cfg")] = {"data": {"mode": "fast", "app.ini": "[app]"}}
    await h.step(0.5)
    assert h.state() is None  # the retry is 1 s after the failure
    await h.step(0.5)
    assert isinstance(h.state(), Running)
    spec = h.worker.boxes[0].spec
    assert spec.env["MODE"] == "fast"
    assert spec.files == {"etc/app/mode": b"fast", "etc/app/app.ini": b"[app]"}
    h.api.down = True  # a restart while the API is away keeps what was resolved
    h.exit(1)
    await h.step(1.0)
    await h.step(10.0)
    assert isinstance(h.state(), Running) and h.worker.boxes[0].spec.env["MODE"] == "fast"
