"""Actions: what the core asks its driver to do after an event. Frozen values, carried out in order."""

from __future__ import annotations

from dataclasses import dataclass

from .model import NodeId, SessionId
from .snapshot import PlanJob


@dataclass(frozen=True, slots=True)
class Admit:
    """The session now holds a place on the node."""

    session_id: SessionId
    node: NodeId


@dataclass(frozen=True, slots=True)
class Interrupt:
    """The session lost its place on the node (it is in a tool; its next call waits for a new admission)."""

    session_id: SessionId
    node: NodeId


@dataclass(frozen=True, slots=True)
class Route:
    """Answer to an acquire: call the LLM on this node now."""

    session_id: SessionId
    node: NodeId
    side: bool = False
    """A side call (a model other than the session's main one, `eligibility.py`): it overlaps the session's calls on
    another node and neither takes nor moves the session's place."""


@dataclass(frozen=True, slots=True)
class Expired:
    """The session's lease ran out and it was closed."""

    session_id: SessionId


@dataclass(frozen=True, slots=True)
class StartPlan:
    """Solve `job` (in a worker thread, or inline) and send `PlanFinished(job.id, job.solve())` back."""

    job: PlanJob


@dataclass(frozen=True, slots=True)
class NodeDemoted:
    """The node refused too many calls in a row: nothing is placed or routed there until a probe finds it serving."""

    node: NodeId
    reason: str


@dataclass(frozen=True, slots=True)
class ProbeNode:
    """Send the demoted node a minimal model call and report `NodeProbed` (`fleet/probe.py`)."""

    node: NodeId


@dataclass(frozen=True, slots=True)
class NodeRestored:
    """A probe found the demoted node serving again: it is used again (if its scrapes say it is healthy)."""

    node: NodeId
    demoted_s: float
    """How long it was demoted."""


@dataclass(frozen=True, slots=True)
class NodeRetired:
    """A node drained with `NodeDrain(remove=True)` holds no session any more and was removed: stop watching it."""

    node: NodeId


Action = Admit | Interrupt | Route | Expired | StartPlan | NodeDemoted | ProbeNode | NodeRestored | NodeRetired
