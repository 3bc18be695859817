"""Claude Code traces in the AgentX / kv-cache-tester schema → `Workload` (see shared/traces/README.md §1).

Mapping rules:
- Blocks. A trace block covers 64 tokens and its id h is local to the trace. It becomes the 4 node blocks
  `base + 4h … base + 4h + 3` with `base = namespace_base(AGENTX, slot)` and `slot` = the number in the trace id
  (`trace_0004` → 4), so the ids of two traces never collide, even across the dev and eval halves, and a trace run
  `(h, n)` is the node run `(base + 4h, 4n)`. A request has exactly `in // 64 * 4` node blocks: the trailing partial
  trace block (up to 63 tokens, i.e. up to 3 full node blocks) has no id, as in the trace. Both `hash_runs` and
  `hash_ids` are read; they give identical scripts.
- Gaps. Before a request whose `input_types` contain "tool_result" the gap is a tool gap (`think_time`); otherwise a
  user gap. A missing `think_time` is `t − end of the previous call`, the end being `t + api_time`, else the next
  request's `t − think_time`, else `t + DEFAULT_API_TIME_S`. No tool names are recorded: tool gaps get
  `TOOL_UNKNOWN`, except the gap after a blocking sub-agent (`TOOL_SUBAGENT`).
- Sub-agents. In these traces the `t` of a "completed" sub-agent is when it ended: for 25 of the 27 completed dev
  sub-agents `t − duration_ms/1000` falls 0.1–1 s after the end of the preceding parent call (the other two, in
  trace_0004, start 40 h after the parent's last call), and the child's own requests span `duration_ms` less
  1.7–7.3 s. So a completed child starts at `t − duration_ms/1000`, an
  "async_launched" one (no duration) at `t`. It is launched after the last parent request that started at or
  before that time, with `delay = start − end of that call` (a user gap when that call ended its turn, "end_turn";
  else a tool gap). A completed child blocks the parent: the parent's next gap is measured from the latest end
  of the children it waited for, `t_next − max(child t)`.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ...core.model import BlockRun
from ..prompt import Prompt, runs_from_ids
from .blocks import AGENTX, NODE_BLOCK_TOKENS, namespace_base, namespace_runs, output_block_runs
from .files import read_records
from .model import (
    TOOL_START,
    TOOL_SUBAGENT,
    TOOL_UNKNOWN,
    TOOL_USER,
    GapKind,
    RequestSpec,
    ScriptMeta,
    SessionScript,
    SubagentLaunch,
    Workload,
)
from .rules import GapRule, GapTally, build_workload

AGENTX_SOURCE = "agentx"
DEFAULT_API_TIME_S = 6.09
"""Median `api_time` of the dev half: stands in for the duration of a call whose `api_time` was not captured."""
UNNUMBERED_SLOTS = 1 << 19
"""Slots for traces whose id has no number: far above any `trace_NNNN` number."""

Entry = Mapping[str, Any]


def load_agentx(
    path: Path | str,
    *,
    max_context: int | None = None,
    gap_rule: GapRule | None = None,
    limit: int | None = None,
) -> Workload:
    """Load a `.jsonl(.gz)` of traces (compact `hash_runs`) or a `.json` trace file (original `hash_ids`)."""
    rule = gap_rule or GapRule()
    built: list[tuple[SessionScript, GapTally]] = []
    slots: set[int] = set()
    for position, trace in enumerate(read_records(path)):
        if limit is not None and position >= limit:
            break
        slot = trace_slot(trace["id"], position)
        if slot in slots:
            raise ValueError(f"{trace['id']}: slot {slot} already used by another trace of {path}")
        slots.add(slot)
        tally = GapTally(rule)
        built.append((agentx_script(trace, slot, tally), tally))
    return build_workload(Path(path).name, AGENTX_SOURCE, built, max_context)


def trace_slot(trace_id: str, position: int) -> int:
    number = re.search(r"(\d+)$", trace_id)
    return int(number.group(1)) if number else UNNUMBERED_SLOTS + position


def agentx_script(trace: Entry, slot: int, tally: GapTally) -> SessionScript:
    """One trace as a script; its sub-agents become children that share the trace's id namespace."""
    base = namespace_base(AGENTX, slot)
    scale = _blocks_per_trace_block(trace)
    main = [entry for entry in trace["requests"] if entry["type"] != "subagent"]
    children = [entry for entry in trace["requests"] if entry["type"] == "subagent"]
    launches, waits = _launches(trace["id"], main, children, (base, scale), tally)
    requests = _agent_requests(main, (base, scale), tally, waits)
    return SessionScript(trace["id"], requests, _meta(main, trace["id"]), launches)


def _blocks_per_trace_block(trace: Entry) -> int:
    block_size = int(trace["block_size"])
    if block_size % NODE_BLOCK_TOKENS:
        raise ValueError(f"{trace['id']}: block_size {block_size} is not a multiple of {NODE_BLOCK_TOKENS}")
    return block_size // NODE_BLOCK_TOKENS


def _meta(entries: Sequence[Entry], origin: str) -> ScriptMeta:
    return ScriptMeta(source=AGENTX_SOURCE, model=str(entries[0]["model"]), shared_prefix_tokens=0, origin=origin)


def _agent_requests(
    entries: Sequence[Entry], namespace: tuple[int, int], tally: GapTally, waits: Mapping[int, float]
) -> tuple[RequestSpec, ...]:
    prompts = [Prompt(int(entry["in"]), _node_runs(entry, namespace)) for entry in entries]
    requests: list[RequestSpec] = []
    for index, (entry, prompt) in enumerate(zip(entries, prompts, strict=True)):
        kind, tool, raw_gap = _gap_before(entries, index, waits)
        output_tokens = int(entry["out"])
        produced: tuple[BlockRun, ...] = ()
        if index + 1 < len(prompts):
            produced = output_block_runs(
                prompt.block_runs, prompt.tokens + output_tokens, prompts[index + 1].block_runs
            )
        gap = tally.apply(kind, raw_gap)
        requests.append(RequestSpec(prompt, output_tokens, gap, kind, tool, None, produced))
    return tuple(requests)


def _node_runs(entry: Entry, namespace: tuple[int, int]) -> tuple[BlockRun, ...]:
    base, scale = namespace
    local = entry["hash_runs"] if "hash_runs" in entry else runs_from_ids(entry["hash_ids"])
    runs = namespace_runs(((int(first), int(count)) for first, count in local), base, scale)
    expected = int(entry["in"]) // (NODE_BLOCK_TOKENS * scale) * scale
    if sum(count for _, count in runs) != expected:
        raise ValueError(f"request at t={entry['t']}: {len(runs)} runs do not cover in // block_size blocks")
    return runs


def _gap_before(entries: Sequence[Entry], index: int, waits: Mapping[int, float]) -> tuple[GapKind, str, float]:
    if index == 0:
        return "start", TOOL_START, 0.0
    entry = entries[index]
    kind: GapKind = "tool" if "tool_result" in entry["input_types"] else "user"
    tool = TOOL_UNKNOWN if kind == "tool" else TOOL_USER
    if index - 1 in waits:
        tool = TOOL_SUBAGENT if kind == "tool" else TOOL_USER
        return kind, tool, max(0.0, float(entry["t"]) - waits[index - 1])
    think_time = entry.get("think_time")
    if think_time is None:
        return kind, tool, max(0.0, float(entry["t"]) - _call_end(entries, index - 1))
    return kind, tool, float(think_time)


def _call_end(entries: Sequence[Entry], index: int) -> float:
    entry = entries[index]
    if entry.get("api_time") is not None:
        return float(entry["t"]) + float(entry["api_time"])
    following = entries[index + 1] if index + 1 < len(entries) else None
    if following is not None and following.get("think_time") is not None:
        return float(following["t"]) - float(following["think_time"])
    return float(entry["t"]) + DEFAULT_API_TIME_S


def _launches(
    trace_id: str, main: Sequence[Entry], children: Sequence[Entry], namespace: tuple[int, int], tally: GapTally
) -> tuple[tuple[SubagentLaunch, ...], dict[int, float]]:
    """Place each sub-agent after its parent call; return the launches and, per parent call, when waiting ends."""
    starts = [float(entry["t"]) for entry in main]
    launches: list[SubagentLaunch] = []
    waits: dict[int, float] = {}
    for child in children:
        blocks = child.get("status") == "completed" and child.get("duration_ms") is not None
        start = float(child["t"]) - (float(child["duration_ms"]) / 1000 if blocks else 0.0)
        parent = max(bisect.bisect_right(starts, start) - 1, 0)
        kind: GapKind = "user" if main[parent].get("stop") == "end_turn" else "tool"
        delay = tally.apply(kind, max(0.0, start - _call_end(main, parent)))
        requests = _agent_requests(child["requests"], namespace, tally, {})
        script = SessionScript(f"{trace_id}/{child['agent_id']}", requests, _meta(child["requests"], trace_id))
        launches.append(SubagentLaunch(parent, delay, script, blocks))
        if blocks:
            waits[parent] = max(waits.get(parent, 0.0), float(child["t"]))
    launches.sort(key=lambda launch: (launch.after_request, launch.delay_s))
    return tuple(launches), waits
