"""The live service's current core: the `Coordinator`, the `ToolHistory` it learns into, and the decision log of
its policy — replaced together, whole, when a replica takes over (`replica.py`).

Invariants: the three always belong to one another (`install` builds them at once); every reader goes through the
slot at the time it reads, never through a core it kept, so a replaced core is read by no one.
"""

from __future__ import annotations

from ..config import CoordinatorConfig
from ..core.coordinator import Coordinator
from ..core.forecast import ToolHistory
from ..core.policies import make_policy
from .decisions import DecisionLog


class CoreSlot:
    def __init__(self, config: CoordinatorConfig, history: ToolHistory) -> None:
        self._config = config
        self.install(history)

    def install(self, history: ToolHistory) -> None:
        """A new core (planning off the event loop) learning into `history`, with its decision log."""
        policy = make_policy(self._config.policy.name)
        self.history = history
        """What the core learned of tool durations (it adds every tool end): read to count and persist it."""
        self.coordinator = Coordinator(policy, self._config.core, history=history, inline_planning=False)
        self.decisions = DecisionLog("fast-admission" if policy.plans else "router", self._config.core)
