"""The two rules every workload goes through, whatever its source: the gap rule and the context cap.

Gap rule. Traces contain gaps that are not agent time: a human reading and typing (Claude Code sessions pause for
minutes to days between user messages) and tool gaps that include idle or permission-prompt time (AgentX max
27,010 s). A scheduler comparison must not be dominated by them, so each gap is cut to `min(gap, cap)` with one cap
for user gaps and one for tool gaps. The rule is applied once, when the workload is built, so every policy replays
the same gaps. Sub-agent launch delays count as tool gaps.

Context cap. Like the public replays' `--max-context`, a script whose peak context (largest prompt + output over
all its requests, sub-agents included) passes the cap is dropped whole: cutting it would change the session's
shape. After the cap every kept request fits: `prompt.tokens + output_tokens ≤ max_context`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .model import GapKind, LoadReport, RemovedScript, SessionScript, Workload


@dataclass(frozen=True, slots=True)
class GapRule:
    user_cap_s: float = 30.0
    """A human message arrives at most this long after the answer: enough to keep users slower than tools."""
    tool_cap_s: float = 600.0
    """A tool gap lasts at most this long: AgentX p99 is 607 s, and mini-swe-agent's harness never exceeds 600 s."""

    def cap_for(self, kind: GapKind) -> float:
        if kind == "start":
            return 0.0
        return self.user_cap_s if kind == "user" else self.tool_cap_s


@dataclass(slots=True)
class GapTally:
    """Counts the gaps the rule shortened while one script is built."""

    rule: GapRule
    user_capped: int = 0
    tool_capped: int = 0

    def apply(self, kind: GapKind, gap_s: float) -> float:
        cap = self.rule.cap_for(kind)
        if gap_s <= cap:
            return max(gap_s, 0.0)
        if kind == "user":
            self.user_capped += 1
        elif kind == "tool":
            self.tool_capped += 1
        return cap


def context_cap_reason(peak_context_tokens: int, max_context: int) -> str:
    return f"peak context {peak_context_tokens} tokens > max_context {max_context}"


def build_workload(
    name: str,
    source: str,
    built: Sequence[tuple[SessionScript, GapTally]],
    max_context: int | None,
) -> Workload:
    """Apply the context cap to freshly built scripts and report what was read, kept and changed."""
    kept: list[tuple[SessionScript, GapTally]] = []
    removed: list[RemovedScript] = []
    for script, tally in built:
        peak = script.peak_context_tokens
        if max_context is not None and peak > max_context:
            reason = context_cap_reason(peak, max_context)
            removed.append(RemovedScript(script.id, peak, len(script.all_requests()), reason))
        else:
            kept.append((script, tally))
    scripts = tuple(script for script, _ in kept)
    requests = [request for script in scripts for request in script.all_requests()]
    report = LoadReport(
        source=source,
        traces_read=len(built),
        traces_kept=len(scripts),
        requests=len(requests),
        subagent_requests=len(requests) - sum(len(script.requests) for script in scripts),
        subagents=sum(_count_subagents(script) for script in scripts),
        prompt_tokens=sum(request.prompt.tokens for request in requests),
        max_context=max_context,
        removed=tuple(removed),
        user_gaps_capped=sum(tally.user_capped for _, tally in kept),
        tool_gaps_capped=sum(tally.tool_capped for _, tally in kept),
    )
    return Workload(name=name, scripts=scripts, report=report)


def _count_subagents(script: SessionScript) -> int:
    return sum(1 + _count_subagents(launch.script) for launch in script.subagents)
