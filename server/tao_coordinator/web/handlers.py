"""Thin HTTP handlers: parse and check a body, authenticate, turn it into one core event, answer. A session's
events go through the one dispatch `/v1/events` uses too (`session_events.py`).

Every handler validates before it feeds anything to the core, and the core validates before it changes anything, so
a rejected request never changes state. Errors are raised, and turned into JSON answers by `errors.py`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from aiohttp import web
from pydantic import BaseModel

from tao_sdk import protocol

from ..config import NodeConfig
from ..core import model
from ..core.errors import NoOtherNode
from ..core.events import Register
from .auth import require_api, require_operator, require_session
from .body import read_body
from .caps import CapReached
from .errors import RequestError, json_error
from .keys import SERVICE
from .limits import check_acquire, check_context
from .listing import page_ids, page_query
from .membership import DrainRequest, MembershipError
from .queue_answer import acquire_body
from .service import CoordinatorService
from .session_events import BODIES, SessionEventKind, apply


def _service(request: web.Request) -> CoordinatorService:
    return request.app[SERVICE]


def _session_id(request: web.Request) -> str:
    return request.match_info["session_id"]


def core_context(context: protocol.AgentContext) -> model.AgentProfile:
    return model.AgentProfile(
        harness=context.harness,
        workflow_id=context.workflow_id,
        parent_session_id=context.parent_session_id,
        model=context.model,
        shared_prefix_tokens=context.shared_prefix_tokens,
        expected_next_tools=tuple(context.expected_next_tools),
        client_session_id=context.client_session_id,
        labels=dict(context.labels),
    )


def register(service: CoordinatorService, body: protocol.RegisterRequest, owner: str) -> protocol.RegisterResponse:
    """Register a session for the API token named `owner` (`auth.require_api`), once its caps let it (the caller
    checks them, `caps.py`: before the body is read where it can)."""
    check_context(body.context, service.coordinator.settings)
    session_id, token = service.new_session(body.session_id)
    service.feed(Register(session_id, core_context(body.context), body.expected_input_tokens))
    service.session_tokens[session_id] = token
    service.caps.admitted(owner, session_id, service.now())
    return protocol.RegisterResponse(
        session_id=session_id, session_token=token, lease_ttl_s=service.config.core.lease_ttl_s
    )


def _json(body: BaseModel, status: int = 200) -> web.Response:
    return web.json_response(body.model_dump(mode="json"), status=status)


async def post_session(request: web.Request) -> web.Response:
    owner, service = require_api(request), _service(request)
    try:
        service.caps.check(owner, service.now())  # before the body is read: a flood's refusals cost little
        body = await read_body(request, protocol.RegisterRequest, required=False)
        return _json(register(service, body, owner), status=201)
    except CapReached as refusal:
        return refusal.response()


def no_healthy_node(service: CoordinatorService) -> bool:
    """Every node of the fleet has been observed, and none is healthy: no acquire can be served until one is."""
    nodes = service.coordinator.nodes
    return set(nodes) >= set(service.nodes) and not any(node.healthy for node in nodes.values())


async def post_acquire(request: web.Request) -> web.Response:
    service, session_id = _service(request), _session_id(request)
    require_session(request, session_id)
    body = await read_body(request, protocol.AcquireRequest, required=False)
    check_acquire(service.coordinator.sessions.get(session_id), body, service.coordinator.settings)
    if no_healthy_node(service):
        # at once rather than after a long poll: the client routes on its own and says so (`tao_sdk/router.py`)
        return json_error(503, "no node of the fleet is healthy", code=protocol.NO_HEALTHY_NODE)
    try:
        answer = await service.acquire(session_id, body)
    except NoOtherNode as error:  # the client keeps the refusal it had
        return json_error(503, str(error), "avoid_nodes", code=protocol.NO_OTHER_NODE)
    return web.json_response(acquire_body(answer), status=200 if answer.status == "admitted" else 202)


async def _session_event(request: web.Request, kind: SessionEventKind) -> web.Response:
    service, session_id = _service(request), _session_id(request)
    require_session(request, session_id)
    body_model = BODIES[kind]
    body = None if body_model is None else await read_body(request, body_model)
    await apply(service, session_id, kind, body)
    return web.Response(status=204)


async def post_llm_end(request: web.Request) -> web.Response:
    return await _session_event(request, "llm_end")


async def post_tool_start(request: web.Request) -> web.Response:
    return await _session_event(request, "tool_start")


async def post_tool_end(request: web.Request) -> web.Response:
    return await _session_event(request, "tool_end")


async def post_heartbeat(request: web.Request) -> web.Response:
    return await _session_event(request, "heartbeat")


async def delete_session(request: web.Request) -> web.Response:
    return await _session_event(request, "close")


async def get_nodes(request: web.Request) -> web.Response:
    require_api(request)
    return web.json_response({"nodes": node_infos(_service(request))})


def node_infos(service: CoordinatorService, names: list[str] | None = None) -> list[dict[str, object]]:
    """What `GET /v1/nodes` tells of each node of the fleet (of `names` only, when given)."""
    core = service.coordinator
    used = core.used_tokens()
    holders: dict[str, int] = {}
    for session in core.sessions.values():
        if session.node is not None:
            holders[session.node] = holders.get(session.node, 0) + 1
    nodes = []
    for name, config in service.nodes.items():
        if names is not None and name not in names:
            continue
        node = core.nodes.get(name)
        demotion = core.demotion(name)
        scraped = service.fleet.last_observation(name)
        nodes.append(
            protocol.NodeInfo(
                name=name,
                url=config.url,
                healthy=node is not None and node.healthy,
                capacity_tokens=node.capacity_tokens if node else 0,
                used_tokens=used.get(name, 0),
                prefix_hit_rate=node.prefix_hit_rate if node else 0.0,
                sessions=holders.get(name, 0),
                demoted=demotion.demoted,
                demoted_reason=demotion.reason,
                demoted_for_s=demoted_for_s(demotion.since, service.now()),
                unhealthy_reason=scraped.reason if scraped else None,
                quarantined=scraped.quarantined if scraped else False,
                membership=core.membership(name),
                models=None if node is None or node.models is None else sorted(node.models),
                models_from=models_from(config, node),
                origin=service.membership.origins.get(name, "config"),
                removed_when_empty=service.membership.draining.get(name, False),
            ).model_dump(mode="json")
        )
    return nodes


def models_from(config: NodeConfig, node: model.Node | None) -> Literal["config", "node"] | None:
    """Where the node's served models come from: its `models` setting, else its `/v1/models` once read."""
    if config.models is not None:
        return "config"
    return "node" if node is not None and node.models is not None else None


async def post_node(request: web.Request) -> web.Response:
    """Add a node (`membership.py`): its settings as a `[[nodes]]` entry of the configuration file."""
    require_operator(request)
    service = _service(request)
    body = await read_body(request, NodeConfig)
    try:
        await service.membership.add(body)
    except MembershipError as error:
        raise RequestError(error.status, str(error), "name") from None
    return web.json_response(node_infos(service, [body.name])[0], status=201)


async def delete_node(request: web.Request) -> web.Response:
    """Remove a node at once: its holders wait again, calls running there finish and are accepted."""
    require_operator(request)
    try:
        await _service(request).membership.remove(request.match_info["name"])
    except MembershipError as error:
        raise RequestError(error.status, str(error), "name") from None
    return web.Response(status=204)


async def post_drain(request: web.Request) -> web.Response:
    """Drain a node: nothing new is admitted there, its holders move at the next plan, running calls finish."""
    require_operator(request)
    service, name = _service(request), request.match_info["name"]
    body = await read_body(request, DrainRequest, required=False)
    try:
        await service.membership.drain(name, body.remove)
    except MembershipError as error:
        raise RequestError(error.status, str(error), "name") from None
    return web.json_response(node_infos(service, [name])[0] if name in service.nodes else {}, status=200)


def demoted_for_s(since: float | None, now: float) -> float | None:
    return None if since is None else round(max(0.0, now - since), 3)


async def get_sessions(request: web.Request) -> web.Response:
    """A page of the live sessions (`listing.py`): the core's, or, on a standby replica, the leader's as stored in
    Redis."""
    require_api(request)
    limit, cursor = page_query(request)
    service = _service(request)
    now = service.now()
    live: Mapping[str, model.AgentSession] = service.coordinator.sessions
    replica = service.replica
    if replica is not None and not replica.serving:
        live = {session_id: record.session for session_id, record in (await replica.store.sessions()).items()}
    ids, next_cursor = page_ids(live, limit, cursor)
    sessions = [session_info(live[session_id], now) for session_id in ids]
    return _json(protocol.SessionPage(sessions=sessions, next_cursor=next_cursor, total=len(live)))


def session_info(session: model.AgentSession, now: float) -> protocol.SessionInfo:
    return protocol.SessionInfo(
        session_id=session.id,
        phase=session.phase.name.lower(),
        node=session.node,
        harness=session.context.harness,
        context_tokens=session.context_tokens,
        running_tools=[tool.tool for tool in session.tools],
        lease_expires_in_s=max(0.0, session.lease_expires_at - now),
        workflow_id=session.context.workflow_id,
        parent_session_id=session.context.parent_session_id,
        step_id=session.step_id,
        expected_next_tools=list(session.context.expected_next_tools),
    )


async def get_session(request: web.Request) -> web.Response:
    """A session's timeline (`timeline.py`), live or closed not long ago; 404 for one never seen or long gone."""
    require_api(request)
    timeline = _service(request).timelines.view(_session_id(request))
    if timeline is None:
        raise RequestError(404, "no such session, or closed too long ago to be kept", "session_id")
    return _json(timeline)


async def get_metrics(request: web.Request) -> web.Response:
    body = _service(request).metrics.exposition()
    return web.Response(body=body, headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"})


async def get_healthz(request: web.Request) -> web.Response:
    core = _service(request).coordinator
    healthy = sum(node.healthy for node in core.nodes.values())
    return web.json_response({"status": "ok", "healthy_nodes": healthy, "sessions": len(core.sessions)})


async def get_leader(request: web.Request) -> web.Response:
    """Which replica leads (`replica.py`); a coordinator without `--redis` always does."""
    service = _service(request)
    replica = service.replica
    if replica is None:
        return web.json_response({"role": "leader", "replica": None, "leader": None, "fence": None})
    role = "leader" if replica.serving else "standby"
    body = {"role": role, "replica": replica.replica_id, "leader": replica.leader_url, "fence": replica.election.fence}
    return web.json_response(body)
