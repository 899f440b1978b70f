"""The scheduler's metrics and its small HTTP endpoint.

``REGISTRY`` holds the scheduler's metrics (the types come from ``app.core.metrics``); the
endpoint (``serve``) is the one every process uses, from ``app.metrics_endpoint``.
"""

from __future__ import annotations

from app.core.metrics import (
    CONTENT_TYPE,
    DEFAULT_BUCKETS,
    Counter,
    Gauge,
    Histogram,
    Registry,
)
from app.metrics_endpoint import serve

__all__ = [
    "CONTENT_TYPE",
    "DEFAULT_BUCKETS",
    "REGISTRY",
    "Counter",
    "Gauge",
    "Histogram",
    "Registry",
    "serve",
]

REGISTRY = Registry()
