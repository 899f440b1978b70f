"""A test that needs something of the host (writable cgroups, root, runc, busybox) and finds
it missing: skipped on a developer's machine, a failure where ``QM_REQUIRE_CAPABILITIES=1``.

``.ci/run`` sets the switch, so CI cannot go green by silently skipping the runtime tests:
the CI machine is expected to have what they need (``make deps`` installs the packages). Skips
for a host *difference* that no install fixes (a cgroup v2 kernel, a kernel's TCP backlog
behaviour) stay plain ``pytest.skip``. Imported as ``capability`` (``tests/`` is on the path
through its conftest).
"""

from __future__ import annotations

import os
from typing import NoReturn

import pytest

SWITCH = "QM_REQUIRE_CAPABILITIES"


def required() -> bool:
    return os.environ.get(SWITCH) == "1"


def missing(what: str) -> NoReturn:
    """Skip the test for lack of ``what``, or fail it when the run requires every capability."""
    if required():
        pytest.fail(f"{what} ({SWITCH}=1: this run must not skip it)", pytrace=False)
    pytest.skip(what)
