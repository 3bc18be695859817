"""`tao-survival`: TAO whose readiness comes from each tool's empirical return probability — a prototype.

Why: TAO's readiness asks whether a tool's *predicted* remaining time is within H = 1 s, and the prediction is an
empirical-Bernstein upper confidence bound. On mini-swe-agent (measured while prototyping) that bound sits at a median
2.9 s while the median tool returns in 0.3 s: 69 % of the calls return within H, yet 0.2 % are predicted to, so
readiness is 0 for nearly every session in a tool and carries no information (`tao-no-readiness` runs the same).

What (design §9, papers.md §5 idea 1): a session in a tool is ready when, among the past durations of that tool
longer than the time the call has already run (a), at least `threshold` ended within a + H —
`P(T ≤ a + H | T > a) ≥ threshold` from the per-tool empirical distribution (the global one below
`min_samples`; not ready without history). A `sleep N` hint longer than a + H keeps it not ready. Everything else is
TAO. The history is the policy's own, from the `ToolStart`/`ToolEnd` events it observes (plans only read it).
Readiness is evaluated at every plan; no extra wake-ups are scheduled for its flips.
"""

from __future__ import annotations

from bisect import bisect_right, insort
from collections import deque
from collections.abc import Mapping

from ..events import Event, ToolEnd, ToolStart
from ..model import NodeId, Phase, RunningTool, Session
from ..signals import CacheCredit, HeldFootprint, Stability
from ..signals.base import NO_NODES, SignalContext
from .tao import TaoPolicy


class ToolDurations:
    """Sorted recent durations per tool and over all tools (the newest `window` of each)."""

    def __init__(self, window: int = 1000) -> None:
        self.window = window
        self._order: dict[str, deque[float]] = {}
        self._sorted: dict[str, list[float]] = {}

    def add(self, tool: str, duration: float) -> None:
        for key in (tool, ""):
            order = self._order.setdefault(key, deque())
            ranked = self._sorted.setdefault(key, [])
            order.append(duration)
            insort(ranked, duration)
            if len(order) > self.window:
                ranked.pop(bisect_right(ranked, order.popleft()) - 1)

    def return_probability(self, tool: str, elapsed: float, horizon: float, min_samples: int) -> float | None:
        """P(T ≤ elapsed + horizon | T > elapsed) from the tool's history, else the global one; None: no data."""
        for key in (tool, ""):
            ranked = self._sorted.get(key, [])
            longer = len(ranked) - bisect_right(ranked, elapsed)
            if longer >= min_samples:
                within = bisect_right(ranked, elapsed + horizon) - bisect_right(ranked, elapsed)
                return within / longer
        return None


class SurvivalReadiness:
    name = "readiness"
    node_dependent = False

    def __init__(self, durations: ToolDurations, threshold: float = 0.5, min_samples: int = 3) -> None:
        self.durations = durations
        self.threshold = threshold
        self.min_samples = min_samples

    def base(self, session: Session, ctx: SignalContext) -> int:
        if session.phase is not Phase.IN_TOOL:
            return int(session.phase in (Phase.WAITING, Phase.ADMITTED, Phase.READY))
        return int(all(self._ready(tool, ctx) for tool in session.tools))

    def _ready(self, tool: RunningTool, ctx: SignalContext) -> bool:
        horizon = ctx.settings.readiness_horizon_s
        elapsed = max(0.0, ctx.now - tool.started_at)
        if tool.hints.sleep_s is not None and tool.hints.sleep_s > elapsed + horizon:
            return False
        probability = self.durations.return_probability(tool.tool, elapsed, horizon, self.min_samples)
        return probability is not None and probability >= self.threshold

    def on_nodes(self, session: Session, ctx: SignalContext) -> Mapping[NodeId, int]:
        return NO_NODES


class TaoSurvivalPolicy(TaoPolicy):
    def __init__(self, durations: ToolDurations) -> None:
        readiness = SurvivalReadiness(durations)
        super().__init__("tao-survival", [CacheCredit(), readiness, HeldFootprint(), Stability()])
        self.durations = durations
        self._tools: dict[tuple[str, str], tuple[str, float]] = {}

    def observe(self, event: Event, now: float) -> None:
        super().observe(event, now)
        if isinstance(event, ToolStart):
            self._tools[(event.session_id, event.call_id)] = (event.tool, now)
        elif isinstance(event, ToolEnd):
            started = self._tools.pop((event.session_id, event.call_id), None)
            if started is not None:
                tool, at = started
                self.durations.add(tool, event.duration_s if event.duration_s is not None else max(0.0, now - at))


def tao_survival(*, seed: int = 0) -> TaoSurvivalPolicy:
    return TaoSurvivalPolicy(ToolDurations())
