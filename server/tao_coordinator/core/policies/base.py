"""The interface every scheduling policy implements: TAO, its ablations and the baselines alike.

A policy answers two questions. `plan(snapshot)`: which sessions hold a place on which node (admission control).
`route(session, nodes, now)`: where an LLM call goes right now — an admission policy answers with the session's
place (None: wait for a plan), a per-request router picks a node for every call and never plans (`plans = False`).
`route` sees the session as of the acquire being answered (its announced prompt size and prompt blocks). `observe`
sees every accepted event, for routers that keep load or cache estimates; it runs on the event loop, never
concurrently with `route`.

`plan` runs on a frozen snapshot, in a worker thread in the live service, and at most one plan is in flight. TAO's
plan is pure. A session-level baseline may keep bookkeeping that only its own plans read and write (ThunderAgent's
scheduler clock and marks); what `observe` writes and `plan` reads must be point lookups that tolerate a concurrent
update (Continuum's tool means).

Optional attributes, read through the helpers below so a policy that lacks them behaves as before:

- `inputs: frozenset[str]` — which router feeds the driver must send: `"node_load"` (`NodeUpdate`s carrying the
  running/waiting/KV-usage figures of a `/metrics` scrape before a call is routed), `"kv_events"` (every
  `KvCacheEvent`), `"first_token"` (`LlmFirstToken`). Signals a policy's real system does not see are not sent.
- `plan_interval_s: float | None` — plan at least this often while sessions live, even when nobody waits (a
  periodic scheduler that may interrupt holders).
- `wake_times(session) -> Iterable[float]` — times at which time alone changes the policy's view of `session`.
- `admit(session, nodes, room, settings, now) -> NodeId | None` — asked when `route` said "wait": a node to admit
  the session on at once, without a plan. `room` is each healthy node's plannable capacity minus what its holders
  hold now, in capacity cells; the session then holds a place there with its whole footprint, as if a plan had
  admitted it, so the planner's accounting (`FleetState.used_cells`) stays what it always is.
- `node_target(previous, node, settings, now, pool_tokens) -> float | None` — the utilisation target of `node` as
  just observed (`previous`: the node as known before, or None); None means the settings' target. Runs on every
  `NodeUpdate`; `pool_tokens` is the footprint of every session in the waiting pool (without a place).
- `cache_kept(node_id, asked_tokens, kept_tokens, now)` — at the end of a call by a session that held its place on
  the node since its previous call there: how much of that call's context the node was asked to keep (whole blocks,
  as vLLM can hit them) and how much the call found cached. Less kept than asked: vLLM evicted a cache TAO reserved.
- `readiness_rule: ReadinessRule | None` — how running tools' readiness is forecast (`forecast/forecaster.py`):
  `forecast`, or the binary `bound` and `paper` rules. None (the default): the policy reads no readiness, so no
  schedule is built and time alone wakes nothing for it.
- `expected_tools: bool` — a tool with too little history of its own is forecast from that of the tools the
  session's last acquire announced (`expected_next_tools`); False (the default) ignores the announcement.
- `readiness_horizon: "adaptive" | "fixed"` — whether the `forecast` rule's horizon follows load
  (`forecast/horizon.py`) or stays at `readiness_horizon_s` (the default).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Protocol

from ..events import Event
from ..forecast import ReadinessRule
from ..model import AgentSession, Node, NodeId
from ..plan import Plan
from ..settings import CoreSettings
from ..snapshot import Snapshot

FEEDS = frozenset({"node_load", "kv_events", "first_token"})


class Policy(Protocol):
    name: str
    plans: bool
    """True: sessions wait for the planner's admission. False: every call is routed at once by `route`."""

    def plan(self, snapshot: Snapshot) -> Plan: ...

    def route(self, session: AgentSession, nodes: Mapping[NodeId, Node], now: float) -> NodeId | None:
        """`nodes` holds the healthy nodes only."""
        ...

    def observe(self, event: Event, now: float) -> None: ...


def policy_inputs(policy: Policy) -> frozenset[str]:
    inputs: frozenset[str] = getattr(policy, "inputs", frozenset())
    return inputs


def plan_interval(policy: Policy) -> float | None:
    interval: float | None = getattr(policy, "plan_interval_s", None)
    return interval


def policy_wake_times(policy: Policy, session: AgentSession) -> Iterable[float]:
    wake_times = getattr(policy, "wake_times", None)
    if wake_times is None:
        return ()
    times: Iterable[float] = wake_times(session)
    return times


def admits_on_room(policy: Policy) -> bool:
    return getattr(policy, "admit", None) is not None


def policy_admit(
    policy: Policy,
    session: AgentSession,
    nodes: Mapping[NodeId, Node],
    room: Mapping[NodeId, int],
    settings: CoreSettings,
    now: float,
) -> NodeId | None:
    admit = getattr(policy, "admit", None)
    if admit is None:
        return None
    node: NodeId | None = admit(session, nodes, room, settings, now)
    return node


def policy_node_target(
    policy: Policy, previous: Node | None, node: Node, settings: CoreSettings, now: float, pool_tokens: int
) -> float | None:
    node_target = getattr(policy, "node_target", None)
    if node_target is None:
        return None
    target: float | None = node_target(previous, node, settings, now, pool_tokens)
    return target


def policy_cache_kept(policy: Policy, node_id: NodeId, asked_tokens: int, kept_tokens: int, now: float) -> None:
    cache_kept = getattr(policy, "cache_kept", None)
    if cache_kept is not None:
        cache_kept(node_id, asked_tokens, kept_tokens, now)


def policy_readiness_rule(policy: Policy) -> ReadinessRule | None:
    rule: ReadinessRule | None = getattr(policy, "readiness_rule", None)
    return rule


def reads_expected_tools(policy: Policy) -> bool:
    """Whether a tool's forecast may borrow the history of the tools the session's last acquire announced."""
    return bool(getattr(policy, "expected_tools", False))


def adapts_horizon(policy: Policy) -> bool:
    return bool(getattr(policy, "readiness_horizon", "fixed") == "adaptive")
