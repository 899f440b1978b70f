"""Pure parts of the UI's pages: where an action sends the browser back, and how much of a
rollout is surely done."""

from __future__ import annotations

from urllib.parse import parse_qsl, urlsplit

from app.api.ui.core import back
from app.api.ui.pages.workloads import new_and_available


def test_an_actions_outcome_replaces_the_previous_one_and_keeps_the_pages_filters() -> None:
    to = "/ui/nodes/n1?ns=a&done=node%2Fn1+cordoned"
    location = back(to, done="drain blocked").url
    parts = urlsplit(location)
    assert parts.path == "/ui/nodes/n1"
    assert parse_qsl(parts.query) == [("ns", "a"), ("done", "drain blocked")]
    assert back("/ui/pods", failed="no").url == "/ui/pods?failed=no"
    assert back("/ui/pods?failed=old").url == "/ui/pods"


def test_a_rollout_counts_only_the_new_pods_that_are_surely_available() -> None:
    assert new_and_available(updated=2, available=2, total=4) == 0  # the two could be old
    assert new_and_available(updated=3, available=3, total=3) == 3
    assert new_and_available(updated=3, available=4, total=4) == 3
    assert new_and_available(updated=0, available=3, total=3) == 0
