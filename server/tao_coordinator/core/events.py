"""Events: everything that can happen to the coordinator, as frozen values.

An event checks its own fields when built and raises `InvalidEvent` naming the field, so a bad event never reaches
the state. Time is not part of an event: `Coordinator.on_event(event, now)` receives it separately, so the same
events replay identically under a virtual clock.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from .errors import InvalidEvent
from .model import AgentProfile, BlockRun, DurationHints, NodeId, NodeLoad, SessionId, Tier


def _require_id(name: str, value: str) -> None:
    if not isinstance(value, str) or not value:
        raise InvalidEvent(name, "must be a non-empty string")


def _require_count(name: str, value: int | None) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
        raise InvalidEvent(name, f"must be a non-negative integer, got {value!r}")


def _require_names(name: str, values: tuple[str, ...] | None) -> None:
    if values is not None and (
        not isinstance(values, tuple) or not all(isinstance(value, str) and value for value in values)
    ):
        raise InvalidEvent(name, "must be a tuple of non-empty strings")


def _require_runs(name: str, runs: tuple[BlockRun, ...]) -> None:
    if any(len(run) != 2 or isinstance(run[1], bool) or run[1] < 1 for run in runs):
        raise InvalidEvent(name, "must be runs (first block id, positive count)")


def _require_seconds(name: str, value: float | None) -> None:
    if value is not None and (isinstance(value, bool) or not math.isfinite(value) or value < 0):
        raise InvalidEvent(name, f"must be a finite non-negative number of seconds, got {value!r}")


MAX_AGE_S = 86_400.0
"""The oldest a reported tool boundary may be (`ToolStart.age_s`, `ToolEnd.age_s`)."""


def _require_age(value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= MAX_AGE_S:
        raise InvalidEvent("age_s", f"must be a number of seconds within [0, {MAX_AGE_S:g}], got {value!r}")


@dataclass(frozen=True, slots=True)
class Register:
    session_id: SessionId
    context: AgentProfile = field(default_factory=AgentProfile)
    expected_input_tokens: int | None = None

    def __post_init__(self) -> None:
        _require_id("session_id", self.session_id)
        _require_count("expected_input_tokens", self.expected_input_tokens)
        _require_count("context.shared_prefix_tokens", self.context.shared_prefix_tokens)
        _require_names("context.expected_next_tools", self.context.expected_next_tools)


@dataclass(frozen=True, slots=True)
class Acquire:
    """The client is about to call the LLM and asks where."""

    session_id: SessionId
    expected_input_tokens: int | None = None
    prompt_block_runs: tuple[BlockRun, ...] = ()
    """Identities of the prompt's full KV blocks, as runs (see `model.BlockRun`); empty when unknown. Only
    prefix-aware routers read them. The simulator knows them from the workload; a live client would send the chained
    hashes of the request's 16-token blocks, as a router that tokenizes computes them."""
    step_id: str | None = None
    """The agent's step this call belongs to; None leaves the session's step as it was."""
    expected_next_tools: tuple[str, ...] | None = None
    """Tools the agent expects next; None leaves the session's as they were, `()` clears them."""
    avoid_nodes: tuple[NodeId, ...] = ()
    """Nodes this call must not go to: the ones that just refused it (a client retries a refused call once,
    elsewhere). With any, the call is placed at once on another usable node (see `Coordinator`)."""
    model: str | None = None
    """The model the call names; None: not said (the session's main model). Another model than the session's main
    one makes it a side call (`eligibility.py`)."""

    def __post_init__(self) -> None:
        _require_id("session_id", self.session_id)
        _require_count("expected_input_tokens", self.expected_input_tokens)
        _require_runs("prompt_block_runs", self.prompt_block_runs)
        if self.model is not None:
            _require_id("model", self.model)
        if self.step_id is not None:
            _require_id("step_id", self.step_id)
        _require_names("expected_next_tools", self.expected_next_tools)
        _require_names("avoid_nodes", self.avoid_nodes)


@dataclass(frozen=True, slots=True)
class LlmEnd:
    """A call finished (or failed) on `node_id`; usage figures are optional."""

    session_id: SessionId
    node_id: NodeId
    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    completion_tokens: int | None = None
    ttft_s: float | None = None
    duration_s: float | None = None
    error: str | None = None
    refused: bool = False
    """The node refused the call before answering any of it (connection refused or reset, HTTP 503 or 429): the
    call never ran there. Counts towards the node's demotion; `error` says how it refused."""

    def __post_init__(self) -> None:
        _require_id("session_id", self.session_id)
        _require_id("node_id", self.node_id)
        if self.refused and not self.error:
            raise InvalidEvent("error", "a refused call must say how it was refused")
        for name in ("prompt_tokens", "cached_tokens", "completion_tokens"):
            _require_count(name, getattr(self, name))
        _require_seconds("ttft_s", self.ttft_s)
        _require_seconds("duration_s", self.duration_s)
        if (
            self.cached_tokens is not None
            and self.prompt_tokens is not None
            and self.cached_tokens > self.prompt_tokens
        ):
            raise InvalidEvent("cached_tokens", "cannot exceed prompt_tokens")


PROGRAM_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,63}")


@dataclass(frozen=True, slots=True)
class ToolStart:
    session_id: SessionId
    call_id: str
    tool: str
    hints: DurationHints = field(default_factory=DurationHints)
    program: str | None = None
    """For a shell tool: the program its command runs (`cargo`, `ls`), a file name of at most 64 characters; None
    when unknown or not a shell tool. Never the command text."""
    age_s: float = 0.0
    """How long before it was fed the tool started (a hook's start-up, a report's wait in a queue); the core starts
    it then, but never before the session's current phase began (`state_machine.tool_start_time`)."""

    def __post_init__(self) -> None:
        _require_id("session_id", self.session_id)
        _require_id("call_id", self.call_id)
        _require_id("tool", self.tool)
        _require_age(self.age_s)
        _require_seconds("hints.timeout_s", self.hints.timeout_s)
        _require_seconds("hints.sleep_s", self.hints.sleep_s)
        if self.hints.deadline is not None and not math.isfinite(self.hints.deadline):
            raise InvalidEvent("hints.deadline", "must be a finite time")
        if self.program is not None and not (isinstance(self.program, str) and PROGRAM_PATTERN.fullmatch(self.program)):
            raise InvalidEvent("program", f"must be 1-64 of [A-Za-z0-9._+-], first alphanumeric, got {self.program!r}")


TOOL_STATUSES = ("ok", "error", "timeout")


@dataclass(frozen=True, slots=True)
class ToolEnd:
    session_id: SessionId
    call_id: str
    duration_s: float | None = None
    """Measured by the client; when absent the coordinator uses the time since tool_start."""
    status: str = "ok"
    age_s: float = 0.0
    """How long before it was fed the tool ended; the core ends it then, but never before it started nor before
    the session's current phase began (`state_machine.tool_end_time`)."""

    def __post_init__(self) -> None:
        _require_id("session_id", self.session_id)
        _require_id("call_id", self.call_id)
        _require_seconds("duration_s", self.duration_s)
        _require_age(self.age_s)
        if self.status not in TOOL_STATUSES:
            raise InvalidEvent("status", f"must be one of {', '.join(TOOL_STATUSES)}, got {self.status!r}")


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """Renews the session's lease and changes nothing else."""

    session_id: SessionId

    def __post_init__(self) -> None:
        _require_id("session_id", self.session_id)


@dataclass(frozen=True, slots=True)
class Close:
    session_id: SessionId
    reason: str = "closed"

    def __post_init__(self) -> None:
        _require_id("session_id", self.session_id)


@dataclass(frozen=True, slots=True)
class EngineCounters:
    """Cumulative counters of one node's `/metrics` (vLLM 0.33 names), from which the coordinator fits its rates.

    Counters only grow while the node runs; a smaller value than the last one means the node restarted."""

    prefill_tokens_computed: int = 0
    """`vllm:prompt_tokens_by_source_total{source="local_compute"}`: prompt tokens the node computed."""
    prefill_seconds: float = 0.0
    """`vllm:request_prefill_time_seconds_sum`: prefill time of the requests that produced a first token."""
    decode_tokens: int = 0
    """`vllm:inter_token_latency_seconds_count`: inter-token intervals observed."""
    decode_seconds: float = 0.0
    """`vllm:inter_token_latency_seconds_sum`."""
    generation_tokens: int = 0
    """`vllm:generation_tokens_total`."""
    offload_load_tokens: int = 0
    """`vllm:prompt_tokens_by_source_total{source="external_kv_transfer"}`: prompt tokens loaded from the CPU tier."""
    offload_load_seconds: float = 0.0
    """`vllm:kv_offload_load_time_total{transfer_type="CPU_to_GPU"}`: time spent loading them."""
    kv_fetch_waiting: int = 0
    """Requests waiting for their KV to arrive from the CPU tier now (a gauge)."""

    def __post_init__(self) -> None:
        for name in ("prefill_tokens_computed", "decode_tokens", "generation_tokens", "offload_load_tokens"):
            _require_count(name, getattr(self, name))
        _require_count("kv_fetch_waiting", self.kv_fetch_waiting)
        for name in ("prefill_seconds", "decode_seconds", "offload_load_seconds"):
            _require_seconds(name, getattr(self, name))


@dataclass(frozen=True, slots=True)
class NodeUpdate:
    """A node joined, or its observed capacity, health, hit rate or load changed (a `/metrics` scrape)."""

    node_id: NodeId
    capacity_tokens: int
    block_size: int = 16
    healthy: bool = True
    prefix_hit_rate: float = 0.0
    load: NodeLoad = field(default_factory=NodeLoad)
    cpu_capacity_tokens: int = 0
    """KV tokens the node's CPU offloading tier holds (0: no tier)."""
    counters: EngineCounters | None = None
    """The scrape's cumulative counters; None when the source has none (a node announced by configuration)."""
    models: frozenset[str] | None = None
    """The model names the node serves (its `/v1/models`, or configuration); None keeps what the core knew."""

    def __post_init__(self) -> None:
        _require_id("node_id", self.node_id)
        if self.models is not None:
            if not self.models:
                raise InvalidEvent("models", "a node serves at least one model (None: not known)")
            _require_names("models", tuple(self.models))
        _require_count("capacity_tokens", self.capacity_tokens)
        _require_count("cpu_capacity_tokens", self.cpu_capacity_tokens)
        _require_count("running", self.load.running)
        _require_count("waiting", self.load.waiting)
        _require_count("preemptions", self.load.preemptions)
        if not 0.0 <= self.load.kv_usage <= 1.0:
            raise InvalidEvent("kv_usage", f"must be within [0, 1], got {self.load.kv_usage!r}")
        if isinstance(self.block_size, bool) or not isinstance(self.block_size, int) or self.block_size < 1:
            raise InvalidEvent("block_size", f"must be a positive integer, got {self.block_size!r}")
        if not 0.0 <= self.prefix_hit_rate <= 1.0:
            raise InvalidEvent("prefix_hit_rate", f"must be within [0, 1], got {self.prefix_hit_rate!r}")


@dataclass(frozen=True, slots=True)
class NodeRemoved:
    """The node left the fleet: the sessions holding a place there wait again; a call running there ends as usual."""

    node_id: NodeId

    def __post_init__(self) -> None:
        _require_id("node_id", self.node_id)


@dataclass(frozen=True, slots=True)
class NodeDrain:
    """Stop admitting on the node: nothing is placed or routed there any more, the sessions holding a place there
    outside a call wait again (the plan the drain starts places them), and calls running there finish. With
    `remove`, the core removes the node itself as soon as no session holds a place there (`NodeRetired`)."""

    node_id: NodeId
    remove: bool = False

    def __post_init__(self) -> None:
        _require_id("node_id", self.node_id)


@dataclass(frozen=True, slots=True)
class CacheResidency:
    """Live KV-event evidence: `tokens` of the session's prefix are resident in the node's `tier` now (0 = evicted)."""

    node_id: NodeId
    session_id: SessionId
    tokens: int
    tier: Tier = "GPU"

    def __post_init__(self) -> None:
        _require_id("node_id", self.node_id)
        _require_id("session_id", self.session_id)
        _require_count("tokens", self.tokens)
        if self.tier not in ("GPU", "CPU"):
            raise InvalidEvent("tier", f"must be GPU or CPU, got {self.tier!r}")


@dataclass(frozen=True, slots=True)
class KvCacheEvent:
    """One vLLM KV event of a node (`BlockStored`, `BlockRemoved` or `AllBlocksCleared`), block ids as runs.

    The core keeps no per-block state: only a policy that indexes node caches (Dynamo's event-fed radix tree) reads
    these. Apply them in order: `cleared` first, then `removed`, then `stored`."""

    node_id: NodeId
    stored: tuple[BlockRun, ...] = ()
    removed: tuple[BlockRun, ...] = ()
    cleared: bool = False
    medium: str = "GPU"
    """The tier the event is about, as vLLM publishes it: `"GPU"`, `"CPU"` or `"STORAGE"` (an offloading connector's
    tiers; `AllBlocksCleared` has none and is `"GPU"`). Other strings are kept as they are: each policy maps media to
    its tiers the way its real system does (`dynamo.storage_tier`, `llm_d.LlmdPrecisePolicy.medium_weight`)."""

    def __post_init__(self) -> None:
        _require_id("node_id", self.node_id)
        _require_runs("stored", self.stored)
        _require_runs("removed", self.removed)
        _require_id("medium", self.medium)


@dataclass(frozen=True, slots=True)
class LlmFirstToken:
    """The running call of the session produced its first token on `node_id` (its prefill is done).

    Seen by routers that sit on the token stream (Dynamo's frontend); changes no session state."""

    session_id: SessionId
    node_id: NodeId

    def __post_init__(self) -> None:
        _require_id("session_id", self.session_id)
        _require_id("node_id", self.node_id)


@dataclass(frozen=True, slots=True)
class NodeProbed:
    """A demoted node was probed with a minimal model call (`ProbeNode`): it `serves` (answered it), or not, and why."""

    node_id: NodeId
    serves: bool
    detail: str = ""

    def __post_init__(self) -> None:
        _require_id("node_id", self.node_id)


@dataclass(frozen=True, slots=True)
class Tick:
    """Time passed: expire leases, re-estimate expired tool predictions, let readiness flip."""


Event = (
    Register
    | Acquire
    | LlmEnd
    | ToolStart
    | ToolEnd
    | Heartbeat
    | Close
    | NodeUpdate
    | NodeRemoved
    | NodeDrain
    | CacheResidency
    | KvCacheEvent
    | LlmFirstToken
    | NodeProbed
    | Tick
)
