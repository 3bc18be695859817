"""Sessions, nodes and their parts, as small immutable values.

Invariants (checked by `AgentSession.check()` in tests and relied on everywhere):
- `node` is the node on which the session holds a place, or None. CLOSED and WAITING never hold one; IN_LLM always
  does (a call runs on a node). ADMITTED always does: admission is the act of granting a place.
- `llm_calls > 0` exactly when the phase is IN_LLM; `tools` is non-empty exactly when the phase is IN_TOOL.
- `acquire_pending` is only set while the session waits for a place (WAITING).
- `version` grows by one on every change; the planner compares it to decide whether a plan is stale.

Nothing here mutates: transitions build a new `AgentSession` with `dataclasses.replace` (see `state_machine.py`).
"""

from __future__ import annotations

import enum
import math
from bisect import bisect_right
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal

SessionId = str
NodeId = str
Tier = Literal["GPU", "CPU"]
"""Where a node holds KV blocks, with vLLM's `medium` strings: HBM, or the CPU offloading tier below it."""
BlockRun = tuple[int, int]
"""KV block identities `first, first+1, …, first+count−1` as `(first, count)`: a prompt's full 16-token blocks in
order, prefix-chained (two prompts share their first k blocks exactly when their first k ids are equal)."""

_EMPTY_LABELS: Mapping[str, str] = MappingProxyType({})


def shared_prefix_blocks(a: tuple[BlockRun, ...], b: tuple[BlockRun, ...]) -> int:
    """How many leading blocks two prompts share (ids equal position by position). O(runs)."""
    i = j = 0
    offset_a = offset_b = 0
    shared = 0
    while i < len(a) and j < len(b):
        first_a, count_a = a[i]
        first_b, count_b = b[j]
        if first_a + offset_a != first_b + offset_b:
            break
        step = min(count_a - offset_a, count_b - offset_b)
        shared += step
        offset_a += step
        offset_b += step
        if offset_a == count_a:
            i, offset_a = i + 1, 0
        if offset_b == count_b:
            j, offset_b = j + 1, 0
    return shared


class Phase(enum.IntEnum):
    """Where a session is in its life (docs/design.md#session-life-cycle). Order has no meaning beyond CLOSED being
    last."""

    WAITING = 0
    """Wants the LLM and holds no place: new, or back from a tool after being interrupted."""
    ADMITTED = 1
    """Holds a place on a node and has not started its next call yet."""
    READY = 2
    """Its tools ended and it has not called the LLM yet; may or may not still hold a place."""
    IN_TOOL = 3
    """Runs one or more tools; `node` set means resident, None means paused (interrupted)."""
    IN_LLM = 4
    """Inside one or more LLM calls on `node`. Never moved by the planner."""
    CLOSED = 5
    """Finished, closed by the client, or its lease expired."""


class EvidenceSource(enum.IntEnum):
    """Where a cache-credit figure comes from, best first (docs/algorithm.md#the-value-of-a-placement)."""

    KV_EVENTS = 0
    """Blocks of this session resident on the node, counted from vLLM KV events. Exact; does not decay."""
    USAGE = 1
    """The node served the session's last call and reported usage: it held the whole context then. Decays."""
    ESTIMATE = 2
    """The node served a call without usage figures: context × the node's prefix hit rate. Decays."""


@dataclass(frozen=True, slots=True)
class AgentProfile:
    """What the client tells us about the agent at registration."""

    harness: str = "unknown"
    workflow_id: str = ""
    """The task the session belongs to, shared by sub-agents and siblings; empty when unknown."""
    parent_session_id: str = ""
    """The session that spawned this one; empty for a top-level session."""
    model: str = ""
    shared_prefix_tokens: int = 0
    """Tokens at the head of every prompt that other sessions share (system prompt, tool catalog)."""
    expected_next_tools: tuple[str, ...] = ()
    """As registered; the latest acquire that names tools replaces them (`AgentSession.context`)."""
    client_session_id: str = ""
    labels: Mapping[str, str] = field(default_factory=lambda: _EMPTY_LABELS)


@dataclass(frozen=True, slots=True)
class DurationHints:
    """What the tool call itself says about its duration. All optional; absent means unknown."""

    timeout_s: float | None = None
    """Upper cap: the harness kills the tool after this long."""
    sleep_s: float | None = None
    """Seconds the command is known to sleep (parsed `sleep N`): a floor for the duration."""
    background: bool = False
    """The tool returns at once and keeps running on its own."""
    deadline: float | None = None
    """Absolute time (the coordinator's clock) by which the tool ends."""


@dataclass(frozen=True, slots=True)
class ReadinessSchedule:
    """A running call's readiness as a step function of time, fixed when it was forecast: `initial` until
    `times[0]`, then `levels[k]` from `times[k]` (absolute, increasing) on. Levels run from 0 (not expected back
    within the horizon) to the settings' `readiness_levels` (certain)."""

    horizon_s: float
    initial: int
    times: tuple[float, ...] = ()
    levels: tuple[int, ...] = ()

    def level_at(self, now: float) -> int:
        k = bisect_right(self.times, now)
        return self.levels[k - 1] if k else self.initial

    def next_change(self, now: float) -> float:
        """The first step after `now` (`math.inf`: none is left)."""
        k = bisect_right(self.times, now)
        return self.times[k] if k < len(self.times) else math.inf


@dataclass(frozen=True, slots=True)
class RunningTool:
    """One tool call in flight, with the duration predicted for it."""

    call_id: str
    tool: str
    started_at: float
    hints: DurationHints
    predicted_end: float
    """Absolute time at which the tool is predicted to return."""
    predicted_at: float
    """When `predicted_end` was last estimated; expired predictions are re-estimated at most every so often."""
    source: str
    """Which rule produced the prediction: forecast, hint, tool, global, default, or reestimate."""
    program: str | None = None
    """The program a shell tool runs, as the client reported it."""
    readiness: ReadinessSchedule = ReadinessSchedule(0.0, 0)


@dataclass(frozen=True, slots=True)
class CacheEvidence:
    """A figure, in tokens, for how much of the session's prefix `node` holds, and when it was observed."""

    node: NodeId
    tokens: int
    observed_at: float
    source: EvidenceSource
    tier: Tier = "GPU"
    """Only KV events tell tiers apart; a call's usage (`USAGE`, `ESTIMATE`) says the context was in HBM then."""


@dataclass(frozen=True, slots=True)
class AgentSession:
    """One agent session as the coordinator sees it."""

    id: SessionId
    context: AgentProfile
    registered_at: float
    lease_expires_at: float
    phase: Phase = Phase.WAITING
    node: NodeId | None = None
    version: int = 0
    llm_calls: int = 0
    acquire_pending: bool = False
    tools: tuple[RunningTool, ...] = ()
    context_tokens: int = 0
    """Tokens of the whole context after the last call (prompt + completion)."""
    expected_input_tokens: int = 0
    """Prompt size the client announced for its next call (0 when it did not say)."""
    completed_calls: int = 0
    output_tokens_total: int = 0
    evidence: tuple[CacheEvidence, ...] = ()
    last_node: NodeId | None = None
    """The node that served the last call (used by routers and by fail-open clients)."""
    phase_since: float = 0.0
    placed_at: float = 0.0
    """When the session got the place it holds now (kept unchanged while it keeps that place): a session that has
    held its place since its last call on the node asked that node to keep the call's cache."""
    prompt_block_runs: tuple[BlockRun, ...] = ()
    """KV block identities of the prompt of the latest acquire (empty when the client did not send them)."""
    step_id: str = ""
    """The agent's step of the latest acquire that named one (empty until then). Stored, read by no decision yet."""
    model: str = ""
    """The session's main model as its calls name it: the first model an acquire named that was not a side call
    (`eligibility.py`); empty until then."""
    side_calls: tuple[NodeId, ...] = ()
    """The node of each of the session's side calls in flight (`eligibility.py`), one entry per call: kept in the
    session's record, so a replica that takes over tells a side call's end from the end of the session's own call."""

    @property
    def holds_place(self) -> bool:
        return self.node is not None

    @property
    def is_candidate(self) -> bool:
        """Whether the planner may place, keep, move or interrupt this session (docs/design.md#the-decision)."""
        return self.phase not in (Phase.IN_LLM, Phase.CLOSED)

    def check(self) -> None:
        """Raise AssertionError when an invariant of the module docstring does not hold."""
        if self.phase in (Phase.CLOSED, Phase.WAITING):
            assert self.node is None, f"{self.phase.name} session holds node {self.node}"
        if self.phase in (Phase.IN_LLM, Phase.ADMITTED):
            assert self.node is not None, f"{self.phase.name} session holds no node"
        assert (self.llm_calls > 0) == (self.phase is Phase.IN_LLM), "llm_calls out of step with phase"
        assert bool(self.tools) == (self.phase is Phase.IN_TOOL), "tools out of step with phase"
        assert not self.acquire_pending or self.phase is Phase.WAITING, "acquire pending outside WAITING"


@dataclass(frozen=True, slots=True)
class NodeRates:
    """A node's speeds as measured from its counters; 0 means not measured yet."""

    prefill_tokens_per_s: float = 0.0
    """Prompt tokens one request gets computed per second of its prefill."""
    decode_step_s: float = 0.0
    """Mean time between two output tokens of a request (vLLM's inter-token latency)."""
    load_tokens_per_s: float = 0.0
    """Prompt tokens one request gets loaded from the CPU tier per second of its load."""
    new_kv_tokens_per_s: float = 0.0
    """KV tokens the node computes per second of wall time (prefill and decode): the rate at which its caches turn
    over, since every new block goes through HBM and, with offloading, into the CPU tier."""
    kv_fetch_waiting: int = 0
    """Requests waiting for a CPU→GPU load at the last scrape."""
    kv_fetch_queue: float = 0.0
    """The same gauge averaged over the last several seconds (`node_rates.QUEUE_TIME_CONSTANT_S`): the link's load."""


@dataclass(frozen=True, slots=True)
class NodeLoad:
    """A node's load as its last `/metrics` scrape showed it (what a load-aware router reads); all 0 before one."""

    running: int = 0
    """`vllm:num_requests_running`: requests in the node's running batch."""
    waiting: int = 0
    """`vllm:num_requests_waiting`: requests queued inside the node."""
    kv_usage: float = 0.0
    """`vllm:kv_cache_usage_perc`: share of the node's KV blocks held by live requests, in [0, 1]."""
    preemptions: int = 0
    """`vllm:num_preemptions_total`: a counter, it only grows while the node runs."""


@dataclass(frozen=True, slots=True)
class Node:
    """One vLLM node: its KV capacity as observed, and whether it is healthy."""

    id: NodeId
    capacity_tokens: int
    """KV capacity in tokens, `(num_gpu_blocks − 1) × block_size` (or `kv_cache_size_tokens`)."""
    block_size: int = 16
    healthy: bool = True
    prefix_hit_rate: float = 0.0
    """Observed share of prompt tokens served from the prefix cache, in [0, 1]."""
    version: int = 0
    load: NodeLoad = NodeLoad()
    utilization_target: float | None = None
    """The share of `capacity_tokens` the planner may fill here, when the policy adapts it per node (see
    `policies/admission.py`); None: `CoreSettings.utilization_target`."""
    credit_half_life_s: float | None = None
    """Half-life of snapshot cache evidence here, fitted from the retention the coordinator observed on this node
    (`signals/retention.py`); None: `CoreSettings.credit_half_life_s`. Settings without decay override it."""
    cpu_capacity_tokens: int = 0
    """KV tokens the node's CPU offloading tier holds; 0: the node has none."""
    rates: NodeRates = NodeRates()
    """What the coordinator measured of the node's speed from its counters (`node_rates.py`); changes with every
    scrape, so the value model reads the three coarse figures below instead."""
    cpu_hit_worth: float = 0.0
    """What a prefix token found in the CPU tier is worth against one found in HBM, in [0, 1], in steps of 1/16:
    the share of its recompute time a load saves at the node's current link load (`signals/tier.py`)."""
    cpu_retention_s: float | None = None
    """Half-life of a prefix in the CPU tier, from the tier's size and the node's turnover, in steps of 2^(1/4);
    None: no tier, or its turnover is not measured yet."""
    decode_step_s: float = 0.0
    """The node's inter-token latency in steps of 2^(1/8) (`signals/token_time.py`); 0: not measured yet."""
    models: frozenset[str] | None = None
    """The model names a call may use here (base model names and LoRA adapters); None: not known, and then the node
    is eligible for every model (`eligibility.py`)."""
