"""Workflow affinity: cache credit a session earns on the nodes where the other sessions of its workflow are.

Sub-agents and siblings of one workflow start their prompts from the same head (system prompt, tool catalog, or
the parent's context a sub-agent is spawned from). A node that holds that head for a relative holds it for the
session too, so the session's credit on node b is at least

    min(shared(i, r), presence(r, b)) over its relatives r,

floored to whole credit units, where
- `shared(i, r)` is what the two prompts have in common, never more: the common prefix of their KV block
  identities when both acquires sent them (`AgentSession.prompt_block_runs`; exact, and 0 when they share nothing), else
  the smaller of their declared `AgentProfile.shared_prefix_tokens` (0 when either declares none);
- `presence(r, b)` is what b's HBM holds of r's prefix: r's own credit tokens there, decayed as `cache_credit.py`
  counts them, or r's prompt when r is inside a call on b now (vLLM caches the blocks of a
  running request as it computes them).

Relatives: the sessions of the same workflow, `AgentProfile.workflow_id` when set, else the family a parent and the
sub-agents it spawned form (`parent_session_id`, followed up to the root). Closed relatives count: their blocks stay
cached until vLLM evicts them, which their decaying evidence says.

Invariants: the credit never exceeds what the session shares with a relative, nor what the relative's evidence
says; without relatives (or with the index absent) it is the session's own credit unchanged. A session's value then
depends on other sessions, which the value cache does not watch: for a session with relatives `changes_at` is
`ctx.now`, so the planner evaluates it again at every plan (only workflow members pay this).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from ..model import AgentSession, Node, NodeId, Phase, SessionId, shared_prefix_blocks
from .base import SignalContext
from .cache_credit import hbm_credit

_MAX_DEPTH = 64
"""Parent links followed at most this far: a cycle in client-sent ids must not loop."""


def shared_prefix_tokens(a: AgentSession, b: AgentSession, block_size: int) -> int:
    """Tokens at the head of both sessions' prompts (see the module docstring for the two sources)."""
    if a.prompt_block_runs and b.prompt_block_runs:
        return shared_prefix_blocks(a.prompt_block_runs, b.prompt_block_runs) * block_size
    return min(a.context.shared_prefix_tokens, b.context.shared_prefix_tokens)


def presence_tokens(relative: AgentSession, ctx: SignalContext, decay: bool) -> dict[NodeId, float]:
    """What each node of the context holds of `relative`'s prefix in HBM, in tokens (as its own credit counts them)."""
    held = hbm_credit(relative, ctx, decay)[0] if relative.evidence else {}
    node = ctx.nodes.get(relative.node) if relative.phase is Phase.IN_LLM and relative.node is not None else None
    if node is not None:
        held[node.id] = max(held.get(node.id, 0.0), float(_prompt_tokens(relative, node)))
    return held


def _prompt_tokens(session: AgentSession, node: Node) -> int:
    if session.prompt_block_runs:
        return sum(count for _, count in session.prompt_block_runs) * node.block_size
    return session.expected_input_tokens


@dataclass(frozen=True, slots=True)
class WorkflowIndex:
    """The sessions of a snapshot grouped by workflow."""

    members: Mapping[str, tuple[AgentSession, ...]]
    key_of: Mapping[SessionId, str]

    @classmethod
    def of(cls, sessions: Iterable[AgentSession]) -> WorkflowIndex:
        by_id = {session.id: session for session in sessions}
        keys = {session_id: _workflow_key(session, by_id) for session_id, session in by_id.items()}
        groups: dict[str, list[AgentSession]] = {}
        for session_id, key in keys.items():
            groups.setdefault(key, []).append(by_id[session_id])
        members = {key: tuple(group) for key, group in groups.items()}
        return cls(MappingProxyType(members), MappingProxyType(keys))

    def relatives(self, session: AgentSession) -> tuple[AgentSession, ...]:
        """The other sessions of `session`'s workflow, as the index saw them (not `session`'s own entry). A session
        the index has not seen (registered since) joins its parent's workflow, or its own `workflow_id`."""
        key = self.key_of.get(session.id)
        if key is None:
            parent = session.context.parent_session_id
            fallback = self.key_of.get(parent) if parent and not session.context.workflow_id else None
            key = fallback or _workflow_key(session, {})
        return tuple(member for member in self.members.get(key, ()) if member.id != session.id)

    def with_relatives(
        self,
        session: AgentSession,
        ctx: SignalContext,
        credits: dict[NodeId, int],
        earliest: float,
        *,
        decay: bool = True,
    ) -> tuple[dict[NodeId, int], float]:
        """`credits` (the session's own, in units) raised to what its relatives' caches give it; see the module."""
        relatives = self.relatives(session)
        if not relatives:
            return credits, earliest
        unit = ctx.settings.credit_unit_tokens
        raised = dict(credits)
        for relative in relatives:
            for node_id, held in presence_tokens(relative, ctx, decay).items():
                shared = shared_prefix_tokens(session, relative, ctx.nodes[node_id].block_size)
                units = int(min(shared, held) // unit)
                if units > raised.get(node_id, 0):
                    raised[node_id] = units
        return raised, ctx.now


def _workflow_key(session: AgentSession, by_id: Mapping[SessionId, AgentSession]) -> str:
    """`workflow_id` when set; else the root of the parent chain (a top-level session is its own root)."""
    current, seen = session, 0
    while not current.context.workflow_id and current.context.parent_session_id and seen < _MAX_DEPTH:
        parent = by_id.get(current.context.parent_session_id)
        if parent is None:
            return f"session:{current.context.parent_session_id}"
        current, seen = parent, seen + 1
    if current.context.workflow_id:
        return f"workflow:{current.context.workflow_id}"
    return f"session:{current.id}"


EMPTY = WorkflowIndex(MappingProxyType({}), MappingProxyType({}))
