"""The one REST client of the Quaymaster API, for the CLI, the node agent and the hollow nodes.

:mod:`~app.client.build` makes every request (paths of every kind and subresource, the
metrics group, list and watch queries, JSON bodies) and :mod:`~app.client.decode` reads every
answer (``Status`` bodies through ``app.core.errors.from_status``, paging that refuses a
repeated ``continue`` token, watch streams); both are pure. :mod:`~app.client.verbs` holds the
typed verbs once; :mod:`~app.client.sync` (httpx, the CLI's and the agent's) and
:mod:`~app.client.aio` (any async byte transport, the hollow nodes') only move bytes. It
imports the pure core and nothing of the server (import-linter), so the agent may use it.
"""

from .aio import AsyncRestClient, InThreads, QueueTimeout, Transport
from .decode import Unreachable
from .sync import RestClient

__all__ = ["AsyncRestClient", "InThreads", "QueueTimeout", "RestClient", "Transport", "Unreachable"]
