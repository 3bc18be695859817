"""`GET /openapi.json`: the `/v1` API described from the same pydantic models the handlers validate with, so the
description cannot drift from what is enforced."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from tao_sdk import protocol

from ..config import NodeConfig
from .listing import DEFAULT_LIMIT, MAX_LIMIT
from .membership import DrainRequest

SESSION = {"name": "session_id", "in": "path", "required": True, "schema": {"type": "string"}}
PAGE = [
    {
        "name": "limit",
        "in": "query",
        "required": False,
        "schema": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": DEFAULT_LIMIT},
    },
    {"name": "cursor", "in": "query", "required": False, "schema": {"type": "string"}},
]
"""`GET /v1/sessions` a page at a time (`listing.py`): a page's `next_cursor` is the next page's `cursor`."""

# (method, path, summary, request body, success status, response body, needs the session path parameter)
OPERATIONS: list[tuple[str, str, str, type[BaseModel] | None, int, type[BaseModel] | None, bool]] = [
    ("post", "/v1/sessions", "Register a session", protocol.RegisterRequest, 201, protocol.RegisterResponse, False),
    (
        "post",
        "/v1/sessions/{session_id}/acquire",
        "Ask for a node (long poll)",
        protocol.AcquireRequest,
        200,
        protocol.AcquireResponse,
        True,
    ),
    (
        "post",
        "/v1/sessions/{session_id}/llm_end",
        "Report the end of an LLM call",
        protocol.LlmEndRequest,
        204,
        None,
        True,
    ),
    (
        "post",
        "/v1/sessions/{session_id}/tool_start",
        "Report a tool call starting",
        protocol.ToolStartRequest,
        204,
        None,
        True,
    ),
    (
        "post",
        "/v1/sessions/{session_id}/tool_end",
        "Report a tool call ending",
        protocol.ToolEndRequest,
        204,
        None,
        True,
    ),
    ("post", "/v1/sessions/{session_id}/heartbeat", "Renew the session's lease", None, 204, None, True),
    ("delete", "/v1/sessions/{session_id}", "Close the session", None, 204, None, True),
    (
        "post",
        "/v1/events",
        "A batch of events (hook processes)",
        protocol.EventsRequest,
        200,
        protocol.EventsResponse,
        False,
    ),
]

# (path, summary, needs the API token, response body)
READS: list[tuple[str, str, bool, type[BaseModel] | None]] = [
    ("/v1/nodes", "Nodes of the fleet", True, protocol.NodeList),
    ("/v1/sessions", "Live sessions, a page at a time", True, protocol.SessionPage),
    ("/v1/sessions/{session_id}", "A session's timeline, live or recently closed", True, protocol.SessionTimeline),
    ("/healthz", "Liveness", False, None),
    ("/v1/leader", "Which replica leads (several coordinators on one Redis)", False, None),
    ("/metrics", "Prometheus metrics", False, None),
    ("/openapi.json", "This description", False, None),
]
NODE = {"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}

# (method, path, summary, request body, success status, response body): the operator's, with `server.token` only
MEMBERSHIP: list[tuple[str, str, str, type[BaseModel] | None, int, type[BaseModel] | None]] = [
    ("post", "/v1/nodes", "Add a node (operator)", NodeConfig, 201, protocol.NodeInfo),
    ("delete", "/v1/nodes/{name}", "Remove a node at once (operator)", None, 204, None),
    ("post", "/v1/nodes/{name}/drain", "Drain a node (operator)", DrainRequest, 200, protocol.NodeInfo),
]
"""Run-time membership (`membership.py`): 403 for an API token that is not the operator's, 404 for a node the
fleet does not have, 409 for a name it has."""

OPEN = {("post", "/v1/events")}
"""Operations that take no bearer token in the header: `/v1/events` carries one per event."""


def build_spec() -> dict[str, Any]:
    models: list[type[BaseModel]] = [
        *{m for _, _, _, request, _, response, _ in OPERATIONS for m in (request, response) if m is not None},
        *{response for *_, response in READS if response is not None},
        *{m for _, _, _, request, _, response in MEMBERSHIP for m in (request, response) if m is not None},
        protocol.ErrorBody,
    ]
    _, schemas = models_json_schema(
        [(m, "validation") for m in sorted(models, key=lambda m: m.__name__)],
        ref_template="#/components/schemas/{model}",
    )
    paths: dict[str, dict[str, Any]] = {}
    for method, path, summary, request, status, response, scoped in OPERATIONS:
        operation: dict[str, Any] = {"summary": summary, "responses": _responses(status, response)}
        if path.endswith("/tool_end"):
            operation["responses"]["503"] = {
                "description": "the tool history store cannot take it now (code `store_unavailable`); nothing changed, "
                "send it again after Retry-After",
                "headers": {"Retry-After": {"schema": {"type": "integer"}, "description": "seconds to wait"}},
                "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}},
            }
        if scoped:
            operation["parameters"] = [SESSION]
        if request is not None:
            operation["requestBody"] = {
                "required": request is not protocol.AcquireRequest and request is not protocol.RegisterRequest,
                "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{request.__name__}"}}},
            }
        if (method, path) in OPEN:
            operation["security"] = []
        paths.setdefault(path, {})[method] = operation
    for method, path, summary, request, status, response in MEMBERSHIP:
        answers = _membership_responses(status, response)
        change: dict[str, Any] = {"summary": summary, "responses": answers}
        if "{name}" in path:
            change["parameters"] = [NODE]
        if request is not None:
            change["requestBody"] = {
                "required": request is NodeConfig,
                "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{request.__name__}"}}},
            }
        paths.setdefault(path, {})[method] = change
    for path, summary, guarded, response in READS:
        ok: dict[str, Any] = {"description": "OK"}
        if response is not None:
            ok["content"] = {"application/json": {"schema": {"$ref": f"#/components/schemas/{response.__name__}"}}}
        read: dict[str, Any] = {"summary": summary, "responses": {"200": ok}}
        if "{session_id}" in path:
            read["parameters"] = [SESSION]
            read["responses"]["404"] = {"description": "never seen, or closed too long ago to be kept"}
        if response is protocol.SessionPage:
            read["parameters"] = PAGE
            read["responses"]["422"] = {"description": "`limit` or `cursor` not valid"}
        if not guarded:
            read["security"] = []
        # /v1/sessions is also the registration path: a read is added beside it, never over it
        paths.setdefault(path, {})["get"] = read
    return {
        "openapi": "3.1.0",
        "info": {"title": "TAO coordinator", "version": "1"},
        "paths": paths,
        "components": {
            "schemas": schemas.get("$defs", {}),
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearer": []}],
    }


ERROR_BODY: dict[str, Any] = {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}}
MEMBERSHIP_ERRORS = (
    (400, "bad JSON"),
    (401, "no valid token"),
    (403, "an API token that is not the operator's (server.token)"),
    (404, "no such node"),
    (409, "a node of that name is in the fleet"),
    (422, "invalid field"),
)
SESSION_ERRORS = (
    (400, "bad JSON"),
    (401, "no valid token"),
    (403, "not this session's token"),
    (404, "the session is gone (told only to a token issued for it)"),
    (408, "the body did not arrive in time"),
    (409, "not allowed now"),
    (413, "body too large"),
    (422, "invalid field"),
)


def _answers(status: int, response: type[BaseModel] | None, errors: tuple[tuple[int, str], ...]) -> dict[str, Any]:
    """The success answer `status` (with `response`'s schema) beside each error answer of `errors`."""
    answers: dict[str, Any] = {str(code): {"description": text, **ERROR_BODY} for code, text in errors}
    ok: dict[str, Any] = {"description": "OK"}
    if response is not None:
        ok["content"] = {"application/json": {"schema": {"$ref": f"#/components/schemas/{response.__name__}"}}}
    answers[str(status)] = ok
    return answers


def _membership_responses(status: int, response: type[BaseModel] | None) -> dict[str, Any]:
    return _answers(status, response, MEMBERSHIP_ERRORS)


def _responses(status: int, response: type[BaseModel] | None) -> dict[str, Any]:
    answers = _answers(status, response, SESSION_ERRORS)
    error, ok = ERROR_BODY, answers[str(status)]
    if status == 201 and response is protocol.RegisterResponse:
        answers["429"] = {
            "description": "a cap of the API token (`code`: max_live_sessions or registrations_per_s); see Retry-After",
            "headers": {"Retry-After": {"schema": {"type": "integer"}, "description": "seconds to wait"}},
            **error,
        }
    if status == 200 and response is protocol.AcquireResponse:
        waiting = "still waiting for a place, with `queue_position` and `estimated_wait_s` when known; ask again"
        answers["202"] = {"description": waiting, **ok}
        answers["410"] = {"description": "the session closed or expired while the call waited", **error}
        answers["503"] = {"description": "no node of the fleet is healthy (code `no_healthy_node`)", **error}
    return answers
