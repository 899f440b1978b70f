"""The list of singleton loops the controller manager runs. A new loop joins by adding one line
to ``build``."""

from __future__ import annotations

from workers.loops import Loop
from workers.loops.events import EventRetention
from workers.loops.gc import OrphanCollector
from workers.loops.nodelifecycle import NodeLifecycle
from workers.loops.service_ips import ServiceIpRepair
from workers.loops.usage_rollup import UsageRollup


def build() -> list[Loop]:
    return [
        EventRetention.from_env(),
        OrphanCollector.from_env(),
        NodeLifecycle.from_env(),
        ServiceIpRepair.from_env(),
        UsageRollup.from_env(),
    ]
