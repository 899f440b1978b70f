"""An access review's body as JSON, whichever encoding kubectl chose.

``kubectl auth can-i`` posts protobuf (:mod:`app.core.k8s_protobuf`); the review handlers
(``app.api.reviews``) read JSON, so they take their body from here.
"""

from __future__ import annotations

from typing import Any

import msgspec
from litestar import Request

from app.core import k8s_protobuf

_enc = msgspec.json.Encoder()


async def review_body(request: Request[Any, Any, Any]) -> bytes:
    body = await request.body()
    media = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media == k8s_protobuf.MEDIA_TYPE:
        return _enc.encode(k8s_protobuf.review(body))
    return body
