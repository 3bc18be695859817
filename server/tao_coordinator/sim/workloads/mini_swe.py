"""mini-swe-agent trajectories (per-step table `steps_dev.jsonl.gz`) → `Workload` (README §2).

Mapping rules:
- Blocks. The history is append-only, so trajectory j (slot `first_slot + j`) owns one id range and step k's prompt
  is its first ⌊prompt_tokens_k / 16⌋ ids. The first `SHARED_PREFIX_TOKENS // 16` of them are global (slot 0): the
  system prompt and the common head of the instance template are identical in every trajectory. When a prompt
  shrinks (137 dev steps report fewer prompt tokens than the step before: provider token accounting, the history
  itself only grows) it is simply a shorter prefix of the same range.
- Tool = the program of the command: the first word of the first `&&` / `||` / `;` / line segment that is not a
  `cd` or a comment, after `VAR=value` prefixes, without its directory (`/usr/bin/python3` → `python3`). A reply
  without exactly one bash block ran nothing: `TOOL_FORMAT_ERROR`. Hints: the run's 60 s command timeout, and the
  sum of the `sleep N` in the command as a floor.
- Tool time. The format records only the provider's `created` second per call. The gap between two calls is split
  as `gap = llm_time(prompt_k, completion_k) + tool_time`, with `llm_time` a linear model fitted by
  `calibration.fit_llm_time` (median regression on fast read-only commands) and `tool_time` floored at
  `tool_floor_s`. See docs/workloads.md for the fit.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...core.events import PROGRAM_PATTERN
from ...core.model import BlockRun, DurationHints
from ..prompt import Prompt
from .blocks import MINI_SWE, NODE_BLOCK_TOKENS, namespace_base, output_block_runs
from .files import read_records
from .model import TOOL_FORMAT_ERROR, TOOL_START, RequestSpec, ScriptMeta, SessionScript, Workload
from .rules import GapRule, GapTally, build_workload

MINI_SWE_SOURCE = "mini-swe-agent"
COMMAND_TIMEOUT_S = 60.0
"""`environment.timeout` of the run: the harness kills a command after 60 s."""
SHARED_PREFIX_TOKENS = 159
"""System prompt + chat formatting + the 56 common characters that open every instance message.
From `calibration.mini_swe_shared_prefix_tokens(steps_dev.jsonl.gz)`: the intercept 144.7 of step-0 prompt tokens
against `task_chars`, plus the slope 0.259 tokens/char × 56 chars."""


@dataclass(frozen=True, slots=True)
class LlmTimeModel:
    """`llm_time = intercept + a · prompt_tokens + b · completion_tokens`; the rest of a gap is tool time."""

    intercept_s: float
    prompt_token_s: float
    completion_token_s: float
    tool_floor_s: float
    """Shortest tool time: `docker exec` of even a `cat` and the harness's own work take a few hundred ms."""

    def llm_time_s(self, prompt_tokens: int, completion_tokens: int) -> float:
        return self.intercept_s + self.prompt_token_s * prompt_tokens + self.completion_token_s * completion_tokens

    def tool_time_s(self, gap_s: float, prompt_tokens: int, completion_tokens: int) -> float:
        return max(self.tool_floor_s, gap_s - self.llm_time_s(prompt_tokens, completion_tokens))


GEMINI_3_PRO_LLM_TIME = LlmTimeModel(
    intercept_s=2.208,
    prompt_token_s=1.1362e-05,
    completion_token_s=0.011721,
    tool_floor_s=0.3,
)
"""From `calibration.fit_llm_time(steps_dev.jsonl.gz)`: see docs/workloads.md for the data and the residuals."""


def load_mini_swe(
    path: Path | str,
    *,
    max_context: int | None = None,
    gap_rule: GapRule | None = None,
    llm_time: LlmTimeModel = GEMINI_3_PRO_LLM_TIME,
    first_slot: int = 1,
    limit: int | None = None,
) -> Workload:
    """Load the per-step table; `first_slot` separates the id ranges of two files loaded into one simulation."""
    rule = gap_rule or GapRule()
    built: list[tuple[SessionScript, GapTally]] = []
    for position, record in enumerate(read_records(path)):
        if limit is not None and position >= limit:
            break
        tally = GapTally(rule)
        built.append((mini_swe_script(record, first_slot + position, llm_time, tally), tally))
    return build_workload(Path(path).name, MINI_SWE_SOURCE, built, max_context)


def mini_swe_script(record: Mapping[str, Any], slot: int, llm_time: LlmTimeModel, tally: GapTally) -> SessionScript:
    steps: Sequence[Mapping[str, Any]] = record["steps"]
    prompts = [trajectory_prompt(int(step["prompt_tokens"]), slot) for step in steps]
    requests: list[RequestSpec] = []
    for index, (step, prompt) in enumerate(zip(steps, prompts, strict=True)):
        produced: tuple[BlockRun, ...] = ()
        if index + 1 < len(steps):
            context = prompt.tokens + int(step["completion_tokens"])
            produced = output_block_runs(prompt.block_runs, context, prompts[index + 1].block_runs)
        if index == 0:
            requests.append(
                RequestSpec(prompt, int(step["completion_tokens"]), 0.0, "start", TOOL_START, None, produced)
            )
            continue
        previous = steps[index - 1]
        gap = float(step["created"]) - float(previous["created"])
        tool_s = llm_time.tool_time_s(gap, int(previous["prompt_tokens"]), int(previous["completion_tokens"]))
        program = command_tool(previous.get("command"), int(previous.get("n_actions", 1)))
        output, gap_s = int(step["completion_tokens"]), tally.apply("tool", tool_s)
        if program == TOOL_FORMAT_ERROR:  # no command ran: the harness answered the model itself
            requests.append(RequestSpec(prompt, output, gap_s, "tool", TOOL_FORMAT_ERROR, None, produced))
        else:
            hints = command_hints(previous.get("command"))
            requests.append(
                RequestSpec(prompt, output, gap_s, "tool", "bash", hints, produced, reported_program(program))
            )
    meta = ScriptMeta(MINI_SWE_SOURCE, str(record.get("model", "")), SHARED_PREFIX_TOKENS, str(record["instance_id"]))
    return SessionScript(str(record["instance_id"]), tuple(requests), meta)


def trajectory_prompt(prompt_tokens: int, slot: int) -> Prompt:
    """The first ⌊tokens/16⌋ ids of the trajectory's range, the first `SHARED_PREFIX_TOKENS // 16` of them global."""
    blocks = prompt_tokens // NODE_BLOCK_TOKENS
    shared = min(blocks, SHARED_PREFIX_TOKENS // NODE_BLOCK_TOKENS)
    runs: list[BlockRun] = [(namespace_base(MINI_SWE, 0), shared)] if shared else []
    if blocks > shared:
        runs.append((namespace_base(MINI_SWE, slot) + shared, blocks - shared))
    return Prompt(prompt_tokens, tuple(runs))


_ENV_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_SEGMENT_SEPARATOR = re.compile(r"&&|\|\||;|\n")
_SLEEP = re.compile(r"\bsleep\s+(\d+(?:\.\d+)?)\b")


def command_tool(command: str | None, n_actions: int = 1) -> str:
    """The program a bash command runs first, ignoring `cd`, comments and environment assignments."""
    if n_actions != 1 or not command or not command.strip():
        return TOOL_FORMAT_ERROR
    for segment in _SEGMENT_SEPARATOR.split(command):
        words = segment.split()
        while words and _ENV_ASSIGNMENT.match(words[0]):
            words = words[1:]
        if words and words[0] != "cd" and not words[0].startswith("#"):
            return words[0].rsplit("/", 1)[-1] or words[0]
    return command.split()[0]


def reported_program(program: str) -> str | None:
    """What a live client sends as the program: the name if it is a plain file name, else nothing."""
    return program if PROGRAM_PATTERN.fullmatch(program) else None


def command_hints(command: str | None) -> DurationHints:
    sleeps = [float(seconds) for seconds in _SLEEP.findall(command or "")]
    return DurationHints(timeout_s=COMMAND_TIMEOUT_S, sleep_s=sum(sleeps) if sleeps else None)
