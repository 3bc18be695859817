"""Per-node speeds measured from the cumulative counters of successive scrapes (`EngineCounters`).

Each rate is a ratio of counter increments — prompt tokens computed over prefill seconds, tokens loaded from the CPU
tier over load seconds, inter-token seconds over intervals, new KV tokens over wall seconds — so it needs no model
of the node. Increments are pooled until the denominator reaches a minimum (one second of prefill, of loading, of
wall time; a hundred intervals), so a burst of 50 ms scrapes does not chase noise, then folded into an exponential
average that gives the newest pool `WEIGHT` of the say. The gauge of requests waiting for a load is averaged over
time instead (`QUEUE_TIME_CONSTANT_S`).

Invariants: a rate is 0 until its first pool is complete and positive after; a counter that goes down (the node
restarted) starts the node's pools afresh without touching its averages; the same scrapes in the same order give the
same rates (time comes in as `now`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from .events import EngineCounters
from .model import NodeId, NodeRates

WEIGHT = 0.3
"""Share of an exponential average the newest complete pool gets."""

QUEUE_TIME_CONSTANT_S = 5.0
"""Time constant of the average of the requests waiting for a CPU→GPU load: a gauge read every 50 ms jumps with
every load that starts or ends; the link's load is what it shows over seconds."""


@dataclass(slots=True)
class _Pool:
    minimum: float
    numerator: float = 0.0
    denominator: float = 0.0
    average: float = 0.0

    def add(self, numerator: float, denominator: float) -> None:
        self.numerator += numerator
        self.denominator += denominator
        if self.denominator < self.minimum:
            return
        rate = self.numerator / self.denominator
        self.average = rate if self.average == 0.0 else (1 - WEIGHT) * self.average + WEIGHT * rate
        self.numerator = self.denominator = 0.0


@dataclass(slots=True)
class _NodeFit:
    counters: EngineCounters
    at: float
    prefill: _Pool = field(default_factory=lambda: _Pool(minimum=1.0))
    load: _Pool = field(default_factory=lambda: _Pool(minimum=1.0))
    decode: _Pool = field(default_factory=lambda: _Pool(minimum=100.0))
    new_kv: _Pool = field(default_factory=lambda: _Pool(minimum=1.0))


class NodeRateFit:
    def __init__(self) -> None:
        self._nodes: dict[NodeId, _NodeFit] = {}

    def observe(self, node: NodeId, counters: EngineCounters, now: float, previous: NodeRates) -> NodeRates:
        """The node's rates after a scrape at `now`; `previous` is what the node showed before."""
        fit = self._nodes.get(node)
        if fit is None or _went_back(fit.counters, counters) or now < fit.at:
            self._nodes[node] = _NodeFit(counters, now)
            return replace(previous, kv_fetch_waiting=counters.kv_fetch_waiting)
        last = fit.counters
        fit.prefill.add(
            counters.prefill_tokens_computed - last.prefill_tokens_computed,
            counters.prefill_seconds - last.prefill_seconds,
        )
        fit.load.add(
            counters.offload_load_tokens - last.offload_load_tokens,
            counters.offload_load_seconds - last.offload_load_seconds,
        )
        fit.decode.add(counters.decode_seconds - last.decode_seconds, counters.decode_tokens - last.decode_tokens)
        new_tokens = counters.prefill_tokens_computed + counters.generation_tokens
        fit.new_kv.add(new_tokens - last.prefill_tokens_computed - last.generation_tokens, now - fit.at)
        share = 1.0 - math.exp(-(now - fit.at) / QUEUE_TIME_CONSTANT_S)
        queue = previous.kv_fetch_queue + share * (counters.kv_fetch_waiting - previous.kv_fetch_queue)
        fit.counters, fit.at = counters, now
        return NodeRates(
            prefill_tokens_per_s=fit.prefill.average,
            decode_step_s=fit.decode.average,
            load_tokens_per_s=fit.load.average,
            new_kv_tokens_per_s=fit.new_kv.average,
            kv_fetch_waiting=counters.kv_fetch_waiting,
            kv_fetch_queue=queue,
        )

    def forget(self, node: NodeId) -> None:
        self._nodes.pop(node, None)


def _went_back(last: EngineCounters, now: EngineCounters) -> bool:
    return (
        now.prefill_tokens_computed < last.prefill_tokens_computed
        or now.prefill_seconds < last.prefill_seconds
        or now.decode_tokens < last.decode_tokens
        or now.decode_seconds < last.decode_seconds
        or now.generation_tokens < last.generation_tokens
        or now.offload_load_tokens < last.offload_load_tokens
        or now.offload_load_seconds < last.offload_load_seconds
    )
