"""The design study's unified router cost (`reference/cost-model.md` §2), corrected, as a per-request router.

For worker w and request r, in seconds (lower is better); `unified_cost` is the formula, `CostModelPolicy` its inputs:

    Cost(w, r) = α_p · (ISL − HBM hits − CPU hits)                         prefill of what no tier holds
               + α_d · Σ_{r' on w} m'   +   α_d2 · Σ_{r' on w} (p'·m' + m'²/2)     decode, linear and KV token-time
               + CPU hits / (load rate · (1 − ρ))                          load over the link bandwidth left
               + α_ho · max(0, Q − Q_slack)²                              head-of-line, soft
               − α_wf · 1[w = last worker of r, or of its workflow] · e^(−λ · idle)
               − α_wf2 · ExpectedHits(w, r) / |expected_next_tools(r)|
    w* = argmin over the workers with free KV for the call (all of them if none has), or a softmax with `temperature`

Corrections to the study: the link term divides by the bandwidth *left*, (1 − ρ), not by ρ (cost-model.md §3); CPU
hits pay their load instead of their prefill (the study's `p_eff = ISL − HBM hits` charges both, while vLLM's
offloading connector loads them and computes only the rest); the decode sums run over m' = min(d̂, d̂_rem(r')), the
steps the new call shares with r', since under continuous batching an active call delays the new one only in the
steps both run (§3: the study's Σ d̂_rem overstates interference). Each shared step costs the new call α_d for r'
being in the batch and α_d2 per KV token r' holds then (p' its context so far): vLLM's step time is a floor plus a
per-sequence and a per-KV-token part (`vllm.md` §8.4), and summed over the shared steps the KV part is Justitia's KV
token-time `p·m + m²/2`. A worker whose free KV, `capacity · (1 − kv_usage)` at the last scrape, cannot hold the
call's uncached prompt, its loaded prompt and its expected output would preempt a running call (vLLM V1 preempts by
recompute, `vllm.md` §7.2): it is left out while another worker can hold the call.

Each α is fitted online from what the coordinator observes, a cold-start prior until then (TP=2 step-time model,
`vllm.md` §8.4–§8.6):
- α_p = 1 / `Node.rates.prefill_tokens_per_s`; without it the node's `LlmEnd`s, (prompt − cached) / ttft (an upper
  bound: ttft includes queueing); prior 15,000 tokens/s.
- α_d, α_d2: a ridge least-squares fit per node of `step = s0 + α_d · running + α_d2 · active KV tokens` to the
  node's `Node.rates.decode_step_s` at each scrape (running and `kv_usage · capacity` of the same scrape), or,
  without it, to each call's mean inter-token time at its `LlmEnd` against this router's own slot tracker. Three
  pseudo-observations of the prior model anchor the fit (the running/KV pairs of a fleet are nearly collinear).
- load rate = `Node.rates.load_tokens_per_s` (prior 190,000 tokens/s, PCIe Gen5 at 256 KiB/token); ρ an EWMA (time
  constant `link_time_constant_s`) of w/(1 + w), w = `Node.rates.kv_fetch_waiting` (a new load gets 1/(1 + w) of
  the link), and at least m/(1 + m) for the m loads this router sent that have not reached their first token.
- α_ho = α_p · mean uncached prompt of a call / Q_slack (times `queue_weight`): past the slack the penalty reaches
  the queue's linear prefill wait when Q − Q_slack = Q_slack; Q = the node's `waiting`.
- λ = ln 2 / `Node.credit_half_life_s` (the retention fitted on the node), else ln 2 / `half_life_s`.
- α_wf = α_p · the tokens returning there would find that the index does not already credit: r's context on its
  own last worker, its workflow's shared prefix on the workflow's last worker. With KV events it is mostly 0: the
  prefill term already prices what is cached; the bonus is a prior for what the index cannot see.
- α_wf2 = α_p · the uncredited shared prefix of r (system prompt and tool catalog); ExpectedHits(w, r) = Σ over r's
  expected next tools t of e^(−λ · age), age = time since a session last served by w started t (from `ToolStart`
  and the session's last `LlmEnd`): w recently served agents running those tools, so it likely holds their catalog.
The remaining output d̂ of a call: the label `expected_output_tokens` of its AgentProfile, else its session's mean
completion so far, else `default_output_tokens`; after its first token it shrinks by elapsed / step time. Indexes
per medium from `KvCacheEvent`: `GPU` is HBM, `CPU` the offloading tier; other media are kept and not priced.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from dataclasses import dataclass, field

from ..core.events import Close, Event, KvCacheEvent, LlmEnd, LlmFirstToken, ToolStart
from ..core.model import AgentSession, Node, NodeId, SessionId
from ..core.policies.base import Feed, Router
from .choice import pick
from .kv_index import KvIndex
from .load import OpenCalls, prompt_tokens
from .options import CostModelOptions
from .runs import skip
from .step_fit import StepFit

PREFILL_TOKENS_PER_S = 15_000.0
LOAD_TOKENS_PER_S = 190_000.0
LINK_FLOOR = 0.01
"""(1 − ρ) never drops below this: a saturated link still moves data, and the cost stays finite."""


@dataclass(frozen=True, slots=True)
class Terms:
    """What the cost multiplies, for one worker and request: tokens, KV token-steps, queue length, shares."""

    prefill_tokens: float
    decode_steps: float
    kv_token_time: float
    cpu_hit_tokens: float = 0.0
    queue: float = 0.0
    affinity: float = 0.0
    tools: float = 0.0


@dataclass(frozen=True, slots=True)
class Alphas:
    """The coefficients, in seconds per unit of the matching term (`load_tokens_per_s` a rate, ρ a share)."""

    prefill_s: float
    decode_s: float
    kv_s: float
    load_tokens_per_s: float = LOAD_TOKENS_PER_S
    link_busy: float = 0.0
    queue_s: float = 0.0
    queue_slack: float = 4.0
    affinity_s: float = 0.0
    tools_s: float = 0.0


def unified_cost(t: Terms, a: Alphas) -> float:
    return (
        a.prefill_s * t.prefill_tokens
        + a.decode_s * t.decode_steps
        + a.kv_s * t.kv_token_time
        + t.cpu_hit_tokens / (a.load_tokens_per_s * max(1.0 - a.link_busy, LINK_FLOOR))
        + a.queue_s * max(0.0, t.queue - a.queue_slack) ** 2
        - a.affinity_s * t.affinity
        - a.tools_s * t.tools
    )


@dataclass(slots=True)
class _Call:
    node: NodeId
    prompt: int
    output: float
    cpu_hit: int
    workflow: str
    first_token_at: float | None = None


@dataclass(slots=True)
class _NodeView:
    version: int = -1
    fit: StepFit = field(default_factory=StepFit)
    link_busy: float = 0.0
    link_at: float | None = None
    prefill_tokens_per_s: float = 0.0
    """From `LlmEnd`s, used while the node reports no prefill rate."""
    tools: dict[str, float] = field(default_factory=dict)
    """Per tool, when a session this node served last started it."""
    decode_from_ends: bool = True
    """The node reports no inter-token time: fit the step time to the calls' own (`LlmEnd`)."""


class CostModelPolicy(Router):
    name = "cost-model"
    inputs = frozenset({Feed.KV_EVENTS, Feed.NODE_LOAD, Feed.FIRST_TOKEN})

    def __init__(self, options: CostModelOptions | None = None, *, seed: int = 0) -> None:
        options = options or CostModelOptions()
        self.temperature = options.temperature
        self.queue_slack = options.queue_slack
        self.weights = (options.queue_weight, options.affinity_weight, options.tools_weight)
        self.default_output = options.default_output_tokens
        self.half_life_s = options.half_life_s
        self.link_tau = options.link_time_constant_s
        self.rng = random.Random(seed)
        self.index = KvIndex()
        self.calls: OpenCalls[_Call] = OpenCalls()
        self.last_end: dict[SessionId, tuple[NodeId, float]] = {}
        self.workflow_last: dict[str, tuple[NodeId, float]] = {}
        self.views: dict[NodeId, _NodeView] = {}
        self.new_tokens = 2048.0
        """EWMA of the uncached prompt tokens of a call (the α_ho scale)."""

    def prefill_s(self, node: Node) -> float:
        rate = node.rates.prefill_tokens_per_s or self._view(node.id).prefill_tokens_per_s
        return 1.0 / (rate or PREFILL_TOKENS_PER_S)

    def link_busy(self, node: Node, now: float) -> float:
        pending = sum(1 for c in self.calls.on(node.id) if c.cpu_hit and c.first_token_at is None)
        return max(self._view(node.id).link_busy, pending / (1 + pending))

    def hits(self, node: Node, session: AgentSession, isl: int) -> tuple[int, int]:
        """Prompt tokens held in HBM, and those held in the CPU tier right after them (vLLM's lookup order)."""
        runs = session.prompt_block_runs
        gpu_blocks = self.index.prefix(node.id, "GPU", runs)
        cpu_blocks = self.index.prefix(node.id, "CPU", skip(runs, gpu_blocks))
        hbm = min(isl, gpu_blocks * node.block_size)
        return hbm, min(isl - hbm, cpu_blocks * node.block_size)

    def terms(self, session: AgentSession, node: Node, now: float) -> tuple[Terms, Alphas, int]:
        """The cost's terms and coefficients on `node`, and the KV tokens the call needs there."""
        view = self._learn(node, now)
        isl = prompt_tokens(session)
        hbm, cpu = self.hits(node, session, isl)
        output = self.expected_output(session)
        step = node.rates.decode_step_s or view.fit.step_s(node.load.running, node.load.kv_usage * node.capacity_tokens)
        decode_steps = kv_time = 0.0
        for call in self.calls.on(node.id):
            done = 0.0 if call.first_token_at is None else (now - call.first_token_at) / step
            shared = min(output, max(0.0, call.output - done))
            decode_steps += shared
            kv_time += (call.prompt + done) * shared + shared * shared / 2
        alpha_p = self.prefill_s(node)
        decay = math.log(2) / (node.credit_half_life_s or self.half_life_s)
        affinity, affinity_tokens = 0.0, 0
        own = self.last_end.get(session.id)
        flow = self.workflow_last.get(session.context.workflow_id) if session.context.workflow_id else None
        if own is not None and own[0] == node.id:
            affinity, affinity_tokens = math.exp(-decay * (now - own[1])), session.context_tokens
        elif own is None and flow is not None and flow[0] == node.id:
            affinity, affinity_tokens = math.exp(-decay * (now - flow[1])), session.context.shared_prefix_tokens
        expected = session.context.expected_next_tools
        tools = sum(math.exp(-decay * (now - view.tools[t])) for t in expected if t in view.tools)
        queue_w, affinity_w, tools_w = self.weights
        _, per_seq, per_kv = view.fit.coefficients
        alphas = Alphas(
            prefill_s=alpha_p,
            decode_s=per_seq,
            kv_s=per_kv,
            load_tokens_per_s=node.rates.load_tokens_per_s or LOAD_TOKENS_PER_S,
            link_busy=self.link_busy(node, now),
            queue_s=queue_w * alpha_p * self.new_tokens / max(self.queue_slack, 1.0),
            queue_slack=self.queue_slack,
            affinity_s=affinity_w * alpha_p * max(0, affinity_tokens - hbm - cpu),
            tools_s=tools_w * alpha_p * max(0, session.context.shared_prefix_tokens - hbm - cpu),
        )
        found = Terms(
            isl - hbm - cpu, decode_steps, kv_time, cpu, node.load.waiting, affinity, tools / max(1, len(expected))
        )
        return found, alphas, isl - hbm + math.ceil(output)

    def expected_output(self, session: AgentSession) -> float:
        hint = session.context.labels.get("expected_output_tokens", "")
        if hint.isdigit() and int(hint) > 0:
            return float(hint)
        if session.completed_calls:
            return max(1.0, session.output_tokens_total / session.completed_calls)
        return self.default_output

    def route(self, session: AgentSession, nodes: Mapping[NodeId, Node], now: float) -> NodeId | None:
        if not nodes:
            return None
        ordered = [nodes[node_id] for node_id in sorted(nodes)]
        scored = [self.terms(session, node, now) for node in ordered]
        room = [k for k, node in enumerate(ordered) if scored[k][2] <= node.capacity_tokens * (1 - node.load.kv_usage)]
        candidates = room or list(range(len(ordered)))
        costs = [unified_cost(scored[k][0], scored[k][1]) for k in candidates]
        chosen = candidates[pick(costs, self.temperature, self.rng)]
        isl = prompt_tokens(session)
        cpu_hit = int(scored[chosen][0].cpu_hit_tokens)
        output = self.expected_output(session)
        self.calls.book(session.id, _Call(ordered[chosen].id, isl, output, cpu_hit, session.context.workflow_id))
        return ordered[chosen].id

    def observe(self, event: Event, now: float) -> None:
        if isinstance(event, KvCacheEvent):
            self.index.observe(event)
        elif isinstance(event, LlmFirstToken):
            call = self.calls.at(event.session_id, event.node_id)
            if call is not None:
                call.first_token_at = now
        elif isinstance(event, LlmEnd):
            self._end(event, now)
        elif isinstance(event, ToolStart):
            last = self.last_end.get(event.session_id)
            if last is not None:
                self._view(last[0]).tools[event.tool] = now
        elif isinstance(event, Close):
            self.calls.end(event.session_id)
            self.last_end.pop(event.session_id, None)

    def _end(self, event: LlmEnd, now: float) -> None:
        call = self.calls.end(event.session_id)
        self.last_end[event.session_id] = (event.node_id, now)
        if call is not None and call.workflow:
            self.workflow_last[call.workflow] = (event.node_id, now)
        view = self._view(event.node_id)
        if event.prompt_tokens is not None:
            new = event.prompt_tokens - (event.cached_tokens or 0)
            self.new_tokens = 0.9 * self.new_tokens + 0.1 * new
            if event.ttft_s and new > 0:
                rate = new / event.ttft_s
                view.prefill_tokens_per_s = (
                    rate if not view.prefill_tokens_per_s else (0.7 * view.prefill_tokens_per_s + 0.3 * rate)
                )
        tokens = event.completion_tokens or 0
        if view.decode_from_ends and tokens > 1 and event.duration_s and event.ttft_s is not None:
            batch = self.calls.on(event.node_id)
            kv = sum(c.prompt for c in batch) + (event.prompt_tokens or 0) + tokens
            view.fit.add(len(batch) + 1, kv, (event.duration_s - event.ttft_s) / (tokens - 1))

    def _learn(self, node: Node, now: float) -> _NodeView:
        """Fold a scrape the policy has not seen yet into the node's fits."""
        view = self._view(node.id)
        if node.version == view.version:
            return view
        view.version = node.version
        view.decode_from_ends = node.rates.decode_step_s <= 0
        if not view.decode_from_ends:
            view.fit.add(node.load.running, node.load.kv_usage * node.capacity_tokens, node.rates.decode_step_s)
        waiting = node.rates.kv_fetch_waiting
        busy = waiting / (1 + waiting)
        if view.link_at is None:
            view.link_busy = busy
        else:
            keep = math.exp(-max(0.0, now - view.link_at) / self.link_tau)
            view.link_busy = keep * view.link_busy + (1 - keep) * busy
        view.link_at = now
        return view

    def _view(self, node_id: NodeId) -> _NodeView:
        return self.views.setdefault(node_id, _NodeView())
