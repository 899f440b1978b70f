"""The node agent's REST client: the only way the agent reaches the control plane.

The agent may not import the store, the stream or the API server (import-linter enforces
it); it uses the shared client, :class:`app.client.RestClient`, whose requests, ``Status``
error mapping, paging and watch decoding are the CLI's and the hollow nodes' too. A broken or
refused connection is :class:`Unreachable`, which every caller treats as "keep the last known
state and try again later". What is the agent's own: its user agent, its shorter timeout, the
kinds it speaks of, and creating the lease namespace on first use.
"""

from __future__ import annotations

import contextlib

from app.client import RestClient, Unreachable
from app.core import errors
from app.core.kinds import BY_KIND

__all__ = ["LEASE", "NAMESPACE", "NODE", "POD", "AgentApi", "Unreachable"]

NODE = BY_KIND["Node"]
LEASE = BY_KIND["Lease"]
POD = BY_KIND["Pod"]
NAMESPACE = BY_KIND["Namespace"]


class AgentApi(RestClient):
    """A client of one API server. Not shared between threads that stream: each watching
    thread holds its own (``clone()``)."""

    user_agent = "quaymaster-agent/1"
    default_timeout = 10.0
    watch_read_timeout = 30.0  # bookmarks come every few seconds: a longer silence is a dead peer

    def ensure_namespace(self, name: str) -> None:
        """Create the namespace unless it exists (the agent's leases live in their own)."""
        try:
            self.get(NAMESPACE, None, name)
        except errors.NotFound:
            with contextlib.suppress(errors.AlreadyExists):
                self.create(NAMESPACE, None, {"metadata": {"name": name}})
