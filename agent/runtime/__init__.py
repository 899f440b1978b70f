"""Container runtimes behind one interface (`Runtime` in `base`): `process` runs the pod's
command on the host in its own cgroup, `sim` runs nothing, for hollow nodes and tests."""

from agent.runtime.base import (
    ContainerSpec,
    ContainerState,
    Resources,
    Running,
    Runtime,
    StartError,
    Terminated,
    Usage,
)

__all__ = [
    "ContainerSpec",
    "ContainerState",
    "Resources",
    "Running",
    "Runtime",
    "StartError",
    "Terminated",
    "Usage",
]
