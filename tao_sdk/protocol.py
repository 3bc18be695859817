"""The coordinator's wire protocol (`/v1`, docs/coordinator.md#the-api-v1): the JSON bodies both the SDK and the
coordinator speak.

One pydantic model per body, validated on both sides. Unknown fields in a request are rejected, so a typo in a
client is a 422 naming the field rather than a silently ignored value; unknown fields in an answer are ignored, so
an older client reads a newer coordinator's answers. Times are seconds; `deadline` is a Unix timestamp (wall
clock), the only absolute time on the wire.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

from .hints import PROGRAM_MAX_CHARS, PROGRAM_PATTERN
from .ids import SESSION_ID_PATTERN

API_PREFIX = "/v1"

LABEL_KEY_MAX = 64
LABEL_VALUE_MAX = 256
LabelKey = Annotated[str, StringConstraints(min_length=1, max_length=LABEL_KEY_MAX)]
LabelValue = Annotated[str, StringConstraints(max_length=LABEL_VALUE_MAX)]
ToolName = Annotated[str, StringConstraints(min_length=1, max_length=200)]
StepId = Annotated[str, StringConstraints(min_length=1, max_length=200)]
NodeName = Annotated[str, StringConstraints(min_length=1, max_length=200)]
ModelName = Annotated[str, StringConstraints(min_length=1, max_length=200)]
MAX_AGE_S = 86_400
"""The oldest a reported tool start or end may be (`age_s`)."""
ERROR_MAX_CHARS = 2_000
"""The longest error text a call's report carries; a client cuts a longer one."""


class _Body(BaseModel):
    """A request's body: an unknown field is a 422 naming it."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class _Answer(BaseModel):
    """A coordinator's answer: fields a client does not know are ignored, so a client keeps working beside a newer
    coordinator (one upgraded first, as fleets roll upgrades out)."""

    model_config = ConfigDict(extra="ignore", frozen=True)


class AgentContext(_Body):
    """What a session tells the coordinator about its agent when it registers (`x-agent-*` headers on `tao proxy`).

    The coordinator stores it on the session and shows it in `GET /v1/sessions`. TAO reads the workflow fields for
    workflow affinity (`workflow_id`, else the family of `parent_session_id`: `core/signals/workflow.py`) and
    `expected_next_tools` to forecast a tool with little history of its own (`core/forecast/forecaster.py`)."""

    harness: str = Field(default="unknown", max_length=100)
    workflow_id: str = Field(default="", max_length=200)
    """The task this session is part of, shared by an agent's sub-agents and sibling sessions (which share
    prefixes); empty when unknown."""
    parent_session_id: str = Field(default="", max_length=200)
    """The session that spawned this one (a sub-agent's or sub-session's parent); empty for a top-level session."""
    model: str = Field(default="", max_length=200)
    labels: dict[LabelKey, LabelValue] = Field(default_factory=dict, max_length=50)
    """At most 50, each key 1–64 characters and each value at most 256."""
    expected_next_tools: list[ToolName] = Field(default_factory=list, max_length=50)
    """Tools the agent expects to call next, at most 50 names of 1–200 characters; an acquire may replace them."""
    client_session_id: str = Field(default="", max_length=200)
    shared_prefix_tokens: int = Field(default=0, ge=0, le=10_000_000)
    """Tokens at the head of every prompt shared with other sessions (system prompt, tool catalog)."""


class RegisterRequest(_Body):
    context: AgentContext = Field(default_factory=AgentContext)
    session_id: str | None = Field(default=None, pattern=SESSION_ID_PATTERN)
    """Reuse the harness's own id (e.g. Claude Code's) so hooks and the proxy name the same session; omitted: the
    coordinator assigns one."""
    expected_input_tokens: int | None = Field(default=None, ge=0, le=100_000_000)


class RegisterResponse(_Answer):
    session_id: str
    session_token: str
    """Bearer token for every call about this session; only it can act on the session."""
    lease_ttl_s: float


class AcquireRequest(_Body):
    expected_input_tokens: int | None = Field(default=None, ge=0, le=100_000_000)
    wait_s: float = Field(default=30.0, ge=0, le=600)
    """Longest the call may block waiting for admission; then it answers `waiting` and the client asks again."""
    step_id: StepId | None = None
    """The agent's step this call belongs to (a step counter, a turn id), 1–200 characters; omitted: unchanged.
    Per call, so it travels here and not in the registration."""
    expected_next_tools: list[ToolName] | None = Field(default=None, max_length=50)
    """Tools the agent expects to call after this call, at most 50; omitted: unchanged, `[]`: none expected."""
    avoid_nodes: list[NodeName] = Field(default_factory=list, max_length=8)
    """Nodes this call must not go to: the ones that just refused it (`LlmEndRequest.refused`; the SDK retries a
    refused call once, elsewhere). With any, the call is placed at once on another usable node, over its capacity
    if need be, and the session's place moves there; when there is none, or another call of the session runs on
    one of them, the answer is 503 with code `no_other_node`. Names the fleet no longer has are ignored."""
    model: ModelName | None = None
    """The model the call names (its request body's `model`), 1–200 characters; omitted: the session's main model.
    The call goes only to a node serving it. A model other than the session's main one (`AgentContext.model`, else
    its first call's) is a side call: placed at once on a node serving it, beside the session's place, which it
    neither takes nor moves, and answered without a lease. A model no healthy node serves is answered 409 with code
    `model_not_served` (the SDK then routes the call on its own)."""


MODEL_NOT_SERVED = "model_not_served"
"""`ErrorBody.code` of a 409 for an acquire whose model no healthy node serves."""


class AcquireResponse(_Answer):
    """An admitted answer names its node (`node`, and `node_url`, an http(s) URL); a waiting one need not."""

    status: Literal["admitted", "waiting"]
    node: str | None = Field(default=None, min_length=1, max_length=200)
    node_url: str | None = Field(default=None, pattern=r"^https?://[^\s/]+")
    """The node's root URL (Anthropic clients use it as base URL)."""
    base_url: str | None = None
    """`node_url` + `/v1` (the OpenAI base URL)."""
    lease_id: str | None = None
    expires_at: float | None = None
    """Unix time by which the session must send another event, or lose its place."""
    queue_position: int | None = Field(default=None, ge=1)
    """On a waiting answer: 1 for the session that has waited longest, else the number of waiting sessions that
    asked before this one, plus one. Places are given by value, not in this order: a position is progress, not a
    promise (`core/queue.py`)."""
    estimated_wait_s: float | None = Field(default=None, ge=0)
    """On a waiting answer: seconds until a place, at the rate the queue was served lately (the busy time between
    services times the position); absent until the coordinator has seen the queue served once."""

    @model_validator(mode="after")
    def _admitted_names_its_node(self) -> AcquireResponse:
        if self.status == "admitted" and (self.node is None or self.node_url is None):
            raise ValueError("an admitted answer names its node: node and node_url are required")
        return self


class LlmEndRequest(_Body):
    lease_id: str | None = Field(default=None, max_length=100)
    node: str = Field(min_length=1, max_length=200)
    prompt_tokens: int | None = Field(default=None, ge=0, le=100_000_000)
    cached_tokens: int | None = Field(default=None, ge=0, le=100_000_000)
    completion_tokens: int | None = Field(default=None, ge=0, le=100_000_000)
    ttft_s: float | None = Field(default=None, ge=0, le=86_400)
    duration_s: float | None = Field(default=None, ge=0, le=86_400)
    error: str | None = Field(default=None, max_length=ERROR_MAX_CHARS)
    refused: bool = False
    """The node refused the call before sending any of its answer — connection refused, connection reset before
    the response, HTTP 503 or 429 — so the call never ran there (`error` says how; required then). The session
    loses its place there, and after `node_demote_after` refusals in a row (a setting of the coordinator's core)
    the node is demoted until a probe finds it serving again (`GET /v1/nodes` shows it)."""

    @model_validator(mode="after")
    def _refusal_says_how(self) -> LlmEndRequest:
        if self.refused and not self.error:
            raise ValueError("a refused call must say how it was refused in error")
        return self


class ToolHints(_Body):
    timeout_s: float | None = Field(default=None, ge=0, le=86_400)
    sleep_s: float | None = Field(default=None, ge=0, le=86_400)
    background: bool = False
    deadline: float | None = Field(default=None, ge=0, le=1e11)
    """Unix time by which the tool ends."""


class ToolStartRequest(_Body):
    call_id: str = Field(min_length=1, max_length=200)
    tool: str = Field(min_length=1, max_length=200)
    hints: ToolHints = Field(default_factory=ToolHints)
    program: str | None = Field(default=None, max_length=PROGRAM_MAX_CHARS, pattern=PROGRAM_PATTERN)
    """For a shell tool: the program the command runs (`tao_sdk.hints.program_of`, e.g. `cargo`), never the command."""
    age_s: float | None = Field(default=None, ge=0, le=MAX_AGE_S)
    """Seconds between the tool's start and this report being sent (a hook's start-up, a queue): the coordinator
    starts the tool that long before it received the report, but not before the session's current phase began.
    Omitted: the tool started when the report arrived."""


class ToolEndRequest(_Body):
    call_id: str = Field(min_length=1, max_length=200)
    duration_s: float | None = Field(default=None, ge=0, le=86_400)
    status: Literal["ok", "error", "timeout"] = "ok"
    age_s: float | None = Field(default=None, ge=0, le=MAX_AGE_S)
    """Seconds between the tool's end and this report being sent: the coordinator ends the tool that long before it
    received the report, but not before the tool started. Omitted: it ended when the report arrived."""


class BatchedEvent(_Body):
    """One event of a `/v1/events` batch: what a short-lived hook process reports."""

    kind: Literal["register", "tool_start", "tool_end", "llm_end", "close", "heartbeat"]
    session_id: str = Field(pattern=SESSION_ID_PATTERN)
    session_token: str | None = Field(default=None, max_length=200)
    """Required for every kind but `register` (which needs the API token)."""
    registration: RegisterRequest | None = None
    """The body of a `register` event (its session id is the event's)."""
    tool_start: ToolStartRequest | None = None
    tool_end: ToolEndRequest | None = None
    llm_end: LlmEndRequest | None = None


class EventsRequest(_Body):
    events: list[BatchedEvent] = Field(min_length=1, max_length=1_000)


class EventResult(_Answer):
    ok: bool
    status: int
    error: str | None = None
    session_token: str | None = None
    """Set for a successful `register`."""


class EventsResponse(_Answer):
    results: list[EventResult]


class SessionView(_Answer):
    """The coordinator's view of a session, sent with every 409 about it: the coordinator is the judge of a
    session's phase, and a client converges on it (`tao_sdk/router.py`)."""

    phase: str
    node: str | None = None
    running_calls: list[str] = Field(default_factory=list)
    """Call ids of the tools the coordinator sees running."""
    llm_calls: int = 0
    """Model calls the coordinator sees running."""


NO_HEALTHY_NODE = "no_healthy_node"
NO_OTHER_NODE = "no_other_node"
"""On a 503 to an acquire with `avoid_nodes`: no usable node other than those is left for the retried call."""
NOT_LEADER = "not_leader"
LEADER_HEADER = "X-TAO-Leader"
"""On a 421 from a standby replica: where the leader serves, as `ErrorBody.leader` has it."""


class ErrorBody(_Answer):
    error: str
    field: str | None = None
    code: str | None = None
    """A cause a client acts on: `no_healthy_node` (a 503 to an acquire while no node of the fleet is healthy),
    `no_other_node` (a 503 to an acquire with `avoid_nodes` that no other node can take), `not_leader` (a 421 from a
    replica that does not serve writes)."""
    session: SessionView | None = None
    """On a 409 about a session: what the coordinator sees of it."""
    leader: str | None = None
    """On a 421: the leader the replica last saw, if any (also in the `X-TAO-Leader` header)."""


class NodeInfo(_Answer):
    name: str
    url: str
    healthy: bool
    """Scraped healthy, and not demoted: the coordinator places sessions here."""
    capacity_tokens: int
    used_tokens: int
    prefix_hit_rate: float
    sessions: int
    demoted: bool = False
    """The node refused `node_demote_after` calls in a row: nothing is placed here until a probe (a minimal model
    call) finds it serving again, whatever its `/health` says."""
    demoted_reason: str | None = None
    demoted_for_s: float | None = None
    """Seconds since the demotion."""
    unhealthy_reason: str | None = None
    """Why the node's scrapes fail, or why its figures are not believed (then `quarantined`); None while they are."""
    membership: Literal["active", "draining"] = "active"
    """`draining`: nothing new is admitted here; the sessions holding a place are moved and running calls finish
    (`POST /v1/nodes/{name}/drain`)."""
    quarantined: bool = False
    """Its `/metrics` reports a capacity that cannot be true (none, past the coordinator's `fleet.max_capacity_tokens`,
    or changed without a restart): nothing is placed here until it reports one that can."""
    models: list[str] | None = None
    """The model names (and LoRA adapters) the node serves, sorted; null while not known: it takes calls for any."""
    models_from: Literal["config", "node"] | None = None
    """Where `models` comes from: the node's `models` setting, or its own `GET /v1/models`; null while not known."""
    origin: Literal["config", "api", "dns"] = "config"
    """How the node joined the fleet: the configuration file, `POST /v1/nodes`, or a DNS name's discovery."""
    removed_when_empty: bool = False
    """Drained with `remove` (or gone from DNS): removed once no session holds a place there."""


class NodeList(_Answer):
    """`GET /v1/nodes`: every node of the fleet."""

    nodes: list[NodeInfo]


class SessionInfo(_Answer):
    session_id: str
    phase: str
    node: str | None
    harness: str
    context_tokens: int
    running_tools: list[str]
    lease_expires_in_s: float
    workflow_id: str = ""
    parent_session_id: str = ""
    step_id: str = ""
    """The step of the session's latest acquire that named one."""
    expected_next_tools: list[str] = Field(default_factory=list)
    """As registered, or as the latest acquire that named them replaced them."""


class SessionPage(_Answer):
    """`GET /v1/sessions`: one page of the live sessions, in the order of their ids."""

    sessions: list[SessionInfo]
    next_cursor: str | None = None
    """Pass it as `cursor` for the next page; null on the last page."""
    total: int = Field(ge=0)
    """Live sessions in all, when this page was read."""


class TimelinePhase(_Answer):
    """One span of a session's life in one phase (and on one node, or none)."""

    phase: str
    since: float
    """Unix time the span began."""
    until: float | None = None
    """Unix time it ended; None for the span the session is in now."""
    node: str | None = None
    """The node the session held during the span."""


class TimelineTool(_Answer):
    call_id: str
    tool: str
    program: str | None = None
    started_at: float
    predicted_s: float
    """The duration the coordinator forecast at the start (its readiness rule's prediction)."""
    prediction: str
    """Which rule made the prediction: forecast, hint, tool, global, default."""
    ended_at: float | None = None
    actual_s: float | None = None
    """As the client reported it, else measured by the coordinator; None while the tool runs."""
    status: str | None = None


class TimelineWait(_Answer):
    """Time spent in WAITING, from the acquire that found no place until a place was given."""

    since: float
    seconds: float | None = None
    """None while the session still waits."""
    node: str | None = None
    """Where it was placed; None while it waits, or when it closed waiting."""


class TimelineCall(_Answer):
    node: str
    ended_at: float
    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    completion_tokens: int | None = None
    ttft_s: float | None = None
    duration_s: float | None = None
    error: str | None = None


class TimelineDecision(_Answer):
    """A place given or taken: by a plan (its number and solver method), by fast admission, or by a router."""

    at: float
    kind: Literal["admitted", "interrupted", "moved", "routed"]
    node: str | None = None
    from_node: str | None = None
    """For a move: the node the session left."""
    by: str
    """`plan`, `fast-admission` or `router`."""
    plan: int | None = None
    method: str | None = None
    value: list[int] | None = None
    """The session's value tuple on `node` (on the node it lost, for an interruption) as the plan saw it, when the
    policy has a value model; the components are named by the decision log's `signals`."""


class SessionTimeline(_Answer):
    """`GET /v1/sessions/{id}`: what the coordinator saw of a session and decided for it, live or recently closed.
    Each list keeps the session's latest entries only (`timeline_entries` in all); `truncated` counts those dropped."""

    session_id: str
    harness: str
    model: str = ""
    workflow_id: str = ""
    parent_session_id: str = ""
    open: bool
    phase: str
    node: str | None = None
    registered_at: float
    closed_at: float | None = None
    closed_by: Literal["client", "lease"] | None = None
    nodes: list[str] = Field(default_factory=list)
    """Every node the session held a place on, first held first."""
    phases: list[TimelinePhase] = Field(default_factory=list)
    tools: list[TimelineTool] = Field(default_factory=list)
    waits: list[TimelineWait] = Field(default_factory=list)
    calls: list[TimelineCall] = Field(default_factory=list)
    decisions: list[TimelineDecision] = Field(default_factory=list)
    truncated: int = 0
