"""Statistics of the trace files, the fits that derive from them, and the synthetic presets built from both.

Rerun with `python -m tao_coordinator.sim.workloads.calibration [traces_dir]`: it prints the fitted tool-time model
and the two presets as Python, to paste into `mini_swe.py` and `synthetic.py`. A test pins that the stored constants
equal what this module derives from the dev files, so the generator needs no trace file at run time.
Rounding keeps the constants readable and the comparison exact: tokens to integers, seconds to 0.01 s, shares to
0.001.
"""

from __future__ import annotations

import sys
import tarfile
import textwrap
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from ...core.model import shared_prefix_blocks
from .agentx import DEFAULT_API_TIME_S
from .distributions import QUANTILE_LEVELS, QuantileTable, SyntheticPreset
from .files import AGENTX_DEV, MINI_SWE_DEV, read_records, traces_dir
from .mini_swe import GEMINI_3_PRO_LLM_TIME, LlmTimeModel, command_tool

FAST_COMMANDS = frozenset({"cat", "sed", "grep", "nl", "ls", "head", "tail", "find", "echo", "wc"})
"""Read-only or trivial programs whose run time is negligible next to an LLM call: the fit's training set."""
TEMPLATE_PREFIX_CHARS = 56
"""Characters that open every mini-swe-agent instance message (`<pr_description>\\nConsider the following PR
description:\\n`), from `template_prefix_chars(trajs.tar.xz)`."""
PREFIX_BREAK_BELOW = 0.5
"""A call that keeps less than this share of the previous prompt's blocks counts as a prefix break. Most calls that do
not extend their predecessor keep 99.9% of it (the last block changed); those are treated as plain extensions."""
RESTART_SIZE_CHANGE = 0.1
"""A prefix break whose prompt size changes by more than this share is a restart (compaction, resume); the other
breaks (51% in the dev traces) stay within it: an early part of the prompt was rewritten and the session went on."""
MIN_TOOL_SHARE = 0.01
SMALL_MODEL_MARK = "haiku"
"""A trace model whose name holds this is Claude Code's small fast model (`ANTHROPIC_SMALL_FAST_MODEL`)."""

FloatArray = npt.NDArray[np.floating[Any]]


def quantile_table(values: Iterable[float], decimals: int = 0) -> QuantileTable:
    """Quantiles with linear interpolation between order statistics (the README's convention), rounded."""
    data = np.asarray(list(values), dtype=np.float64)
    levels = np.percentile(data, [100 * level for level in QUANTILE_LEVELS])
    return QuantileTable(tuple(round(float(value), decimals) for value in levels))


def quantile_regression(features: FloatArray, target: FloatArray, level: float, iterations: int = 500) -> FloatArray:
    """Linear quantile regression by iteratively reweighted least squares (matches an LP solution to 1e-4 here)."""
    beta: FloatArray = np.linalg.lstsq(features, target, rcond=None)[0]
    for _ in range(iterations):
        residual = target - features @ beta
        weights = np.where(residual >= 0, level, 1 - level) / np.maximum(np.abs(residual), 1e-4)
        weighted = features.T * weights
        updated: FloatArray = np.linalg.solve(weighted @ features, weighted @ target)
        if np.max(np.abs(updated - beta)) < 1e-9:
            return updated
        beta = updated
    return beta


def _step_pairs(records: Sequence[Mapping[str, Any]]) -> Iterable[tuple[Mapping[str, Any], Mapping[str, Any]]]:
    for record in records:
        yield from pairwise(record["steps"])


def fit_llm_time(steps_path: Path, level: float = 0.5, tool_floor_s: float = 0.3) -> LlmTimeModel:
    """Median of the `created` gap after fast commands, linear in the call's prompt and completion tokens."""
    records = list(read_records(steps_path))
    rows = [
        (1.0, float(step["prompt_tokens"]), float(step["completion_tokens"]), float(after["created"] - step["created"]))
        for step, after in _step_pairs(records)
        if command_tool(step.get("command"), int(step.get("n_actions", 1))) in FAST_COMMANDS
    ]
    data = np.asarray(rows, dtype=np.float64)
    intercept, per_prompt, per_completion = quantile_regression(data[:, :3], data[:, 3], level)
    return LlmTimeModel(
        intercept_s=round(float(intercept), 3),
        prompt_token_s=round(float(per_prompt), 9),
        completion_token_s=round(float(per_completion), 7),
        tool_floor_s=tool_floor_s,
    )


def mini_swe_shared_prefix_tokens(steps_path: Path) -> int:
    """Step-0 prompt = intercept + slope · task_chars; the intercept is the system prompt with chat formatting."""
    records = list(read_records(steps_path))
    task_chars = np.asarray([record["task_chars"] for record in records], dtype=np.float64)
    first_prompt = np.asarray([record["steps"][0]["prompt_tokens"] for record in records], dtype=np.float64)
    features = np.column_stack([np.ones_like(task_chars), task_chars])
    intercept, slope = np.linalg.lstsq(features, first_prompt, rcond=None)[0]
    return round(float(intercept) + float(slope) * TEMPLATE_PREFIX_CHARS)


def template_prefix_chars(trajs_tar: Path) -> int:
    """Length of the common head of `messages[1]` over all raw trajectories (reads the whole tarball: a few s)."""
    import json

    common: str | None = None
    with tarfile.open(trajs_tar) as archive:
        for member in archive:
            handle = archive.extractfile(member) if member.isfile() else None
            if handle is None:
                continue
            text = json.load(handle)["messages"][1]["content"]
            common = text if common is None else common[: _common_length(common, text)]
    return len(common or "")


def _common_length(a: str, b: str) -> int:
    for index, (char_a, char_b) in enumerate(zip(a, b, strict=False)):
        if char_a != char_b:
            return index
    return min(len(a), len(b))


def _tool_shares(names: Iterable[str]) -> tuple[tuple[str, float], ...]:
    counts = Counter(names)
    total = sum(counts.values())
    kept = [(name, round(count / total, 3)) for name, count in counts.most_common() if count / total >= MIN_TOOL_SHARE]
    other = round(1.0 - sum(share for _, share in kept), 3)
    return (*kept, ("<other>", other)) if other > 0 else tuple(kept)


def swe_agent_preset(steps_path: Path, llm_time: LlmTimeModel = GEMINI_3_PRO_LLM_TIME) -> SyntheticPreset:
    records = list(read_records(steps_path))
    pairs = list(_step_pairs(records))
    tool_times = [
        llm_time.tool_time_s(after["created"] - step["created"], step["prompt_tokens"], step["completion_tokens"])
        for step, after in pairs
    ]
    zero = QuantileTable((0.0,) * len(QUANTILE_LEVELS))
    return SyntheticPreset(
        name="swe-agent",
        model=str(records[0]["model"]),
        turns=quantile_table(len(record["steps"]) for record in records),
        initial_prompt_tokens=quantile_table(record["steps"][0]["prompt_tokens"] for record in records),
        appended_tokens=quantile_table(
            max(0, after["prompt_tokens"] - step["prompt_tokens"] - step["completion_tokens"]) for step, after in pairs
        ),
        output_tokens=quantile_table(step["completion_tokens"] for record in records for step in record["steps"]),
        tool_gap_s=quantile_table(tool_times, decimals=2),
        user_gap_s=zero,
        user_turn_share=0.0,
        prefix_break_share=0.0,
        prefix_break_keep=zero,
        restart_share=0.0,
        restart_prompt_tokens=zero,
        shared_prefix_tokens=mini_swe_shared_prefix_tokens(steps_path),
        max_prompt_tokens=max(step["prompt_tokens"] for record in records for step in record["steps"]),
        tools=_tool_shares(command_tool(step.get("command"), int(step.get("n_actions", 1))) for step, _ in pairs),
        command_timeout_s=60.0,
    )


def _agents(trace: Mapping[str, Any]) -> tuple[list[Mapping[str, Any]], list[Mapping[str, Any]]]:
    main = [entry for entry in trace["requests"] if entry["type"] != "subagent"]
    return main, [entry for entry in trace["requests"] if entry["type"] == "subagent"]


def _trace_runs(entry: Mapping[str, Any]) -> tuple[tuple[int, int], ...]:
    return tuple((int(first), int(count)) for first, count in entry["hash_runs"])


def _main_turn_statistics(traces: Sequence[Mapping[str, Any]]) -> dict[str, list[float]]:
    """Per consecutive main-agent pair: appended tokens when it extends; kept share, and new size when it restarts."""
    stats: dict[str, list[float]] = {"appended": [], "keep": [], "restart": [], "user": [], "pairs": []}
    for trace in traces:
        main, _ = _agents(trace)
        for before, after in pairwise(main):
            stats["pairs"].append(1.0)
            stats["user"].append(0.0 if "tool_result" in after["input_types"] else 1.0)
            runs_before = _trace_runs(before)
            own = sum(count for _, count in runs_before)
            kept = shared_prefix_blocks(runs_before, _trace_runs(after))
            if own and kept / own < PREFIX_BREAK_BELOW:
                stats["keep"].append(kept / own)
                if abs(after["in"] / before["in"] - 1) > RESTART_SIZE_CHANGE:
                    stats["restart"].append(after["in"])
            else:
                stats["appended"].append(max(0, after["in"] - before["in"] - before["out"]))
    return stats


def _all_entries(traces: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    entries: list[Mapping[str, Any]] = []
    for trace in traces:
        main, children = _agents(trace)
        entries.extend(main)
        entries.extend(entry for child in children for entry in child["requests"])
    return entries


def _gaps(entries: Sequence[Mapping[str, Any]], after_tool: bool) -> list[float]:
    return [
        float(entry["think_time"])
        for entry in entries
        if entry.get("think_time") is not None
        and entry["input_types"]
        and (entry["input_types"] == ["tool_result"] if after_tool else _after_user_text(entry["input_types"]))
    ]


def _after_user_text(input_types: Sequence[str]) -> bool:
    return "text" in input_types and "tool_result" not in input_types


def _subagent_parameters(traces: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    children = [child for trace in traces for child in _agents(trace)[1]]
    launch_points = sum(len(_agents(trace)[0]) - 1 for trace in traces)
    blocking = [child for child in children if child.get("status") == "completed" and child.get("duration_ms")]
    return {
        "subagent_share": round(len(children) / launch_points, 5),
        "subagent_blocking_share": round(len(blocking) / len(children), 3),
        "subagent_delay_s": round(_median_launch_delay(traces), 2),
        "subagent_turns": quantile_table(len(child["requests"]) for child in children),
        "subagent_initial_prompt_tokens": quantile_table(child["requests"][0]["in"] for child in children),
    }


def _median_launch_delay(traces: Sequence[Mapping[str, Any]]) -> float:
    """Median time from the end of the parent call to a blocking child's start (`t − duration`, see agentx.py)."""
    delays = []
    for trace in traces:
        main, children = _agents(trace)
        for child in children:
            if child.get("status") != "completed" or not child.get("duration_ms"):
                continue
            start = child["t"] - child["duration_ms"] / 1000
            parent = max((entry for entry in main if entry["t"] <= start), key=lambda entry: entry["t"])
            delays.append(start - parent["t"] - (parent.get("api_time") or DEFAULT_API_TIME_S))
    return float(np.median(delays))


def claude_code_preset(agentx_path: Path) -> SyntheticPreset:
    traces = list(read_records(agentx_path))
    entries = _all_entries(traces)
    turns = _main_turn_statistics(traces)
    mains = [_agents(trace)[0] for trace in traces]
    return SyntheticPreset(
        name="claude-code",
        model=Counter(str(entry["model"]) for entry in entries).most_common(1)[0][0],
        turns=quantile_table(len(main) for main in mains),
        initial_prompt_tokens=quantile_table(main[0]["in"] for main in mains),
        appended_tokens=quantile_table(turns["appended"]),
        output_tokens=quantile_table(entry["out"] for entry in entries),
        tool_gap_s=quantile_table(_gaps(entries, after_tool=True), decimals=2),
        user_gap_s=quantile_table(_gaps(entries, after_tool=False), decimals=2),
        user_turn_share=round(sum(turns["user"]) / len(turns["pairs"]), 3),
        prefix_break_share=round(len(turns["keep"]) / len(turns["pairs"]), 4),
        prefix_break_keep=quantile_table(turns["keep"], decimals=3),
        restart_share=round(len(turns["restart"]) / len(turns["keep"]), 3),
        restart_prompt_tokens=quantile_table(turns["restart"]),
        shared_prefix_tokens=round(float(np.median([trace["tool_tokens"] for trace in traces]))),
        max_prompt_tokens=max(entry["in"] for entry in entries),
        tools=(("<tool>", 1.0),),
        **_subagent_parameters(traces),
    )


@dataclass(frozen=True, slots=True)
class SideCallStatistics:
    """Claude Code's calls to its small fast model in the AgentX dev traces (`side_call_statistics`)."""

    small_model: str
    main_calls: int
    """Main-agent calls to a large model, in traces whose main agent uses one."""
    side_calls: int
    """Main-agent calls to the small model in those traces."""
    side_call_share: float
    """`side_calls / main_calls`, rounded to 0.0001. A floor: the traces do not record one-shot side calls (the README
    counts them in `think_time`)."""
    side_call_prompt_tokens: QuantileTable
    side_call_output_tokens: QuantileTable
    side_call_shared_blocks: int
    """Prompt blocks of side calls that any large-model prompt of the same trace also has."""
    subagents: int
    small_subagents: int
    """Sub-agents every call of which is to the small model."""
    small_subagent_calls: int
    small_subagent_types: tuple[tuple[str, int], ...]
    small_subagent_share: float
    """`small_subagents / subagents`, rounded to 0.001."""


def _is_small(model: str) -> bool:
    return SMALL_MODEL_MARK in model


def _block_ids(entry: Mapping[str, Any]) -> set[int]:
    return {block for first, count in _trace_runs(entry) for block in range(first, first + count)}


def side_call_statistics(agentx_path: Path) -> SideCallStatistics:
    """Side calls of the main agent, and sub-agents wholly on the small model. Traces whose main agent uses only the
    small model (2 in dev) are sessions on that model, not side calls, and are left out of the side-call figures."""
    traces = list(read_records(agentx_path))
    main_calls, side, shared = 0, [], 0
    for trace in traces:
        main, _ = _agents(trace)
        large = [entry for entry in main if not _is_small(entry["model"])]
        if not large:
            continue
        large_ids = set().union(*(_block_ids(entry) for entry in large))
        main_calls += len(large)
        for entry in main:
            if _is_small(entry["model"]):
                side.append(entry)
                shared += len(_block_ids(entry) & large_ids)
    children = [child for trace in traces for child in _agents(trace)[1]]
    small = [child for child in children if all(_is_small(entry["model"]) for entry in child["requests"])]
    small_models = Counter(str(entry["model"]) for entry in side)
    return SideCallStatistics(
        small_model=small_models.most_common(1)[0][0],
        main_calls=main_calls,
        side_calls=len(side),
        side_call_share=round(len(side) / main_calls, 4),
        side_call_prompt_tokens=quantile_table(entry["in"] for entry in side),
        side_call_output_tokens=quantile_table(entry["out"] for entry in side),
        side_call_shared_blocks=shared,
        subagents=len(children),
        small_subagents=len(small),
        small_subagent_calls=sum(len(child["requests"]) for child in small),
        small_subagent_types=tuple(sorted(Counter(str(child["subagent_type"]) for child in small).items())),
        small_subagent_share=round(len(small) / len(children), 3),
    )


def claude_code_side_calls_preset(agentx_path: Path) -> SyntheticPreset:
    """The claude-code preset with Claude Code's small-model traffic (`side_call_statistics`) added."""
    stats = side_call_statistics(agentx_path)
    return replace(
        claude_code_preset(agentx_path),
        name="claude-code-side-calls",
        small_model=stats.small_model,
        side_call_share=stats.side_call_share,
        side_call_prompt_tokens=stats.side_call_prompt_tokens,
        side_call_output_tokens=stats.side_call_output_tokens,
        small_subagent_share=stats.small_subagent_share,
    )


def preset_source(constant: str, preset: SyntheticPreset) -> str:
    """The preset as the Python block stored in `synthetic.py` (quantile tables written `Q((…))`)."""
    lines = [f"{constant} = SyntheticPreset("]
    for spec in fields(preset):
        value = getattr(preset, spec.name)
        text = f"Q({value.values!r})" if isinstance(value, QuantileTable) else repr(value)
        line = f"    {spec.name}={text},".replace("'", '"')
        lines.append(textwrap.fill(line, width=118, subsequent_indent=" " * 8, break_on_hyphens=False))
    return "\n".join([*lines, ")"])


def main(argv: Sequence[str] = ()) -> None:
    root = Path(argv[0]) if argv else traces_dir()
    llm_time = fit_llm_time(root / MINI_SWE_DEV)
    print(f"GEMINI_3_PRO_LLM_TIME = {llm_time!r}")
    print(f"SHARED_PREFIX_TOKENS = {mini_swe_shared_prefix_tokens(root / MINI_SWE_DEV)}")
    print(preset_source("CLAUDE_CODE", claude_code_preset(root / AGENTX_DEV)))
    print(preset_source("SWE_AGENT", swe_agent_preset(root / MINI_SWE_DEV, llm_time)))
    print(f"# {side_call_statistics(root / AGENTX_DEV)!r}")
    print(preset_source("CLAUDE_CODE_SIDE_CALLS", claude_code_side_calls_preset(root / AGENTX_DEV)))


if __name__ == "__main__":
    main(sys.argv[1:])
