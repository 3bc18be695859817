"""The decision log (logger `tao.decisions`): one line per plan that changed a place, per fast admission, per routed
call.

A plan's line is its record (`core/decision.py`): per node, which sessions it admitted, interrupted and moved there
(from where) and how many holders it kept; the solver's method, whether it is certified, how long the solve took and
whether the plan was applied whole, cut or dropped (`core/planner.py`); and, when the policy has a value model, the
value tuple of each session it admitted, moved or interrupted — on the node it was given, or on the node it lost —
with the names of the components (`core/value.py`), as the plan carries them. A plan that changed nothing is logged
at DEBUG.

With `--log-format json` the line is the decision's JSON object (`logs.py`); in text, a compact summary. Routes of
a session that already holds its place are logged at DEBUG: nothing was decided.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..core.actions import Action, Route
from ..core.decision import PlanDecision, plan_decision
from ..core.model import AgentSession, Node
from ..core.plan import Plan
from ..core.settings import CoreSettings
from ..core.signals.footprint import footprint_tokens

log = logging.getLogger("tao.decisions")


class DecisionLog:
    """Logs what the core decided: plans (`core/decision.py` builds their record) and admissions at an acquire."""

    def __init__(self, acquire_admission: str, settings: CoreSettings) -> None:
        self.settings = settings
        self.acquire_admission = acquire_admission
        """What an acquire that is placed at once is called: `fast-admission` (a planning policy) or `router`."""

    def plan(
        self,
        job_id: int,
        plan: Plan,
        solve_s: float,
        outcome: str,
        actions: Sequence[Action],
        holders: Mapping[str, int],
        nodes: Iterable[str],
    ) -> PlanDecision:
        decision = plan_decision(job_id, plan, solve_s, outcome, actions, holders, nodes)
        level = logging.INFO if decision.changed else logging.DEBUG
        if log.isEnabledFor(level):
            log.log(level, decision.text(), extra={"decision": decision.record()})
        return decision

    def acquired(
        self,
        before: AgentSession | None,
        actions: Sequence[Action],
        sessions: Mapping[str, AgentSession],
        nodes: Mapping[str, Node],
    ) -> None:
        """An acquire answered at once: a fast admission (or a router's choice) for a session without a place."""
        if before is None:
            return
        # a side call (another model, `core/eligibility.py`) places nothing: no decision of the session's place
        node = next(
            (a.node for a in actions if isinstance(a, Route) and not a.side and a.session_id == before.id), None
        )
        if node is None:
            return
        if before.node is not None:
            if log.isEnabledFor(logging.DEBUG):
                log.debug(f"routed: {before.id} -> {node} (its place)", extra={"decision": _route(before, node)})
            return
        if not log.isEnabledFor(logging.INFO):
            return
        held, session = nodes.get(node), sessions.get(before.id, before)
        record = {
            "decision": self.acquire_admission,
            "session": before.id,
            "node": node,
            "footprint_tokens": footprint_tokens(session, self.settings),
            "credit_tokens": max((e.tokens for e in before.evidence if e.node == node and e.tier == "GPU"), default=0),
            "node_load": 0 if held is None else held.load.running + held.load.waiting,
        }
        log.info(
            f"{self.acquire_admission}: {before.id} -> {node} (footprint {record['footprint_tokens']:,} tokens, "
            f"credit {record['credit_tokens']:,}, load {record['node_load']})",
            extra={"decision": record},
        )


def _route(session: AgentSession, node: str) -> dict[str, Any]:
    return {"decision": "route", "session": session.id, "node": node}
