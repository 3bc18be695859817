"""What one finished plan decided, as a plain record: who was admitted, interrupted or moved where, who kept their
place, and the value the solver ranked each change by.

Pure: built from the plan (`core/plan.py`, which carries the values), the actions the planner applied from it
(`core/planner.py`) and the holders after them, so nothing is evaluated again to tell it. The live driver logs it
(`web/decisions.py`) and keeps it in the session timelines (`web/timeline.py`).

Invariants: a session appears in at most one of `admitted`, `interrupted` and `moved`; `values` holds a value only
for sessions that appear in one of them, and `signals` names its components only when it holds any.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .actions import Action, Admit, Interrupt
from .model import NodeId
from .plan import Plan
from .value import Value


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


def plan_decision(
    job_id: int,
    plan: Plan,
    solve_s: float,
    outcome: str,
    actions: Sequence[Action],
    holders: Mapping[NodeId, int],
    nodes: Iterable[NodeId],
) -> PlanDecision:
    """The record of plan `job_id`: `actions` are what the planner applied of `plan`, `holders` the places held
    after them on each of `nodes`."""
    lost = {a.session_id: a.node for a in actions if isinstance(a, Interrupt)}
    given = {a.session_id: a.node for a in actions if isinstance(a, Admit)}
    moved = {s: (lost[s], given[s]) for s in lost.keys() & given.keys()}
    admitted = {s: node for s, node in given.items() if s not in moved}
    interrupted = {s: node for s, node in lost.items() if s not in moved}
    arrived: dict[str, int] = {}
    for target in given.values():
        arrived[target] = arrived.get(target, 0) + 1
    kept = {node: max(0, holders.get(node, 0) - arrived.get(node, 0)) for node in nodes}
    changed = {**{s: target for s, (_, target) in moved.items()}, **admitted, **interrupted}
    values = {s: value for s, value in plan.values.items() if s in changed}  # in the snapshot's order
    return PlanDecision(
        job_id,
        plan.method,
        plan.certified,
        round(solve_s * 1000, 3),
        outcome,
        plan.candidates,
        admitted,
        interrupted,
        moved,
        kept,
        plan.value_names if values else (),
        values,
    )
