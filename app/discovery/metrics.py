"""The discovery service's metrics (the types from ``app.core.metrics``). Per-subscriber
figures (acknowledged version, lag) are rendered from the hub when scraped."""

from __future__ import annotations

from app.core.metrics import Registry

REGISTRY = Registry()

VERSION = REGISTRY.gauge("qm_discovery_version", "The revision this replica's state is at.")
SUBSCRIBERS = REGISTRY.gauge("qm_discovery_subscribers", "Subscribers connected.")
CONNECTS = REGISTRY.counter("qm_discovery_subscribes_total", "Subscriptions accepted.")
STEPS = REGISTRY.counter("qm_discovery_steps_total", "Steps of the state streamed.")
ENDPOINT_CHANGES = REGISTRY.counter(
    "qm_discovery_endpoint_changes_total", "Endpoint resources changed by the steps."
)
FRAMES = REGISTRY.counter(
    "qm_discovery_frames_total", "Step deltas written to subscribers at the previous step."
)
DELTAS = REGISTRY.counter(
    "qm_discovery_subscriber_deltas_total",
    "Resource changes delivered to subscribers: a step's changes times the subscribers sent it.",
)
CATCH_UPS = REGISTRY.counter(
    "qm_discovery_catch_ups_total", "Merged deltas sent to subscribers that were behind."
)
SNAPSHOTS = REGISTRY.counter("qm_discovery_snapshots_total", "Snapshots sent.")
NACKS = REGISTRY.counter("qm_discovery_nacks_total", "Versions refused by subscribers.")
ACK_SECONDS = REGISTRY.histogram(
    "qm_discovery_ack_seconds",
    "From a step's fan-out to a subscriber's acknowledgement of it.",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
