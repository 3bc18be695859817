"""Synthetic agent sessions drawn from distributions calibrated on the traces: the simulator's embedded default.

A session draws its number of turns and its first prompt; each turn draws an output; the next prompt is the
previous prompt + that output + appended tokens (a tool result or a user message), except that with
`prefix_break_share` it keeps only a drawn fraction of the previous prompt's blocks (an early part of the prompt was
rewritten), and such a break is with `restart_share` a restart whose size is drawn afresh (compaction, resume).
Prompts never pass `max_prompt_tokens`. The gap before a
turn is a user gap with `user_turn_share`, else a tool gap with a tool drawn from `tools`. Claude Code sessions also
launch sub-agents (`subagent_*`). The prompt ids follow the same rules as the loaders: one shared prefix per preset
(slot 0), one linear id range per session that every prompt extends, fresh ids after a prefix break.

Two models (`workloads/model.py`): with `side_call_share`, a main-agent call (not the last) is followed by a side call
to the small model with that probability — sent as soon as the answer arrives, inside the tool phase of the next
request (it copies that request's gap kind, tool and hints), with a prompt of its own ids (the traces share no block
between side calls and the main prompts) — and with `small_subagent_share` a sub-agent runs wholly on the small model.
Presets without them draw nothing for them, so their sessions are the same as before two models existed.

Knobs: `scale` multiplies every token count (so a fake fleet with small nodes can run the shape in a one-minute
demo), `turn_scale` the turns, `time_scale` the gaps (after the gap rule). Sessions are deterministic for
`(preset, seed, index)`: the i-th session of a workload does not depend on how many sessions are asked for, as long as
no context cap removes earlier ones (slots are handed out in order). `side_call_rate` multiplies the preset's
side-call share (a stress knob; the result is capped at 1).

The preset constants below are the output of `calibration.claude_code_preset(agentx_cc/dev.jsonl.gz)` and
`calibration.swe_agent_preset(mini_swe_agent/steps_dev.jsonl.gz)`, and `CLAUDE_CODE_SIDE_CALLS` of
`calibration.claude_code_side_calls_preset(agentx_cc/dev.jsonl.gz)`; `tests/sim/test_workload_synthetic.py` checks that
they still match when the trace files are present.
"""

from __future__ import annotations

import random
import zlib
from dataclasses import dataclass, replace
from itertools import count

from ...core.model import BlockRun, DurationHints
from ..prompt import Prompt
from .blocks import NODE_BLOCK_TOKENS, SYNTHETIC, namespace_base, output_block_runs, slice_runs
from .distributions import QuantileTable as Q
from .distributions import SyntheticPreset
from .model import (
    MAIN_MODEL,
    SMALL_MODEL,
    TOOL_START,
    TOOL_SUBAGENT,
    TOOL_USER,
    GapKind,
    RequestSpec,
    ScriptMeta,
    SessionScript,
    SubagentLaunch,
    Workload,
)
from .rules import GapRule, GapTally, build_workload

MAX_ATTEMPTS_PER_SESSION = 200

# fmt: off
CLAUDE_CODE = SyntheticPreset(
    name="claude-code",
    model="claude-opus-4-5-20251101",
    turns=Q((3.0, 3.0, 5.0, 7.0, 18.0, 46.0, 100.0, 154.0, 234.0, 316.0, 473.0, 514.0)),
    initial_prompt_tokens=Q((6343.0, 10252.0, 13695.0, 15630.0, 18584.0, 25917.0, 105139.0, 231574.0, 311308.0,
        753402.0, 849779.0, 851858.0)),
    appended_tokens=Q((0.0, 0.0, 0.0, 0.0, 52.0, 276.0, 919.0, 2645.0, 4701.0, 14274.0, 50170.0, 222529.0)),
    output_tokens=Q((0.0, 57.0, 89.0, 105.0, 137.0, 216.0, 417.0, 892.0, 1565.0, 3857.0, 7711.0, 18195.0)),
    tool_gap_s=Q((0.0, 2.0, 3.0, 4.0, 5.0, 8.0, 19.0, 68.0, 134.0, 607.0, 2725.63, 27010.0)),
    user_gap_s=Q((0.0, 0.0, 0.0, 0.0, 25.0, 95.0, 328.0, 1479.5, 3109.4, 6854.0, 27941.38, 72013.0)),
    user_turn_share=0.14,
    prefix_break_share=0.0188,
    prefix_break_keep=Q((0.0, 0.0, 0.0, 0.021, 0.077, 0.103, 0.161, 0.289, 0.378, 0.466, 0.49, 0.496)),
    restart_share=0.489,
    restart_prompt_tokens=Q((9393.0, 11191.0, 22522.0, 26200.0, 34562.0, 66768.0, 108842.0, 140715.0, 196860.0,
        336246.0, 468070.0, 503145.0)),
    shared_prefix_tokens=12262,
    max_prompt_tokens=880502,
    tools=(("<tool>", 1.0),),
    command_timeout_s=None,
    subagent_share=0.00129,
    subagent_blocking_share=0.871,
    subagent_delay_s=0.85,
    subagent_turns=Q((2.0, 3.0, 4.0, 5.0, 7.0, 10.0, 12.0, 17.0, 22.0, 24.0, 24.0, 24.0)),
    subagent_initial_prompt_tokens=Q((8868.0, 8900.0, 9009.0, 9096.0, 9522.0, 10212.0, 11678.0, 11763.0, 17568.0,
        18257.0, 18259.0, 18259.0)),
)
SWE_AGENT = SyntheticPreset(
    name="swe-agent",
    model="google/gemini-3-pro-preview",
    turns=Q((14.0, 18.0, 21.0, 23.0, 28.0, 36.0, 46.0, 71.0, 89.0, 123.0, 142.0, 145.0)),
    initial_prompt_tokens=Q((1317.0, 1332.0, 1363.0, 1394.0, 1482.0, 1654.0, 1931.0, 2316.0, 2692.0, 3629.0, 5490.0,
        5787.0)),
    appended_tokens=Q((0.0, 0.0, 0.0, 17.0, 19.0, 92.0, 293.0, 759.0, 1334.0, 3417.0, 4240.0, 9067.0)),
    output_tokens=Q((1.0, 20.0, 23.0, 27.0, 43.0, 89.0, 282.0, 700.0, 1055.0, 2398.0, 5742.0, 57811.0)),
    tool_gap_s=Q((0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 1.36, 4.26, 8.57, 25.9, 59.13, 61.96)),
    user_gap_s=Q((0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)),
    user_turn_share=0.0,
    prefix_break_share=0.0,
    prefix_break_keep=Q((0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)),
    restart_share=0.0,
    restart_prompt_tokens=Q((0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)),
    shared_prefix_tokens=159,
    max_prompt_tokens=96172,
    tools=(("cat", 0.176), ("sed", 0.156), ("grep", 0.144), ("nl", 0.103), ("python3", 0.092), ("python", 0.092),
        ("ls", 0.054), ("<format-error>", 0.036), ("rm", 0.034), ("pytest", 0.025), ("git", 0.017), ("head", 0.014),
        ("runtests.py", 0.013), ("find", 0.012), ("<other>", 0.032)),
    command_timeout_s=60.0,
    subagent_share=0.0,
    subagent_blocking_share=0.0,
    subagent_delay_s=0.0,
    subagent_turns=None,
    subagent_initial_prompt_tokens=None,
)
# `calibration.side_call_statistics(agentx_cc/dev.jsonl.gz)`: 133 small-model (haiku) calls among 24,202 large-model
# calls of the main agents (0.0055, a floor: one-shot side calls are not recorded), sharing 0 blocks with the main
# prompts; 26 of 31 sub-agents (all Explore, 275 calls) wholly on the small model (0.839).
CLAUDE_CODE_SIDE_CALLS = replace(
    CLAUDE_CODE,
    name="claude-code-side-calls",
    small_model="claude-haiku-4-5-20251001",
    side_call_share=0.0055,
    side_call_prompt_tokens=Q((9473.0, 10352.0, 11656.0, 12522.0, 29233.0, 45975.0, 60908.0, 69589.0, 73247.0, 80501.0,
        81608.0, 81685.0)),
    side_call_output_tokens=Q((69.0, 91.0, 99.0, 105.0, 120.0, 161.0, 431.0, 1543.0, 2844.0, 3824.0, 5267.0, 5472.0)),
    small_subagent_share=0.839,
)
# fmt: on
PRESETS = {preset.name: preset for preset in (CLAUDE_CODE, SWE_AGENT, CLAUDE_CODE_SIDE_CALLS)}


@dataclass(frozen=True, slots=True)
class Knobs:
    scale: float = 1.0
    turn_scale: float = 1.0
    time_scale: float = 1.0

    def tokens(self, value: float, minimum: int = 0) -> int:
        return max(minimum, round(value * self.scale))


def generate(
    preset: str | SyntheticPreset = "claude-code",
    *,
    sessions: int = 64,
    seed: int = 0,
    scale: float = 1.0,
    turn_scale: float = 1.0,
    time_scale: float = 1.0,
    max_context: int | None = None,
    gap_rule: GapRule | None = None,
    side_call_rate: float = 1.0,
) -> Workload:
    """`sessions` scripts; with `max_context`, sessions whose peak passes it are drawn again (and reported)."""
    chosen = PRESETS[preset] if isinstance(preset, str) else preset
    if not 0 <= side_call_rate < float("inf"):
        raise ValueError(f"side_call_rate must be a finite number at least 0, got {side_call_rate!r}")
    if side_call_rate != 1.0:
        chosen = replace(chosen, side_call_share=min(1.0, chosen.side_call_share * side_call_rate))
    knobs = Knobs(scale, turn_scale, time_scale)
    if max_context is not None and max_context <= knobs.tokens(chosen.initial_prompt_tokens.at(0.0)):
        raise ValueError(f"max_context {max_context} is too small for preset {chosen.name} at scale {scale}")
    rule = gap_rule or GapRule()
    slots = count(1)
    built: list[tuple[SessionScript, GapTally]] = []
    fitting = 0
    for index in range(sessions * MAX_ATTEMPTS_PER_SESSION):
        if fitting == sessions:
            break
        tally = GapTally(rule)
        rng = random.Random(f"{chosen.name}:{seed}:{index}")
        script = _session(chosen, f"{chosen.name}-{seed}-{index}", rng, knobs, slots, tally)
        built.append((script, tally))
        fitting += max_context is None or script.peak_context_tokens <= max_context
    if fitting < sessions:
        raise ValueError(f"max_context {max_context} is too small for preset {chosen.name} at scale {scale}")
    return build_workload(f"synthetic:{chosen.name}", f"synthetic:{chosen.name}", built, max_context)


class _History:
    """The ids of one session's current prompt history: the preset's shared run, then the session's own runs."""

    def __init__(self, shared: BlockRun, base: int) -> None:
        self.shared = shared
        self.own: tuple[BlockRun, ...] = ()
        self.next_free = base

    def prompt(self, tokens: int) -> Prompt:
        blocks = tokens // NODE_BLOCK_TOKENS
        shared_first, shared_blocks = self.shared
        own_blocks = sum(n for _, n in self.own)
        if blocks - shared_blocks > own_blocks:
            self._grow(blocks - shared_blocks - own_blocks)
        head = ((shared_first, min(blocks, shared_blocks)),) if min(blocks, shared_blocks) else ()
        return Prompt(tokens, head + slice_runs(self.own, 0, max(0, blocks - shared_blocks)))

    def break_prefix(self, tokens: int, keep: float) -> int:
        """Keep the first `keep` share of the prompt's blocks; every later block gets fresh ids. Returns kept tokens."""
        kept_blocks = max(self.shared[1], int(tokens // NODE_BLOCK_TOKENS * keep))
        self.own = slice_runs(self.own, 0, kept_blocks - self.shared[1])
        return kept_blocks * NODE_BLOCK_TOKENS

    def _grow(self, blocks: int) -> None:
        last = self.own[-1] if self.own else None
        if last is not None and last[0] + last[1] == self.next_free:
            self.own = (*self.own[:-1], (last[0], last[1] + blocks))
        else:
            self.own = (*self.own, (self.next_free, blocks))
        self.next_free += blocks


def _shared_run(preset: SyntheticPreset, knobs: Knobs) -> BlockRun:
    offset = (zlib.crc32(preset.name.encode()) % 64) << 30
    return namespace_base(SYNTHETIC, 0) + offset, knobs.tokens(preset.shared_prefix_tokens) // NODE_BLOCK_TOKENS


Gap = tuple[GapKind, str, DurationHints | None, float]


def _session(
    preset: SyntheticPreset,
    script_id: str,
    rng: random.Random,
    knobs: Knobs,
    slots: count[int],
    tally: GapTally,
    child: bool = False,
    model: str = MAIN_MODEL,
) -> SessionScript:
    turns_table, initial_table = _tables(preset, child)
    turns = max(1, round(turns_table.at(rng.random()) * knobs.turn_scale))
    shared = (namespace_base(SYNTHETIC, 0), 0) if child else _shared_run(preset, knobs)
    history = _History(shared, namespace_base(SYNTHETIC, next(slots)))
    tokens = max(shared[1] * NODE_BLOCK_TOKENS + 1, knobs.tokens(initial_table.at(rng.random()), minimum=1))
    prompts: list[Prompt] = []
    outputs: list[int] = []
    gaps: list[Gap] = [("start", TOOL_START, None, 0.0)]
    launches: list[SubagentLaunch] = []
    side_calls: dict[int, RequestSpec] = {}
    for turn in range(turns):
        prompts.append(history.prompt(tokens))
        outputs.append(knobs.tokens(preset.output_tokens.at(rng.random())))
        if turn == turns - 1:
            break
        launch = (
            None
            if child
            else _subagent(preset, f"{script_id}/agent_{len(launches) + 1:03d}", turn, rng, knobs, slots, tally)
        )
        if launch is not None:
            launches.append(launch)
        gaps.append(_gap(preset, rng, knobs, tally, waits_for_child=launch is not None and launch.blocks_parent))
        tokens = _next_tokens(preset, rng, knobs, history, tokens, outputs[-1])
        if not child and preset.side_call_share > 0 and rng.random() < preset.side_call_share:
            side_calls[turn] = _side_call(preset, rng, knobs, slots)
    trace_model = preset.small_model if model == SMALL_MODEL else preset.model
    meta = ScriptMeta(f"synthetic:{preset.name}", trace_model, 0 if child else shared[1] * NODE_BLOCK_TOKENS, script_id)
    requests = _requests(prompts, outputs, gaps, model)
    if side_calls:
        requests, launches = _with_side_calls(requests, side_calls, launches)
    return SessionScript(script_id, requests, meta, tuple(launches))


def _tables(preset: SyntheticPreset, child: bool) -> tuple[Q, Q]:
    if not child:
        return preset.turns, preset.initial_prompt_tokens
    if preset.subagent_turns is None or preset.subagent_initial_prompt_tokens is None:
        raise ValueError(f"preset {preset.name} has no sub-agent tables")
    return preset.subagent_turns, preset.subagent_initial_prompt_tokens


def _requests(prompts: list[Prompt], outputs: list[int], gaps: list[Gap], model: str) -> tuple[RequestSpec, ...]:
    requests = []
    for index, (prompt, output, (kind, tool, hints, gap_s)) in enumerate(zip(prompts, outputs, gaps, strict=True)):
        produced: tuple[BlockRun, ...] = ()
        if index + 1 < len(prompts):
            produced = output_block_runs(prompt.block_runs, prompt.tokens + output, prompts[index + 1].block_runs)
        requests.append(RequestSpec(prompt, output, gap_s, kind, tool, hints, produced, model=model))
    return tuple(requests)


def _side_call(preset: SyntheticPreset, rng: random.Random, knobs: Knobs, slots: count[int]) -> RequestSpec:
    """A small-model call with a prompt of fresh ids; its gap is filled in by `_with_side_calls`."""
    if preset.side_call_prompt_tokens is None or preset.side_call_output_tokens is None:
        raise ValueError(f"preset {preset.name} has a side-call share but no side-call tables")
    tokens = knobs.tokens(preset.side_call_prompt_tokens.at(rng.random()), minimum=1)
    output = knobs.tokens(preset.side_call_output_tokens.at(rng.random()))
    blocks = tokens // NODE_BLOCK_TOKENS
    runs = ((namespace_base(SYNTHETIC, next(slots)), blocks),) if blocks else ()
    return RequestSpec(Prompt(tokens, runs), output, 0.0, "tool", TOOL_START, model=SMALL_MODEL)


def _with_side_calls(
    requests: tuple[RequestSpec, ...], side_calls: dict[int, RequestSpec], launches: list[SubagentLaunch]
) -> tuple[tuple[RequestSpec, ...], list[SubagentLaunch]]:
    """Each side call placed after the main call it follows, in the tool phase of the next main call (whose gap
    kind, tool and hints it copies); launches re-pointed at their main call's new index."""
    merged: list[RequestSpec] = []
    position: dict[int, int] = {}
    for index, request in enumerate(requests):
        position[index] = len(merged)
        merged.append(request)
        side = side_calls.get(index)
        if side is not None:
            following = requests[index + 1]
            merged.append(replace(side, gap_kind=following.gap_kind, tool=following.tool, hints=following.hints))
    moved = [replace(launch, after_request=position[launch.after_request]) for launch in launches]
    return tuple(merged), moved


def _next_tokens(
    preset: SyntheticPreset, rng: random.Random, knobs: Knobs, history: _History, tokens: int, output: int
) -> int:
    appended = knobs.tokens(preset.appended_tokens.at(rng.random()))
    grown = tokens + output + appended
    if rng.random() < preset.prefix_break_share:
        kept = history.break_prefix(tokens, preset.prefix_break_keep.at(rng.random()))
        if rng.random() < preset.restart_share:
            grown = max(kept + 1, knobs.tokens(preset.restart_prompt_tokens.at(rng.random())))
    return min(grown, knobs.tokens(preset.max_prompt_tokens, minimum=1))


def _gap(preset: SyntheticPreset, rng: random.Random, knobs: Knobs, tally: GapTally, waits_for_child: bool) -> Gap:
    if rng.random() < preset.user_turn_share:
        raw = preset.user_gap_s.at(rng.random())
        return "user", TOOL_USER, None, tally.apply("user", raw) * knobs.time_scale
    tool = TOOL_SUBAGENT if waits_for_child else _draw_tool(preset, rng.random())
    raw = preset.tool_gap_s.at(rng.random())
    known = preset.command_timeout_s is not None and not tool.startswith("<") and tool != TOOL_SUBAGENT
    hints = DurationHints(timeout_s=preset.command_timeout_s) if known else None
    return "tool", tool, hints, tally.apply("tool", raw) * knobs.time_scale


def _draw_tool(preset: SyntheticPreset, draw: float) -> str:
    cumulative = 0.0
    for name, share in preset.tools:
        cumulative += share
        if draw < cumulative:
            return name
    return preset.tools[-1][0]


def _subagent(
    preset: SyntheticPreset,
    child_id: str,
    after: int,
    rng: random.Random,
    knobs: Knobs,
    slots: count[int],
    tally: GapTally,
) -> SubagentLaunch | None:
    if preset.subagent_share <= 0 or rng.random() >= preset.subagent_share:
        return None
    small = preset.small_subagent_share > 0 and rng.random() < preset.small_subagent_share
    model = SMALL_MODEL if small else MAIN_MODEL
    script = _session(preset, child_id, rng, knobs, slots, tally, child=True, model=model)
    blocks = rng.random() < preset.subagent_blocking_share
    return SubagentLaunch(after, preset.subagent_delay_s * knobs.time_scale, script, blocks)
