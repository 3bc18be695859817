"""The lexicographic value of placing a session on a node, and its exact embedding into integers.

`ValueModel` evaluates an ordered list of signals: the value of session i on node b is the tuple of their
components, most significant first, compared lexicographically with no weights (docs/design.md#the-lexicographic-value).
Tuples form an ordered abelian group, so summing them over a plan and comparing sums is exact.

`LexEmbedding` maps such tuples to single integers, for searches that compare sums as numbers (today
`solver/greedy.py`'s per-node knapsack, in Python ints): a mixed-radix number whose digit j has radix S_j + 1, where
S_j bounds the sum of component j over every item of the instance. Invariant (proved in `tests/core/test_value.py`,
and by this argument): for any two sets of items A, B of one instance,
`sum_A tuple < sum_B tuple  ⇔  embed(sum_A) < embed(sum_B)`, because every lower digit's sum stays below its radix,
so no carry ever crosses a digit. With `int64=True` the largest possible sum must stay below `LIMIT` (2^61), so that
an int64 sentinel of −2^62 plus any value stays in int64; an instance past it raises `EmbeddingOverflow` rather than
risk a wrong order.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from .model import AgentSession, NodeId
from .signals.base import NO_NODES, Signal, SignalContext

Value = tuple[int, ...]

LIMIT = 1 << 61


class EmbeddingOverflow(ArithmeticError):
    """The instance's value sums do not fit below `LIMIT`."""


@dataclass(frozen=True, slots=True)
class SessionValue:
    base: Value
    """The value on any node not in `on_nodes`."""
    on_nodes: Mapping[NodeId, Value]
    until: float = math.inf
    """The value holds from the evaluation's `now` until this time, the session and its nodes unchanged."""


@dataclass(frozen=True, slots=True)
class SignalPart:
    """One signal's share of a session's value: its component on any node, the nodes where it differs, and until
    when both hold (the signal's `changes_at`)."""

    base: int
    on_nodes: Mapping[NodeId, int]
    until: float


class ValueModel:
    """An ordered list of signals; the order is the lexicographic priority. A session's value is assembled from one
    part per signal (`part`, `assemble`), so a caller that keeps parts may evaluate again only the signals whose
    inputs changed; `evaluate` is `assemble` of every part, evaluated now."""

    def __init__(self, signals: Sequence[Signal]) -> None:
        if not signals:
            raise ValueError("signals: a value needs at least one component")
        self.signals = tuple(signals)
        self._node_dependent = tuple((j, s) for j, s in enumerate(self.signals) if s.node_dependent)
        self.node_fields = tuple(sorted({field for signal in self.signals for field in signal.node_fields}))
        """Every `Node` attribute some signal reads: values may change when one of these does."""

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(signal.name for signal in self.signals)

    def evaluate(self, session: AgentSession, ctx: SignalContext) -> SessionValue:
        return self.assemble(self.parts(session, ctx))

    def parts(self, session: AgentSession, ctx: SignalContext) -> list[SignalPart]:
        """Every signal's part of the session's value in `ctx`, in order."""
        return [self.part(j, session, ctx) for j in range(len(self.signals))]

    def part(self, j: int, session: AgentSession, ctx: SignalContext) -> SignalPart:
        """Signal j's part of the session's value in `ctx`."""
        signal = self.signals[j]
        on_nodes = signal.on_nodes(session, ctx) if signal.node_dependent else NO_NODES
        return SignalPart(signal.base(session, ctx), on_nodes, signal.changes_at(session, ctx))

    def assemble(self, parts: Sequence[SignalPart]) -> SessionValue:
        """The value whose component j is `parts[j]`'s (one part per signal, in order)."""
        base = [part.base for part in parts]
        rows: dict[NodeId, list[int]] = {}
        for j, _ in self._node_dependent:
            for node, component in parts[j].on_nodes.items():
                row = rows.get(node)
                if row is None:
                    row = rows[node] = base.copy()
                row[j] = component
        until = min((part.until for part in parts), default=math.inf)
        return SessionValue(tuple(base), {node: tuple(row) for node, row in rows.items()}, until)


def add(a: Value, b: Value) -> Value:
    return tuple(x + y for x, y in zip(a, b, strict=True))


def total(values: Iterable[Value], width: int) -> Value:
    columns = tuple(map(sum, zip(*values, strict=True)))
    return columns or (0,) * width


class LexEmbedding:
    """Order-preserving map from value tuples to int, valid for sums over one instance's items."""

    def __init__(self, component_bounds: Sequence[int], int64: bool = True) -> None:
        """`component_bounds[j]` must bound the sum of component j over every item (each item at its largest).
        `int64=False` lifts the limit, for embeddings used with Python's unbounded ints only."""
        if any(bound < 0 for bound in component_bounds):
            raise ValueError("component_bounds: values must be non-negative")
        multipliers = [1] * len(component_bounds)
        for j in range(len(component_bounds) - 2, -1, -1):
            multipliers[j] = multipliers[j + 1] * (component_bounds[j + 1] + 1)
        largest = sum(b * m for b, m in zip(component_bounds, multipliers, strict=True))
        if int64 and largest >= LIMIT:
            raise EmbeddingOverflow(f"value sums reach {largest}, above the int64-safe limit {LIMIT}")
        self.multipliers = tuple(multipliers)
        self.largest = largest

    @classmethod
    def for_items(cls, item_values: Iterable[Iterable[Value]], width: int, int64: bool = True) -> LexEmbedding:
        """Bounds from each item's componentwise maximum over the values it can take."""
        bounds = [0] * width
        for values in item_values:
            per_item = [0] * width
            for value in values:
                if any(component < 0 for component in value):
                    raise ValueError(f"value {value}: components must be non-negative")
                per_item = [max(p, c) for p, c in zip(per_item, value, strict=True)]
            bounds = [b + p for b, p in zip(bounds, per_item, strict=True)]
        return cls(bounds, int64)

    def embed(self, value: Value) -> int:
        return sum(c * m for c, m in zip(value, self.multipliers, strict=True))
