"""What a simulated run measures, and the summary `tao sim` prints and writes.

Definitions (every time is virtual seconds unless named `_ms`):
- task latency: a top-level agent session's first request wanted → its last answer (a blocking child delays that
  answer; an async child that outlives its parent is not waited for). Chats (`workloads/model.py`) are not tasks:
  their one-call latency would pull the mean of hour-long agent sessions towards zero as the chat share grows, so
  task latency is over agent sessions only and chats have figures of their own (below);
- TTFT: a request wanted by the agent (after its tool or gap) → its first token. It includes the wait for admission
  under TAO and the queue inside vLLM for every policy, so policies compare on what the agent sees;
- engine TTFT: arrival at the node → first token (vLLM's own TTFT), for diagnosis;
- tool-end→first-token: TTFT restricted to requests that follow a tool call;
- decode throughput: completion tokens over the makespan; prefix hit rate: cached over prompt tokens, at each
  request's first admission (as vLLM counts);
- planner time: wall-clock milliseconds per solve — with fixed plan timing the only figures that differ between two
  runs of one seed (`--no-timing` writes them as null; with measured plan timing every figure may differ);
- planner counters: plans started (`plans`), and how each delivered plan fared when applied against the state of
  its delivery time — whole, cut after a valid prefix, or dropped (not even its first step valid). A run ends with
  no plan in flight, so `plans == plans_applied + plans_cut + plans_dropped`. Run files written before the counters
  existed read as None;
- credit half-life, per node at the end of the run: the h credit decayed with there (fitted or configured; null
  without decay), what the retention fit estimates whether or not it is used (null before enough evidence), and
  how many retention observations fed it (`core/signals/retention.py`). None in run files written before them;
- two models (runs with small-model nodes only; None otherwise, and left out of the JSON): side calls answered, their
  TTFT (mean, p99; they count in TTFT too), and calls answered by small-model nodes (side calls and sub-agents on
  the small model);
- chats (runs whose workload has chats only; None otherwise, and left out of the JSON): chats answered, their TTFT
  (mean, p99; they count in TTFT, throughput and every per-request figure too) and their latency (wanted → last
  token, mean);
- CPU tier: prompt tokens loaded from the nodes' CPU tiers, and the link time spent loading them (0 without a tier);
- recomputed tokens: of each call's computed prompt tokens (prompt − cached, at its first admission, as vLLM counts
  them), those within the prefix its prompt shares (by block identity) with its session's context after the previous
  call — KV some node computed for the session before and no longer had where the call ran (evicted, or the call
  went elsewhere: interrupted, moved). New tokens (the tool's result, a first prompt, a rewritten history) are never
  counted; a side call's prompt is not its session's context and is left out. On one node of the limit fleet
  (`limit_fleet.py`), which evicts nothing, it is 0. Counted apart too: the tokens of calls whose session a plan
  interrupted since its previous call (what interruptions cost; the rest is what vLLM evicted under holders, or a
  router's move);
- interruptions: places taken away by applied plans (`Interrupt` actions); 0 for policies that never plan.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from ..core.model import shared_prefix_blocks
from ..percentile import percentile
from .node import cacheable_blocks
from .prompt import Prompt
from .workloads.blocks import slice_runs

if TYPE_CHECKING:
    from ..core.model import BlockRun
    from ..core.planner import PlannerStats
    from .node import Finished


def mean(values: list[float]) -> float:
    return statistics.fmean(values) if values else math.nan


@dataclass
class Recorder:
    task_latencies: list[float] = field(default_factory=list)
    ttfts: list[float] = field(default_factory=list)
    engine_ttfts: list[float] = field(default_factory=list)
    tool_end_to_first_token: list[float] = field(default_factory=list)
    plan_ms: list[float] = field(default_factory=list)
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    requests: int = 0
    rejected: int = 0
    makespan: float = 0.0
    side_ttfts: list[float] = field(default_factory=list)
    side_calls: int = 0
    small_model_calls: int = 0
    chats: int = 0
    chat_ttfts: list[float] = field(default_factory=list)
    chat_latencies: list[float] = field(default_factory=list)
    calls_by_node_model: Counter[tuple[str, str]] = field(default_factory=Counter)
    """Calls submitted, by (node, model of the call): what the test of eligibility reads."""
    recomputed_tokens: int = 0
    recomputed_after_interruption_tokens: int = 0
    interruptions: int = 0


@dataclass(frozen=True)
class RunMetrics:
    latency_mean_s: float
    latency_p50_s: float
    latency_p99_s: float
    ttft_mean_s: float
    ttft_p50_s: float
    ttft_p99_s: float
    decode_throughput_tok_s: float
    tool_end_to_first_token_mean_s: float
    prefix_hit_rate: float
    preemptions: int
    makespan_s: float
    plan_mean_ms: float | None
    plan_p95_ms: float | None
    planner_overhead_share: float | None
    engine_ttft_mean_s: float
    requests: int
    rejected_requests: int
    plans: int
    plans_applied: int | None = None
    plans_cut: int | None = None
    plans_dropped: int | None = None
    readiness_horizon_mean_s: float | None = None
    """The mean readiness horizon H tool calls were forecast with (None: the policy reads no readiness)."""
    credit_half_life_s: dict[str, float | None] | None = None
    credit_half_life_fit_s: dict[str, float | None] | None = None
    retention_observations: dict[str, int] | None = None
    cpu_hit_tokens: int | None = None
    """Prompt tokens loaded from the nodes' CPU tiers instead of computed (None: run files from before tiers)."""
    pcie_load_s: float | None = None
    """Link time those loads took, summed over nodes (one TP rank's link: ranks load their slices in parallel)."""
    side_calls: int | None = None
    side_ttft_mean_s: float | None = None
    side_ttft_p99_s: float | None = None
    small_model_calls: int | None = None
    chats: int | None = None
    chat_ttft_mean_s: float | None = None
    chat_ttft_p99_s: float | None = None
    chat_latency_mean_s: float | None = None
    recomputed_tokens: int | None = None
    """Prompt tokens computed again (see the module docstring); None: run files from before it."""
    recomputed_after_interruption_tokens: int | None = None
    """Of those, the ones of calls whose session a plan interrupted since its previous call."""
    interruptions: int | None = None
    """Places applied plans took away; None: run files from before it."""


TWO_MODEL_FIELDS = ("side_calls", "side_ttft_mean_s", "side_ttft_p99_s", "small_model_calls")
"""Figures of two-model runs only: None, and absent from the JSON, in a run without small-model nodes."""


CHAT_FIELDS = ("chats", "chat_ttft_mean_s", "chat_ttft_p99_s", "chat_latency_mean_s")
"""Figures of runs whose workload has chats only: None, and absent from the JSON, otherwise."""
OPTIONAL_FIELDS = TWO_MODEL_FIELDS + CHAT_FIELDS


def recomputed_tokens(call: Finished, prompt: Prompt, context_before: tuple[BlockRun, ...], block_size: int) -> int:
    """The tokens `call` computed within the prefix its prompt shares with `context_before`, the KV blocks of its
    session's context after the previous call (see the module docstring): the shared prefix beyond what the node
    had cached. vLLM computes a prompt's last token whatever it has cached, so a hit ends at the last whole block
    before it, and so does the prefix counted here."""
    hittable = (call.prompt_tokens - 1) // block_size
    shared = min(shared_prefix_blocks(prompt.block_runs, context_before), hittable) * block_size
    return max(0, shared - call.cached_tokens)


def kv_blocks_after(call: Finished, runs: tuple[BlockRun, ...], block_size: int) -> tuple[BlockRun, ...]:
    """The blocks of `runs` (a call's prompt and output blocks) that hold KV once the call ended (`cacheable_blocks`:
    the last sampled token is never fed back)."""
    return slice_runs(runs, 0, cacheable_blocks(call.prompt_tokens, call.completion_tokens, block_size))


def with_chats(metrics: RunMetrics, recorder: Recorder) -> RunMetrics:
    """`metrics` with the chat figures of `recorder`."""
    return replace(
        metrics,
        chats=recorder.chats,
        chat_ttft_mean_s=mean(recorder.chat_ttfts),
        chat_ttft_p99_s=percentile(recorder.chat_ttfts, 0.99, method="linear"),
        chat_latency_mean_s=mean(recorder.chat_latencies),
    )


def with_side_calls(metrics: RunMetrics, recorder: Recorder) -> RunMetrics:
    """`metrics` with the two-model figures of `recorder`."""
    return replace(
        metrics,
        side_calls=recorder.side_calls,
        side_ttft_mean_s=mean(recorder.side_ttfts),
        side_ttft_p99_s=percentile(recorder.side_ttfts, 0.99, method="linear"),
        small_model_calls=recorder.small_model_calls,
    )


def summarize(
    recorder: Recorder, preemptions: int, timing: bool, planner: PlannerStats, horizon_mean_s: float | None = None
) -> RunMetrics:
    makespan = recorder.makespan
    plan_total_s = sum(recorder.plan_ms) / 1e3
    return RunMetrics(
        latency_mean_s=mean(recorder.task_latencies),
        latency_p50_s=percentile(recorder.task_latencies, 0.5, method="linear"),
        latency_p99_s=percentile(recorder.task_latencies, 0.99, method="linear"),
        ttft_mean_s=mean(recorder.ttfts),
        ttft_p50_s=percentile(recorder.ttfts, 0.5, method="linear"),
        ttft_p99_s=percentile(recorder.ttfts, 0.99, method="linear"),
        decode_throughput_tok_s=recorder.completion_tokens / makespan if makespan > 0 else 0.0,
        tool_end_to_first_token_mean_s=mean(recorder.tool_end_to_first_token),
        prefix_hit_rate=recorder.cached_tokens / recorder.prompt_tokens if recorder.prompt_tokens else 0.0,
        preemptions=preemptions,
        makespan_s=makespan,
        plan_mean_ms=mean(recorder.plan_ms) if timing and recorder.plan_ms else None,
        plan_p95_ms=percentile(recorder.plan_ms, 0.95, method="linear") if timing and recorder.plan_ms else None,
        planner_overhead_share=plan_total_s / makespan if timing and makespan > 0 else None,
        engine_ttft_mean_s=mean(recorder.engine_ttfts),
        requests=recorder.requests,
        rejected_requests=recorder.rejected,
        plans=len(recorder.plan_ms),
        plans_applied=planner.applied,
        plans_cut=planner.cut,
        plans_dropped=planner.dropped,
        readiness_horizon_mean_s=horizon_mean_s,
        recomputed_tokens=recorder.recomputed_tokens,
        recomputed_after_interruption_tokens=recorder.recomputed_after_interruption_tokens,
        interruptions=recorder.interruptions,
    )
