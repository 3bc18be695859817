"""The mixed workload (`synthetic:mixed`): Claude Code agent sessions with side calls, interleaved with chat requests.

Session i of the workload is a chat with probability `chat_share` (drawn from `(seed, i)` alone), else the next agent
session. The k-th agent is exactly the k-th session of `generate("claude-code-side-calls", seed=seed)` — same ids,
turns, gaps, side calls and sub-agents — so the agents of a mixed run are the side-call preset's, unchanged, with
chats between them. A chat is a script of one main-model request with no tool, no following turn and no sub-agent
(`ScriptMeta.chat`); it finishes with its answer. Its prompt ids are its own (the `CHAT` namespace, one slot per
chat), except a short system prompt that every chat shares (slot 0), and share nothing with the agents. Everything
is deterministic for `(seed, index)`, and the i-th session does not depend on how many sessions are asked for
(as long as no context cap removes agents; see `synthetic.py`).

The closed loop replays chats like any session (`model.py`): a slot that frees takes the next script, so chats
arrive as agents finish — in bursts when many finish together — and a chat is over within seconds while an agent
holds its slot for its whole session. `chat_share` is the share of sessions, not of load: chats add few tokens and
measure how quickly an arrival that is not an agent is served under the agents' load.

Assumptions, not calibrated from our traces (we have no chat traces):
- Chat prompt and output sizes are the Azure LLM inference trace 2023, conversation part
  (github.com/Azure/AzurePublicDataset, `data/AzureLLMInferenceTrace_conv.csv`, 19,366 requests of a production
  chat service over one hour, published with Patel et al., "Splitwise", ISCA 2024: median prompt 1,020 tokens,
  median output 129). The tables below are its `ContextTokens` and `GeneratedTokens` at `QUANTILE_LEVELS`
  (linear interpolation over all rows). The prompts include the conversation so far, so a later turn of a
  conversation is one chat request here, without a cache of its earlier turns.
- The shared system prompt is `CHAT_SYSTEM_PROMPT_TOKENS` (a chat shorter than it shares its whole prompt's blocks).
- `DEFAULT_CHAT_SHARE` = 0.5: half the sessions are chats.
- Chats go to the main model, like the agents' own calls.
"""

from __future__ import annotations

import math
import random
from itertools import count

from ...core.model import BlockRun
from ..prompt import Prompt
from .blocks import CHAT, NODE_BLOCK_TOKENS, namespace_base
from .distributions import QuantileTable as Q
from .model import MAIN_MODEL, TOOL_START, LoadReport, RequestSpec, ScriptMeta, SessionScript, Workload
from .rules import GapRule
from .synthetic import CLAUDE_CODE_SIDE_CALLS, generate

MIXED = "mixed"
"""The workload's name after `synthetic:`."""
SOURCE = f"synthetic:{MIXED}"
DEFAULT_CHAT_SHARE = 0.5
CHAT_SYSTEM_PROMPT_TOKENS = 128
# fmt: off
CHAT_PROMPT_TOKENS = Q((2.0, 29.0, 181.0, 207.0, 396.0, 1020.0, 1189.0, 2734.5, 4083.0, 4142.0, 6179.1, 14050.0))
CHAT_OUTPUT_TOKENS = Q((7.0, 16.0, 41.0, 54.0, 85.0, 129.0, 395.0, 424.0, 451.0, 601.0, 954.0, 1000.0))
# fmt: on


def check_chat_share(chat_share: float) -> None:
    if not 0.0 <= chat_share <= 1.0:  # NaN fails too
        raise ValueError(f"chat_share must be a fraction of sessions in [0, 1], got {chat_share!r}")


def is_chat(seed: int, index: int, chat_share: float) -> bool:
    """Whether session `index` of the mixed workload of `seed` is a chat."""
    return random.Random(f"{MIXED}:{seed}:{index}").random() < chat_share


def generate_mixed(
    *,
    sessions: int = 64,
    seed: int = 0,
    chat_share: float = DEFAULT_CHAT_SHARE,
    scale: float = 1.0,
    turn_scale: float = 1.0,
    time_scale: float = 1.0,
    max_context: int | None = None,
    gap_rule: GapRule | None = None,
    side_call_rate: float = 1.0,
) -> Workload:
    """`sessions` scripts, chats and agents interleaved (see the module docstring); the agents' knobs are
    `synthetic.generate`'s, and `scale` scales the chats' tokens too. With `max_context` a chat's prompt is cut so
    that prompt + output fits."""
    check_chat_share(chat_share)
    if sessions < 0:
        raise ValueError(f"sessions must be at least 0, got {sessions}")
    chats = [is_chat(seed, index, chat_share) for index in range(sessions)]
    agents = generate(
        CLAUDE_CODE_SIDE_CALLS,
        sessions=chats.count(False),
        seed=seed,
        scale=scale,
        turn_scale=turn_scale,
        time_scale=time_scale,
        max_context=max_context,
        gap_rule=gap_rule,
        side_call_rate=side_call_rate,
    )
    next_agent = iter(agents.scripts)
    slots = count(1)
    scripts = tuple(
        _chat(seed, index, scale, max_context, next(slots)) if chat else next(next_agent)
        for index, chat in enumerate(chats)
    )
    return Workload(SOURCE, scripts, _report(agents.report, scripts))


def _chat(seed: int, index: int, scale: float, max_context: int | None, slot: int) -> SessionScript:
    rng = random.Random(f"{MIXED}:{seed}:{index}")
    rng.random()  # the draw `is_chat` made
    output = max(1, round(CHAT_OUTPUT_TOKENS.at(rng.random()) * scale))
    tokens = max(1, round(CHAT_PROMPT_TOKENS.at(rng.random()) * scale))
    if max_context is not None:
        tokens = max(1, min(tokens, max_context - output))
    blocks = tokens // NODE_BLOCK_TOKENS
    shared = min(blocks, math.ceil(CHAT_SYSTEM_PROMPT_TOKENS * scale) // NODE_BLOCK_TOKENS)
    runs: tuple[BlockRun, ...] = ((namespace_base(CHAT, 0), shared),) if shared else ()
    if blocks > shared:
        runs += ((namespace_base(CHAT, slot), blocks - shared),)
    request = RequestSpec(Prompt(tokens, runs), output, 0.0, "start", TOOL_START, model=MAIN_MODEL)
    script_id = f"chat-{seed}-{index}"
    meta = ScriptMeta(SOURCE, "chat", shared * NODE_BLOCK_TOKENS, script_id, chat=True)
    return SessionScript(script_id, (request,), meta)


def _report(agents: LoadReport, scripts: tuple[SessionScript, ...]) -> LoadReport:
    """The agents' report with the chats added (no chat is removed or has a gap to cap)."""
    chats = [script.requests[0] for script in scripts if script.meta.chat]
    return LoadReport(
        source=SOURCE,
        traces_read=agents.traces_read + len(chats),
        traces_kept=agents.traces_kept + len(chats),
        requests=agents.requests + len(chats),
        subagent_requests=agents.subagent_requests,
        subagents=agents.subagents,
        prompt_tokens=agents.prompt_tokens + sum(request.prompt.tokens for request in chats),
        max_context=agents.max_context,
        removed=agents.removed,
        user_gaps_capped=agents.user_gaps_capped,
        tool_gaps_capped=agents.tool_gaps_capped,
    )
