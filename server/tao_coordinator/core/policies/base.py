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
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Protocol

from ..events import Event
from ..model import Node, NodeId, Session
from ..plan import Plan
from ..snapshot import Snapshot

FEEDS = frozenset({"node_load", "kv_events", "first_token"})


class Policy(Protocol):
    name: str
    plans: bool
    """True: sessions wait for the planner's admission. False: every call is routed at once by `route`."""

    def plan(self, snapshot: Snapshot) -> Plan: ...

    def route(self, session: Session, nodes: Mapping[NodeId, Node], now: float) -> NodeId | None:
        """`nodes` holds the healthy nodes only."""
        ...

    def observe(self, event: Event, now: float) -> None: ...


def policy_inputs(policy: Policy) -> frozenset[str]:
    inputs: frozenset[str] = getattr(policy, "inputs", frozenset())
    return inputs


def plan_interval(policy: Policy) -> float | None:
    interval: float | None = getattr(policy, "plan_interval_s", None)
    return interval


def policy_wake_times(policy: Policy, session: Session) -> Iterable[float]:
    wake_times = getattr(policy, "wake_times", None)
    if wake_times is None:
        return ()
    times: Iterable[float] = wake_times(session)
    return times
