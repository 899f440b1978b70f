"""A pod's container log, streamed from the agent of the pod's node.

``GET .../namespaces/{ns}/pods/{name}/log?container=&follow=&tailLines=&previous=`` is the only
route through which the API server talks to agents (ADR 0019). Logs never enter PostgreSQL:
the agent keeps them in files beside the container and the API server relays its answer, so
the handler checks what the API knows (the pod, its containers, its node and the node's
reported ``status.addresses`` / ``daemonEndpoints``) and then streams bytes. With ``follow``
the response is a chunked stream that ends when the agent ends it (the run ended) or the
client goes away, which closes the connection to the agent too.

The API server authenticates to agents with a credential of its own (user
``system:apiserver``, minted at start by ``app.api.nodeauth``), which the agent checks with a
token review (ADR 0045). With ``QM_AGENT_CA_FILE`` set, agents are called over HTTPS and
their certificates checked against that CA (ADR 0050).
Errors are ``kind: Status``: 422 for malformed parameters, 404 for an unknown pod or
container, 400 for a pod not bound yet or a run that is not there (``previous`` before any
restart), 503 when the agent cannot be reached or refuses the API server.
"""

from __future__ import annotations

import json
import os
import ssl
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode

import httpx
from litestar import Request, Response, get
from litestar.handlers import HTTPRouteHandler
from litestar.response import Stream

from app.api import authz
from app.api.nodeauth import agent_credential
from app.api.routes import PREFIX, guarded
from app.api.service import Objects
from app.core import errors
from app.core.authz import Attributes
from app.core.errors import Cause
from app.core.kinds import BY_KIND
from app.store.tokens import User

POD = BY_KIND["Pod"]
NODE = BY_KIND["Node"]
AGENT_CA_ENV = "QM_AGENT_CA_FILE"
CONNECT_TIMEOUT = 5.0
READ_TIMEOUT = 60.0
_TRUE, _FALSE = ("true", "True", "1"), ("", "false", "False", "0")
Obj = dict[str, Any]


@dataclass(frozen=True)
class LogQuery:
    container: str | None
    follow: bool = False
    previous: bool = False
    tail_lines: int | None = None

    def agent_query(self) -> str:
        q = {"follow": str(self.follow).lower(), "previous": str(self.previous).lower()}
        if self.tail_lines is not None:
            q["tailLines"] = str(self.tail_lines)
        return urlencode(q)


def _flag(params: Mapping[str, str], name: str, causes: list[Cause]) -> bool:
    value = params.get(name) or ""
    if value not in (*_TRUE, *_FALSE):
        causes.append(Cause(name, "FieldValueInvalid", f"must be true or false, got {value!r}"))
    return value in _TRUE


def parse_query(params: Mapping[str, str], pod_name: str) -> LogQuery:
    """The log options of a request, or ``Invalid`` (422) naming every bad parameter."""
    causes: list[Cause] = []
    follow, previous = _flag(params, "follow", causes), _flag(params, "previous", causes)
    raw = params.get("tailLines")
    tail: int | None = None
    if raw not in (None, ""):
        if raw.isdigit() and len(raw) <= 12:
            tail = int(raw)
        else:
            causes.append(
                Cause("tailLines", "FieldValueInvalid", f"must be a non-negative integer: {raw!r}")
            )
    if causes:
        raise errors.invalid("PodLogOptions", pod_name, causes)
    return LogQuery(params.get("container") or None, follow, previous, tail)


def pick_container(pod: Obj, requested: str | None) -> str:
    """The container to read: the one named, or the pod's only container."""
    spec = pod.get("spec") or {}
    both = [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]
    names = [str(c.get("name")) for c in both if isinstance(c, dict)]
    name = str((pod.get("metadata") or {}).get("name"))
    choices = ", ".join(names)
    if requested is None:
        if len(spec.get("containers") or []) == 1:
            return str(spec["containers"][0].get("name"))
        raise errors.invalid("PodLogOptions", name, [Cause("container", "FieldValueRequired",
            f"a container name must be given for pod {name}, one of: {choices}")])  # fmt: skip
    if requested not in names:
        raise errors.NotFound(
            f'container "{requested}" is not in pod "{name}"; its containers: {choices}',
            kind="pods",
            name=name,
            causes=[Cause("container", "FieldValueNotFound", f"one of: {choices}")],
        )
    return requested


def agent_base_url(node: Obj, scheme: str = "http") -> str:
    """``http://host:port`` of the node's agent, from what the agent reported in its status."""
    status = node.get("status") or {}
    name = str((node.get("metadata") or {}).get("name"))
    port = ((status.get("daemonEndpoints") or {}).get("agentEndpoint") or {}).get("Port")
    addresses = {
        a.get("type"): a.get("address")
        for a in status.get("addresses") or []
        if isinstance(a, dict) and a.get("address")
    }
    host = addresses.get("InternalIP") or addresses.get("Hostname")
    if not isinstance(port, int) or isinstance(port, bool) or not 0 < port < 65536 or not host:
        raise errors.ServiceUnavailable(
            f'node "{name}" has not reported its agent endpoint (status.addresses and '
            "status.daemonEndpoints.agentEndpoint.Port)",
            retry_after=5,
        )
    host = f"[{host}]" if ":" in str(host) else str(host)
    return f"{scheme}://{host}:{port}"


def agent_error(code: int, body: bytes, node: str) -> errors.StatusError:
    """The agent's refusal as this API's error: its 404/400 pass through, anything else (its
    credentials refused, a crash) is the agent being unavailable to us."""
    try:
        message = str(json.loads(body).get("message") or "")
    except (ValueError, AttributeError):
        message = body.decode(errors="replace")[:200]
    if code == 404:
        return errors.NotFound(message or "not found on the node", kind="pods")
    if code == 400:
        return errors.BadRequest(message or "the agent refused the request")
    return errors.ServiceUnavailable(
        f'the agent of node "{node}" answered {code}: {message}', retry_after=5
    )


def _agent_verify() -> ssl.SSLContext | bool:
    ca_file = os.environ.get(AGENT_CA_ENV)
    return ssl.create_default_context(cafile=ca_file) if ca_file else True


async def relay(url: str, node: str, follow: bool, token: str | None) -> Response[Any]:
    """Open ``url`` on the agent with this server's credential (``app.api.nodeauth``) and
    stream its body back, closing both ends together."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    timeout = httpx.Timeout(READ_TIMEOUT, connect=CONNECT_TIMEOUT, read=None if follow else 60.0)
    client = httpx.AsyncClient(timeout=timeout, verify=_agent_verify())
    try:
        resp = await client.send(client.build_request("GET", url, headers=headers), stream=True)
    except httpx.TransportError as exc:
        await client.aclose()
        raise errors.ServiceUnavailable(
            f'cannot reach the agent of node "{node}" at {url.split("/containerLogs")[0]}: '
            f"{type(exc).__name__} {exc}",
            retry_after=5,
        ) from None
    if resp.status_code != 200:
        refusal = await resp.aread()
        await resp.aclose()
        await client.aclose()
        raise agent_error(resp.status_code, refusal, node)

    async def body() -> AsyncIterator[bytes]:
        try:
            async for chunk in resp.aiter_raw():
                yield chunk
        except httpx.TransportError:
            return  # the agent went away mid-stream: the log simply ends
        finally:
            await resp.aclose()
            await client.aclose()

    return Stream(
        body(),
        media_type="text/plain; charset=utf-8",
        headers={"Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff"},
    )


async def read_log(
    objects: Objects,
    namespace: str,
    name: str,
    params: Mapping[str, str],
    credential: str | None = None,
) -> Any:
    query = parse_query(params, name)
    pod = objects.get(POD, namespace, name).obj()
    container = pick_container(pod, query.container)
    node_name = str((pod.get("spec") or {}).get("nodeName") or "")
    if not node_name:
        raise errors.BadRequest(f'pod "{name}" is not bound to a node yet: it has no log')
    try:
        node = objects.get(NODE, "", node_name).obj()
    except errors.NotFound:
        raise errors.ServiceUnavailable(
            f'node "{node_name}" of pod "{name}" does not exist'
        ) from None
    path = "/".join(quote(p, safe="") for p in (namespace, name, container))
    scheme = "https" if os.environ.get(AGENT_CA_ENV) else "http"
    url = f"{agent_base_url(node, scheme)}/containerLogs/{path}?{query.agent_query()}"
    return await relay(url, node_name, query.follow, credential)


@get(
    f"{PREFIX}/namespaces/{{namespace:str}}/pods/{{name:str}}/log",
    operation_id="readPodLog",
    tags=["Pod"],
    summary="Read or follow a container's log, from the agent of the pod's node",
)
async def get_log(request: Request[Any, Any, Any], namespace: str, name: str) -> Response[Any]:
    async def run(user: User) -> Response[Any]:
        objects: Objects = authz.objects_of(request)
        credential = agent_credential(request.app.state)
        return await read_log(objects, namespace, name, dict(request.query_params), credential)

    follow = request.query_params.get("follow") in _TRUE
    attrs = Attributes("get", "pods", namespace, name, "log")
    return await guarded(request, run, count=not follow, attrs=attrs)  # a follow: for hours


HANDLERS: list[HTTPRouteHandler] = [get_log]
