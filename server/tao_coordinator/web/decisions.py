"""The decision log (logger `tao.decisions`): one line per plan that changed a place, per fast admission, per routed
call.

A plan's line says, per node, which sessions it admitted, interrupted and moved there (from where) and how many
holders it kept; the solver's method, whether it is certified, how long the solve took and whether the plan was
applied whole, cut or dropped (`core/planner.py`); and, when the policy has a value model, the value tuple of each
session it admitted, moved or interrupted — on the node it was given, or on the node it lost — with the names of the
components (`core/value.py`). The values are evaluated again here from the plan's snapshot, as the solver saw them,
only for the sessions that changed. A plan that changed nothing is logged at DEBUG.

With `--log-format json` the line is the decision's JSON object (`logs.py`); in text, a compact summary. Routes of
a session that already holds its place are logged at DEBUG: nothing was decided.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..core.actions import Action, Admit, Interrupt, Route
from ..core.model import AgentSession
from ..core.plan import Plan
from ..core.policies.base import Policy
from ..core.settings import CoreSettings
from ..core.signals.base import SignalContext
from ..core.signals.footprint import footprint_tokens
from ..core.signals.workflow import WorkflowIndex
from ..core.snapshot import PlanJob
from ..core.state import FleetState
from ..core.value import Value, ValueModel

log = logging.getLogger("tao.decisions")


@dataclass(frozen=True)
class PlanDecision:
    """What one applied plan changed, and why: the plain record both the log line and the timelines are made of."""

    plan: int
    method: str
    certified: bool
    solve_ms: float
    outcome: str
    """applied (whole), cut (a prefix), or dropped (not even its first step was still valid)."""
    candidates: int
    admitted: dict[str, str] = field(default_factory=dict)
    interrupted: dict[str, str] = field(default_factory=dict)
    """AgentSession → the node it lost."""
    moved: dict[str, tuple[str, str]] = field(default_factory=dict)
    """AgentSession → (from, to)."""
    kept: dict[str, int] = field(default_factory=dict)
    """Node → holders that kept their place there."""
    signals: tuple[str, ...] = ()
    values: dict[str, Value] = field(default_factory=dict)

    @property
    def changed(self) -> bool:
        return bool(self.admitted or self.interrupted or self.moved)

    def record(self) -> dict[str, Any]:
        nodes: dict[str, dict[str, Any]] = {}

        def node(name: str) -> dict[str, Any]:
            return nodes.setdefault(name, {"admitted": [], "interrupted": [], "moved": [], "kept": 0})

        for session_id, target in self.admitted.items():
            node(target)["admitted"].append(session_id)
        for session_id, lost in self.interrupted.items():
            node(lost)["interrupted"].append(session_id)
        for session_id, (source, target) in self.moved.items():
            node(target)["moved"].append({"session": session_id, "from": source})
        for name, kept in self.kept.items():
            node(name)["kept"] = kept
        return {
            "decision": "plan",
            "plan": self.plan,
            "method": self.method,
            "certified": self.certified,
            "solve_ms": self.solve_ms,
            "outcome": self.outcome,
            "candidates": self.candidates,
            "nodes": dict(sorted(nodes.items())),
            "signals": list(self.signals),
            "values": {session_id: list(value) for session_id, value in self.values.items()},
        }

    def text(self) -> str:
        head = f"plan {self.plan}: {self.method}{', certified' if self.certified else ''}, {self.solve_ms:.1f} ms, "
        head += f"{self.outcome}, {self.candidates} candidates"
        parts = []
        for name, entry in self.record()["nodes"].items():
            changes = [f"+{s}{self._value(s)}" for s in entry["admitted"]]
            changes += [f"-{s}{self._value(s)}" for s in entry["interrupted"]]
            changes += [f"{m['session']}<-{m['from']}{self._value(m['session'])}" for m in entry["moved"]]
            changes.append(f"kept {entry['kept']}")
            parts.append(f"{name}: {' '.join(changes)}")
        signals = f" | values ({', '.join(self.signals)})" if self.values else ""
        return " | ".join([head, *parts]) + signals

    def _value(self, session_id: str) -> str:
        value = self.values.get(session_id)
        return "" if value is None else str(list(value))


class DecisionLog:
    def __init__(self, policy: Policy, settings: CoreSettings) -> None:
        values = getattr(policy, "values", None)
        self.values = values if isinstance(values, ValueModel) else None
        self.settings = settings
        self.acquire_admission = "fast-admission" if policy.plans else "router"

    def plan(
        self, job: PlanJob, plan: Plan, solve_s: float, outcome: str, actions: Sequence[Action], state: FleetState
    ) -> PlanDecision:
        lost = {a.session_id: a.node for a in actions if isinstance(a, Interrupt)}
        given = {a.session_id: a.node for a in actions if isinstance(a, Admit)}
        moved = {s: (lost[s], given[s]) for s in lost.keys() & given.keys()}
        admitted = {s: node for s, node in given.items() if s not in moved}
        interrupted = {s: node for s, node in lost.items() if s not in moved}
        arrived: dict[str, int] = {}
        for target in given.values():
            arrived[target] = arrived.get(target, 0) + 1
        kept = {node: max(0, state.holders.get(node, 0) - arrived.get(node, 0)) for node in state.nodes}
        changed = {**{s: target for s, (_, target) in moved.items()}, **admitted, **interrupted}
        values = self._values(job, changed) if changed and self.values is not None else {}
        decision = PlanDecision(
            job.id,
            plan.method,
            plan.certified,
            round(solve_s * 1000, 3),
            outcome,
            plan.candidates,
            admitted,
            interrupted,
            moved,
            kept,
            self.values.names if values and self.values is not None else (),
            values,
        )
        level = logging.INFO if decision.changed else logging.DEBUG
        if log.isEnabledFor(level):
            log.log(level, decision.text(), extra={"decision": decision.record()})
        return decision

    def _values(self, job: PlanJob, changed: dict[str, str]) -> dict[str, Value]:
        """Each changed session's value on its node, as the solver saw it (the snapshot's session and nodes)."""
        assert self.values is not None
        snapshot = job.snapshot
        healthy = {node.id: node for node in snapshot.nodes if node.healthy}
        ctx = SignalContext(snapshot.now, snapshot.settings, healthy, WorkflowIndex.of(snapshot.sessions))
        values: dict[str, Value] = {}
        for session in snapshot.sessions:
            if (node := changed.get(session.id)) is not None:
                value = self.values.evaluate(session, ctx)
                values[session.id] = value.on_nodes.get(node, value.base)
        return values

    def acquired(self, before: AgentSession | None, actions: Sequence[Action], state: FleetState) -> None:
        """An acquire answered at once: a fast admission (or a router's choice) for a session without a place."""
        if before is None:
            return
        node = next((a.node for a in actions if isinstance(a, Route) and a.session_id == before.id), None)
        if node is None:
            return
        if before.node is not None:
            if log.isEnabledFor(logging.DEBUG):
                log.debug(f"routed: {before.id} -> {node} (its place)", extra={"decision": _route(before, node)})
            return
        if not log.isEnabledFor(logging.INFO):
            return
        held, session = state.nodes.get(node), state.sessions.get(before.id, before)
        record = {
            "decision": self.acquire_admission,
            "session": before.id,
            "node": node,
            "footprint_tokens": footprint_tokens(session, self.settings),
            "credit_tokens": max((e.tokens for e in before.evidence if e.node == node and e.tier == "GPU"), default=0),
            "node_load": 0 if held is None else held.running + held.waiting,
        }
        log.info(
            f"{self.acquire_admission}: {before.id} -> {node} (footprint {record['footprint_tokens']:,} tokens, "
            f"credit {record['credit_tokens']:,}, load {record['node_load']})",
            extra={"decision": record},
        )


def _route(session: AgentSession, node: str) -> dict[str, Any]:
    return {"decision": "route", "session": session.id, "node": node}
