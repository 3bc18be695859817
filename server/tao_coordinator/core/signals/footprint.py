"""Footprint t(i): the KV tokens the session occupies that it does not share with others (design §4).

t = max(context so far, announced next prompt) − shared prefix + expected output, where the expected output is the
session's mean completion so far (a default before its first call). It is both the last component of the value
(the solver prefers plans that fill capacity) and, rounded up to the capacity quantum, the session's weight.
A session that has announced nothing yet is charged `default_session_tokens`.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..model import NodeId, Session
from ..settings import CoreSettings
from .base import NO_NODES, SignalContext


def footprint_tokens(session: Session, settings: CoreSettings) -> int:
    total = max(session.context_tokens, session.expected_input_tokens)
    if total == 0 and session.completed_calls == 0:
        total = settings.default_session_tokens
    if session.completed_calls:
        expected_output = session.output_tokens_total // session.completed_calls
    else:
        expected_output = settings.default_output_tokens
    return max(0, total - session.context.shared_prefix_tokens) + expected_output


class Footprint:
    name = "footprint"
    node_dependent = False

    def base(self, session: Session, ctx: SignalContext) -> int:
        return footprint_tokens(session, ctx.settings)

    def on_nodes(self, session: Session, ctx: SignalContext) -> Mapping[NodeId, int]:
        return NO_NODES
