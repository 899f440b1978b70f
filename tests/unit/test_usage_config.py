"""Where the API server finds its usage store, and the 503 when it has none."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from app.api.usage import redis_url, store_of
from app.core import errors


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        (
            {"QM_USAGE_REDIS_URL": "redis://m:1/2", "QM_BROKER_URL": "redis://b:1/0"},
            "redis://m:1/2",
        ),
        ({"QM_BROKER_URL": "redis://b:1/0"}, "redis://b:1/0"),
        ({"QM_BROKER_URL": "amqp://b/"}, None),  # a broker that is not Redis stores no usage
        ({"QM_USAGE_REDIS_URL": "", "QM_BROKER_URL": "redis://b:1/0"}, None),  # explicitly off
        ({}, None),
    ],
)
def test_redis_url(env: dict[str, str], expected: str | None) -> None:
    assert redis_url(env) == expected


def test_no_store_is_503() -> None:
    request: Any = SimpleNamespace(app=SimpleNamespace(state=SimpleNamespace(usage=None)))
    with pytest.raises(errors.ServiceUnavailable) as caught:
        store_of(request)
    assert caught.value.code == 503 and "QM_USAGE_REDIS_URL" in caught.value.message
