"""`tao proxy`: a local OpenAI- and Anthropic-compatible endpoint that routes each call to the assigned node.

For harnesses that are not Python (Claude Code, OpenCode): point their base URL at the proxy. Each request is
attributed to a session by the headers harnesses send (`X-Claude-Code-Session-Id`, `x-session-affinity`,
`X-Session-Id`, `x-tao-session`, Codex's `session-id`), else by a digest of how its conversation began
(`session_identity.py`); the agent context comes from `x-agent-*` headers
(`x-agent-harness`, `x-agent-workflow-id`, `x-agent-model`, `x-agent-shared-prefix-tokens`,
`x-agent-expected-next-tools` (comma-separated), `x-agent-parent-session-id`, `x-agent-client-session-id`,
`x-agent-label-<name>`) on the session's first request; the agent's step from `x-agent-step-id` and
`x-agent-expected-tools` (comma-separated) on every model call, sent with that call's acquire and never forwarded to
the node (the other `x-agent-*` headers pass through as they always did). The proxy registers the session, acquires a
node for the model the request body names (`call_model.py`), forwards the request (streaming passed through chunk by
chunk), reads usage as it passes and reports `llm_end`: the same `AsyncRouter` as the SDK, so it fails open the same
way, retries a call a node refused once on another node the same way (`refusals.py`), and follows the leader of several
coordinator replicas the same way (`--coordinator` takes their URLs, comma-separated). Without `--nodes`, the proxy
learns the fleet's node URLs from the coordinator (`GET /v1/nodes`, which every replica answers: the first that does, at
start and every `NODE_REFRESH_S`) and keeps the last list it got, so it fails open to them when the coordinator goes
away. With the coordinator unreachable and no node known, a model call is answered 503.

It also relays tool events from hook processes on `POST /tao/v1/events` (loopback only): the proxy owns each
session's coordinator token, so hooks need none. Where no hook reports a session's tools, the proxy infers them from
the wire: a response that asks for tool calls starts them, the request that carries their results ends them
(`wire_tools.py` reads the wire, `inferred_tools.py` states the rule by which hooks win and nothing counts twice).
Each tool start and end is reported with the moment it happened (`age_s`): an inferred one at the wire's moment, a
hook's at the moment the hook dated it (its own `age_s`), or, for a start, at the wire's when the wire showed the
call first (the response asking for it ended earlier). With `tool_log` (`tao proxy --tool-log FILE`) every tool
boundary the wire shows, of hook-driven sessions too, and every hook's, is appended to FILE as a JSON line with its
Unix time: the two paths side by side in one run. Sessions idle for `idle_close_s` are closed.

A call that waited for a place carries the queue's figures back to the harness as headers
(`x-tao-queue-position`, `x-tao-estimated-wait`); with `max_queue_wait_s` set, a call whose estimated wait exceeds it
is answered 429 with `Retry-After` instead, and keeps its session's place (`queue_headers.py`).

Invariants: one `AsyncRouter` per session id, used only once its registration is over; every acquired call gets exactly
one `llm_end`; an inferred tool's end is queued before the acquire of the call that carries its result, and its start
after the `llm_end` of the response that asked for it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web

from . import protocol
from .call_model import call_model, model_named
from .calls import describe
from .errors import AuthenticationFailed, NoNodeAvailable
from .inferred_tools import InferredTools, start_of
from .queue_headers import queue_full, queue_headers
from .queue_state import LongQueue, QueueState
from .refusals import refused_status
from .replicas import coordinator_urls
from .router import AsyncRouter, Grant, Step
from .session_config import SessionConfig
from .session_identity import ANONYMOUS, SESSION_HEADERS, session_id_of
from .usage import Usage, UsageObserver, with_usage_requested
from .wire_tools import ToolCallReader, offered_tools, parse_json, tool_results

log = logging.getLogger("tao_sdk.proxy")

__all__ = ["ANONYMOUS", "SESSION_HEADERS", "ProxyConfig", "RoutingProxy"]
MODEL_ROUTES = ("/v1/chat/completions", "/v1/completions", "/v1/messages", "/v1/responses")
PASSTHROUGH_ROUTES = ("/v1/models", "/v1/messages/count_tokens")
HEALTH_ROUTES = ("/healthz", "/health")  # `/health` is what vLLM and most load balancers probe
HOP_HEADERS = {"host", "content-length", "transfer-encoding", "connection", "keep-alive", "authorization"}
ANSWER_DROPPED = HOP_HEADERS | {"content-encoding", "date", "server"}
"""Headers of a node's answer the proxy does not pass back (aiohttp sets its own)."""
STEP_HEADERS = {"x-agent-step-id", "x-agent-expected-tools"}
"""Read by the proxy for the coordinator, never sent on to a node."""
FORWARD_DROPPED = HOP_HEADERS | STEP_HEADERS
"""Headers of a model call the proxy does not send on to the node."""
NODE_REFRESH_S = 30.0
"""How often the proxy asks the coordinator for the fleet's nodes when not given `--nodes`."""
NODE_RETRY_S = 2.0
"""How soon it asks again while it has not learned any."""
CLOSED_REMEMBERED = 4096
"""How many closed sessions the proxy remembers, to drop the hook reports that arrive after their close."""


@dataclass
class ProxyConfig:
    coordinator: str | Sequence[str] | None
    """The coordinator's URL, or its replicas' (comma-separated, or a sequence); None: route on our own."""
    token: str | None = None
    fallback_nodes: tuple[str, ...] = ()
    idle_close_s: float = 900.0
    api_key: str | None = None
    """Bearer token sent to the nodes (vLLM's --api-key), if they need one."""
    options: dict[str, float] = field(default_factory=dict)
    max_queue_wait_s: float | None = None
    """Answer a model call 429 with `Retry-After` when the coordinator estimates its wait for a place above this
    (`queue_headers.py`); None: calls wait for their place, as before."""
    tool_log: str | None = None
    """Append every tool boundary seen on the wire or reported by a hook to this file, one JSON line each."""


@dataclass
class _Session:
    router: AsyncRouter
    last_used: float
    registration: asyncio.Future[None]
    """The session's one registration: whoever uses the router awaits it first, so that nothing (a close above
    all, which a router not yet registered would drop) reaches a router whose registration is under way."""


class RoutingProxy:
    def __init__(self, config: ProxyConfig) -> None:
        self.config = config
        self.sessions: dict[str, _Session] = {}
        self.http: aiohttp.ClientSession | None = None
        self._reaper: asyncio.Task[None] | None = None
        self._learner: asyncio.Task[None] | None = None
        self.learned_nodes: tuple[str, ...] = ()
        """Node URLs the coordinator last listed (used only without `--nodes`)."""
        self.inferred = InferredTools()
        self.closed: OrderedDict[str, None] = OrderedDict()
        """The last `CLOSED_REMEMBERED` sessions a close ended, oldest first: a hook's report that arrives after the
        close (Claude Code's tool ends are reported by a hook that runs in the background) is dropped instead of
        registering the session again, which would then hold a place nobody uses."""

    def give_up(self, queue: QueueState) -> bool:
        """Whether a waiting call is answered 429 rather than held (`ProxyConfig.max_queue_wait_s`)."""
        bound = self.config.max_queue_wait_s
        return bound is not None and queue.estimated_wait_s is not None and queue.estimated_wait_s > bound

    @property
    def fallback_nodes(self) -> tuple[str, ...]:
        return self.config.fallback_nodes or self.learned_nodes

    # -- sessions --------------------------------------------------------------------------------------------------

    def session_id(self, request: web.Request, payload: Any = None) -> str:
        """The request's session (`session_identity.py`); `payload`: its parsed body, for a conversation's digest."""
        return session_id_of(request.headers, payload)

    async def router(self, session_id: str, context: protocol.AgentContext) -> AsyncRouter:
        session = self.sessions.get(session_id)
        if session is None:
            config = SessionConfig.of(
                coordinator=self.config.coordinator,
                token=self.config.token,
                context=context,
                session_id=session_id,
                fallback_nodes=self.fallback_nodes,
                **self.config.options,
            )
            self.closed.pop(session_id, None)
            router = AsyncRouter(config)
            registration = asyncio.ensure_future(router.register())
            session = self.sessions[session_id] = _Session(router, time.monotonic(), registration)
        try:
            await asyncio.shield(session.registration)  # one caller going away cancels no one else's registration
        except Exception:
            if self.sessions.get(session_id) is session:
                del self.sessions[session_id]  # the next event starts afresh instead of meeting this failure again
            raise
        session.last_used = time.monotonic()
        return session.router

    async def _reap(self) -> None:
        while True:
            await asyncio.sleep(min(60.0, self.config.idle_close_s / 2))
            cutoff = time.monotonic() - self.config.idle_close_s
            for session_id, session in list(self.sessions.items()):
                if session.last_used < cutoff:
                    del self.sessions[session_id]
                    self.inferred.forget(session_id)
                    await session.router.close()

    async def _learn_nodes(self) -> None:
        """Keep `learned_nodes` to what the coordinator lists, and every session's fail-open list with it."""
        while True:
            for url in coordinator_urls(self.config.coordinator):
                if (nodes := await self._list_nodes(url)) is None:
                    continue
                if nodes and nodes != self.learned_nodes:
                    log.info("tao proxy: fail-open nodes from the coordinator: %s", ", ".join(nodes))
                    self.learned_nodes = nodes
                    for session in self.sessions.values():
                        session.router.config = session.router.config.model_copy(update={"fallback_nodes": nodes})
                break
            await asyncio.sleep(NODE_REFRESH_S if self.learned_nodes else NODE_RETRY_S)

    async def _list_nodes(self, coordinator: str) -> tuple[str, ...] | None:
        """The node URLs one coordinator replica lists, None when it does not answer."""
        assert self.http is not None
        headers = {"Authorization": f"Bearer {self.config.token}"} if self.config.token else {}
        timeout = aiohttp.ClientTimeout(total=5)
        try:
            async with self.http.get(coordinator + "/v1/nodes", headers=headers, timeout=timeout) as reply:
                reply.raise_for_status()
                body = await reply.json()
            listed = [protocol.NodeInfo.model_validate(node) for node in body["nodes"]]
        except (TimeoutError, aiohttp.ClientError, ValueError, KeyError, TypeError) as error:
            log.debug("tao proxy: could not list the nodes of %s: %s", coordinator, error)
            return None
        return tuple(sorted(node.url.rstrip("/") for node in listed))

    # -- forwarding ------------------------------------------------------------------------------------------------

    async def model_call(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        arrived = time.monotonic()
        payload = parse_json(raw)
        session_id = self.session_id(request, payload)
        router = await self.router(session_id, context_from(request.headers))
        results = tool_results(payload)
        for end in self.inferred.ended(session_id, results, arrived):
            await router.tool_end(end.call_id, end.duration_s, end.status, happened=arrived)
        for result in results:
            if (seen := self.inferred.seen(session_id, result.call_id)) is not None and seen.ended == arrived:
                self._log_tool("wire", "end", session_id, seen.start.call_id, arrived, status=result.status)
        tokens = len(raw) // 4
        model = model_named(payload) if payload is not None else call_model(raw)  # a body too large to infer from
        try:
            grant = await router.acquire(tokens, step_from(request.headers), model, self.give_up)
        except NoNodeAvailable as error:
            return no_node(error)
        except LongQueue as long:
            await router.heartbeat_if_due()  # the harness comes back within a third of the lease: the place is kept
            return queue_full(long.queue, self.config.max_queue_wait_s or 0.0, router.state.lease_ttl_s)
        body, streaming = with_usage_requested(raw, request.path)
        retry = True
        while True:
            started = time.monotonic()
            try:
                upstream = await self._send(request, grant, body, session_id)
            except aiohttp.ClientError as error:
                how = aiohttp_refusal(error)
                usage = Usage(error=describe(error), refused=how is not None)
                await router.llm_end(grant, usage, time.monotonic() - started)
                if how is None or not retry or (other := await router.reroute(grant, how, tokens, model)) is None:
                    return unreachable(grant, error)
                grant, retry = other, False
                continue
            if retry and (how := refused_status(upstream.status)) is not None:
                await router.llm_end(grant, Usage(error=how, refused=True), time.monotonic() - started)
                if (other := await router.reroute(grant, how, tokens, model)) is None:
                    return await self._relay(request, upstream, None)  # reported: nothing to observe
                upstream.release()
                grant, retry = other, False
                continue
            break
        if not retry and refused_status(upstream.status) is None:
            router.served_instead(grant)
        observer = UsageObserver(streaming, started)
        reader = ToolCallReader(streaming) if upstream.status < 300 else None
        try:
            return await self._relay(request, upstream, observer, reader, queue_headers(grant.queued))
        finally:
            usage = observer.finish()
            usage.refused = refused_status(upstream.status) is not None
            ended = time.monotonic()
            await router.llm_end(grant, usage, ended - started)
            if reader is not None and usage.error is None:
                await self._start_tools(router, session_id, reader, payload, ended)

    async def _start_tools(
        self, router: AsyncRouter, session_id: str, reader: ToolCallReader, payload: Any, now: float
    ) -> None:
        """Report the tool calls a response that ended at `now` asked for, unless hooks report them."""
        calls = reader.calls()
        if not calls:
            return
        offered = offered_tools(payload)
        starts = [start_of(call, offered) for call in calls]
        for start in self.inferred.started(session_id, starts, now):
            await router.tool_start(start.call_id, start.tool, start.hints, start.program, happened=now)
        for start in starts:
            self._log_tool("wire", "start", session_id, start.call_id, now, tool=start.tool, program=start.program)

    def _log_tool(self, source: str, kind: str, session_id: str, call_id: str, at: float, **more: Any) -> None:
        """One line of `tool_log`: a tool boundary as `source` (`wire`, `hook`) dated it, `at` (monotonic)."""
        if self.config.tool_log is None:
            return
        wall = time.time() - (time.monotonic() - at)
        line = {"source": source, "kind": kind, "session_id": session_id, "call_id": call_id, "at": wall, **more}
        with open(self.config.tool_log, "a", encoding="utf-8") as log_file:
            log_file.write(json.dumps(line) + "\n")

    async def passthrough(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        router = await self.router(self.session_id(request, parse_json(raw)), context_from(request.headers))
        try:
            grant = router.state.last or router.fallback()
        except NoNodeAvailable as error:
            return no_node(error)
        try:
            upstream = await self._send(request, grant, raw, router.state.session_id)
        except aiohttp.ClientError as error:
            return unreachable(grant, error)
        return await self._relay(request, upstream, None)

    async def _send(self, request: web.Request, grant: Grant, body: bytes, session_id: str) -> aiohttp.ClientResponse:
        """The node's answer, its headers read (its body not yet)."""
        assert self.http is not None
        headers = {k: v for k, v in request.headers.items() if k.lower() not in FORWARD_DROPPED}
        headers["X-Session-ID"] = session_id
        if self.config.api_key:
            headers["Authorization"] = f"Bearer {self.config.api_key}"
        url = grant.node_url.rstrip("/") + request.path_qs
        return await self.http.request(request.method, url, data=body, headers=headers)

    async def _relay(
        self,
        request: web.Request,
        upstream: aiohttp.ClientResponse,
        observer: UsageObserver | None,
        reader: ToolCallReader | None = None,
        added: dict[str, str] | None = None,
    ) -> web.StreamResponse:
        """Pass the node's answer back as it streams, read by `observer` and `reader` on the way, with the `added`
        headers."""
        async with upstream:
            response = web.StreamResponse(status=upstream.status)
            for name, value in upstream.headers.items():
                if name.lower() not in ANSWER_DROPPED:
                    response.headers[name] = value
            response.headers.update(added or {})
            await response.prepare(request)
            async for chunk in upstream.content.iter_any():
                if observer is not None:
                    observer.feed(chunk)
                if reader is not None:
                    reader.feed(chunk)
                await response.write(chunk)
            if observer is not None and upstream.status >= 400 and observer.usage.error is None:
                observer.usage.error = f"HTTP {upstream.status}"
            await response.write_eof()
            return response

    # -- hook relay ------------------------------------------------------------------------------------------------

    async def relay(self, request: web.Request) -> web.Response:
        try:
            batch = protocol.EventsRequest.model_validate(json.loads(await request.read()))
        except (ValueError, json.JSONDecodeError) as error:
            return web.json_response({"error": str(error)}, status=422)
        results = [await self._relay_one(event) for event in batch.events]
        return web.json_response({"results": results})

    async def _relay_one(self, event: protocol.BatchedEvent) -> dict[str, Any]:
        if event.kind == "register":
            self.closed.pop(event.session_id, None)  # a resumed session (`claude --resume` keeps its id) opens again
        elif event.session_id in self.closed:
            return {"ok": True, "status": 204}
        arrived = time.monotonic()
        context = event.registration.context if event.registration else protocol.AgentContext()
        session = self.sessions.get(event.session_id)
        start = event.tool_start
        dated = arrived - (start.age_s or 0.0) if start is not None else arrived
        happened = self.inferred.hook_start_time(event.session_id, start.call_id, dated) if start else dated
        if event.kind == "close":
            self._remember_closed(event.session_id)
        if not self.inferred.hook_event(event, happened) or (session is None and event.kind == "close"):
            return {"ok": True, "status": 204}
        router = await self.router(event.session_id, context)
        if event.kind == "tool_start" and start:
            self._log_tool("hook", "start", event.session_id, start.call_id, dated, tool=start.tool)
            await router.tool_start(start.call_id, start.tool, start.hints, start.program, happened=happened)
        elif event.kind == "tool_end" and event.tool_end:
            end = event.tool_end
            happened = arrived - (end.age_s or 0.0)
            self._log_tool("hook", "end", event.session_id, end.call_id, happened, status=end.status)
            await router.tool_end(end.call_id, end.duration_s, end.status, happened=happened)
        elif event.kind == "close":
            if self.sessions.pop(event.session_id, None) is not None:  # not when a close sent twice got here first
                await router.close()
        elif event.kind == "heartbeat":
            await router.heartbeat_if_due()
        await router.flush()
        return {"ok": True, "status": 204}

    def _remember_closed(self, session_id: str) -> None:
        self.closed[session_id] = None  # new: a close of a session remembered already is dropped before this
        while len(self.closed) > CLOSED_REMEMBERED:
            self.closed.popitem(last=False)

    # -- app -------------------------------------------------------------------------------------------------------

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 << 20)
        for path in MODEL_ROUTES:
            app.router.add_post(path, self.model_call)
        for path in PASSTHROUGH_ROUTES:
            app.router.add_route("*", path, self.passthrough)
        app.router.add_post("/tao/v1/events", self.relay)
        for path in HEALTH_ROUTES:
            app.router.add_get(path, self.healthz)
        app.cleanup_ctx.append(self._lifecycle)
        return app

    async def healthz(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok", "sessions": len(self.sessions)})

    async def _lifecycle(self, app: web.Application) -> Any:
        self.http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None, sock_connect=5))
        self._reaper = asyncio.create_task(self._reap())
        if self.config.coordinator and not self.config.fallback_nodes:
            self._learner = asyncio.create_task(self._learn_nodes())
        yield
        self._reaper.cancel()
        if self._learner is not None:
            self._learner.cancel()
        for session in self.sessions.values():
            await session.router.close()
        await self.http.close()


def aiohttp_refusal(error: aiohttp.ClientError) -> str | None:
    """How an aiohttp error raised before any response refused the call (`refusals.py`), or None: a connection
    refused, reset or timed out while connecting, or closed before the response began; a read timeout is not one."""
    if not isinstance(error, aiohttp.ClientConnectionError):
        return None
    if isinstance(error, aiohttp.ServerTimeoutError) and not isinstance(error, aiohttp.ConnectionTimeoutError):
        return None
    return describe(error)


def unreachable(grant: Grant, error: aiohttp.ClientError) -> web.Response:
    return web.json_response({"error": {"message": f"node {grant.node} unreachable: {error}"}}, status=502)


def no_node(error: NoNodeAvailable) -> web.Response:
    """A 503 naming why no node could be used; a refused API token has a type of its own."""
    kind = "tao_coordinator_auth" if isinstance(error, AuthenticationFailed) else "tao_no_node"
    return web.json_response({"error": {"type": kind, "message": str(error)}}, status=503)


def context_from(headers: Any) -> protocol.AgentContext:
    """The agent context the `x-agent-*` headers describe; a malformed value is left out, never an error."""
    prefix = "x-agent-label-"
    labels = {
        key: value[: protocol.LABEL_VALUE_MAX]
        for name, value in headers.items()
        if name.lower().startswith(prefix) and (key := name[len(prefix) :].lower()[: protocol.LABEL_KEY_MAX])
    }
    shared = headers.get("x-agent-shared-prefix-tokens", "0").strip()
    return protocol.AgentContext(
        harness=headers.get("x-agent-harness", "proxy")[:100],
        workflow_id=headers.get("x-agent-workflow-id", "")[:200],
        parent_session_id=headers.get("x-agent-parent-session-id", "")[:200],
        model=headers.get("x-agent-model", "")[:200],
        shared_prefix_tokens=min(int(shared), 10_000_000) if shared.isdigit() else 0,
        labels=dict(list(labels.items())[:50]),
        expected_next_tools=list(tool_names(headers.get("x-agent-expected-next-tools", ""))),
        client_session_id=headers.get("x-agent-client-session-id", "")[:200],
    )


def tool_names(header: str) -> tuple[str, ...]:
    """A comma-separated list of tool names, as the protocol bounds it: at most 50, each cut to 200 characters."""
    return tuple(tool.strip()[:200] for tool in header.split(",") if tool.strip())[:50]


def step_from(headers: Any) -> Step | None:
    """The agent's step a model call names (`x-agent-step-id`, `x-agent-expected-tools`), None when it names none.
    A step id longer than the protocol allows is left out rather than cut, since a cut id would name another step;
    an empty `x-agent-expected-tools` says no tool is expected."""
    step_id = headers.get("x-agent-step-id", "").strip()
    tools = headers.get("x-agent-expected-tools")
    if not step_id and tools is None:
        return None
    return Step(step_id if 0 < len(step_id) <= 200 else None, None if tools is None else tool_names(tools))
