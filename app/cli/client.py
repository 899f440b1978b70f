"""The CLI's REST client: :class:`app.client.RestClient` with the CLI's user agent.

Requests, ``Status`` error mapping (commands catch ``NotFound`` or ``Conflict`` rather than
inspect HTTP codes), list paging and watch decoding are the shared client's, the agent's and
the hollow nodes' too; a connection that fails is :class:`app.client.Unreachable`.
"""

from __future__ import annotations

import sys
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as package_version
from typing import Any, Self

from app.client import RestClient

try:
    CLIENT_VERSION = package_version("quaymaster")
except PackageNotFoundError:
    CLIENT_VERSION = "0.0.0"


class ApiClient(RestClient):
    """A synchronous client for one server, authenticated with a bearer token."""

    user_agent = f"qm/{CLIENT_VERSION}"

    def __init__(self, *args: Any, reason: str | None = None, **kwargs: Any) -> None:
        """``reason``: sent as ``X-Reason`` with every request (``qm --reason``), so the
        change history records why each write was made."""
        super().__init__(*args, **kwargs)
        self.reason = reason
        if reason:
            self._http.headers["X-Reason"] = reason

    def clone(self) -> Self:
        other = super().clone()
        if self.reason:
            other.reason = self.reason
            other._http.headers["X-Reason"] = self.reason
        return other

    def warned(self, text: str) -> None:
        print(f"Warning: {text}", file=sys.stderr)  # as kubectl shows the server's warnings
