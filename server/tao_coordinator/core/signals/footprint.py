"""Footprint t(i): the KV tokens the session occupies that it does not share with others
(docs/algorithm.md#the-value-of-a-placement).

t = max(context so far, announced next prompt) − shared prefix + expected output, where the expected output is the
session's mean completion so far (a default before its first call). Rounded up to the capacity quantum, it is the
session's weight. As a component of the value, TAO counts it only on the node where the session holds its place
(`HeldFootprint`); the published value counts it on every node (`Footprint`, the `tao-plain-footprint` ablation: the
solver prefers plans that fill capacity). A session that has announced nothing yet is charged
`default_session_tokens`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from ..model import AgentSession, NodeId
from ..settings import CoreSettings
from .base import NO_FIELDS, NO_NODES, SignalContext


def next_prompt_tokens(session: AgentSession, settings: CoreSettings) -> int:
    """The prompt of the session's next call: its context, or the prompt its acquire announced if longer; before
    anything is known, `default_session_tokens`."""
    total = max(session.context_tokens, session.expected_input_tokens)
    if total == 0 and session.completed_calls == 0:
        return settings.default_session_tokens
    return total


def mean_output_tokens(session: AgentSession, settings: CoreSettings) -> float:
    """The session's mean completion so far; `default_output_tokens` before its first call."""
    if session.completed_calls:
        return session.output_tokens_total / session.completed_calls
    return settings.default_output_tokens


def footprint_tokens(session: AgentSession, settings: CoreSettings) -> int:
    expected_output = int(mean_output_tokens(session, settings))
    return max(0, next_prompt_tokens(session, settings) - session.context.shared_prefix_tokens) + expected_output


class Footprint:
    name = "footprint"
    node_dependent = False
    node_fields = NO_FIELDS

    def base(self, session: AgentSession, ctx: SignalContext) -> int:
        return footprint_tokens(session, ctx.settings)

    def on_nodes(self, session: AgentSession, ctx: SignalContext) -> Mapping[NodeId, int]:
        return NO_NODES

    def changes_at(self, session: AgentSession, ctx: SignalContext) -> float:
        return math.inf


class HeldFootprint:
    """The footprint, in credit units, on the node where the session holds its place now; 0 elsewhere.

    Among plans equal in credit and readiness, the one that keeps the most resident tokens in place wins: what an
    interruption would evict. A session without a place has nothing to keep, so admitting it early earns nothing
    here (its readiness already says when it needs the GPU). Unlike the plain footprint, which is the same on every
    node and makes the tie-break a multiple subset-sum, this one is a knapsack per node, which the exact search
    bounds node by node.
    """

    name = "held_footprint"
    node_dependent = True
    node_fields = NO_FIELDS

    def base(self, session: AgentSession, ctx: SignalContext) -> int:
        return 0

    def on_nodes(self, session: AgentSession, ctx: SignalContext) -> Mapping[NodeId, int]:
        if session.node is None or session.node not in ctx.nodes:
            return NO_NODES
        units = footprint_tokens(session, ctx.settings) // ctx.settings.credit_unit_tokens
        return {session.node: units} if units > 0 else NO_NODES

    def changes_at(self, session: AgentSession, ctx: SignalContext) -> float:
        return math.inf
