"""What a simulator replays: scripts of agent sessions, each a list of LLM requests separated by tool or user gaps.

Replay contract (the driver implements it; every loader and the generator produce data that fits it):

- Closed loop. N sessions run at once. A session sends `requests[0]` when it starts; it sends `requests[i]` (i ≥ 1)
  `requests[i].gap_before_s` seconds after the answer to `requests[i-1]` arrived. A finished session (its last
  answer arrived and every child it waits for finished) is replaced by the next script in `Workload.scripts` until
  the scripts are used up. Scripts are replayed in their order; nothing is shuffled by the driver.
- `gap_kind` says what the gap was: "start" (first request, gap 0), "tool" (the agent ran `tool`, with `hints`), or
  "user" (a human typed the next message). Gaps are already capped by the workload's `GapRule` (see `rules.py`).
- Sub-agents. `SubagentLaunch(after_request=i, delay_s=d, script=child, blocks_parent=b)` starts `child` as its own
  session d seconds after the answer to `requests[i]` of its parent. Children run concurrently and do not count
  toward N. When `b` is true the parent's `requests[i+1]` waits for the child: it leaves `gap_before_s` after the
  later of the answer to `requests[i]` and the end of every blocking child launched after `requests[i]` (the gap is
  measured that way in the traces too). A non-blocking child (Claude Code `async_launched`) never delays its parent.
- Models. `RequestSpec.model` names the model a call is for, by its role in the fleet: `MAIN_MODEL` ("main", the
  default) or `SMALL_MODEL` ("small", Claude Code's `ANTHROPIC_SMALL_FAST_MODEL`); the simulated fleet maps roles to
  the nodes serving them. A session's main model is the model of its first request; every request of a script
  either names it or is a side call. A side call (a request for another model, after the first) is sent
  `gap_before_s` after the previous answer like any request and the next request waits for its answer, but it
  happens inside the session's tool phase: the tool that began after the last main-model answer still runs and
  ends only when the next main-model request is sent (the traces count side calls in `think_time` too). A side call
  shares no prompt block with the main agent's prompts. A sub-agent on the small model is a child script whose
  requests all name it.
- Chats. A script marked `meta.chat` is a chat request, not an agent: one main-model request, no tool after it, no
  sub-agent; it finishes with its only answer. Metrics count chats apart from agent sessions (`sim/metrics.py`).
- Prompts follow `sim.prompt.Prompt`: 16-token node blocks, prefix-chained ids, ids unique across scripts unless a
  prefix is really shared (see `blocks.py`). `output_block_runs` names the blocks the answer fills when the next
  request of the same agent extends this prompt; empty when it does not, or when there is no next request.

Invariants: `requests` is non-empty; `requests[0].gap_kind == "start"` and its gap is 0; every other request has a
"tool" or "user" gap ≥ 0; `0 ≤ after_request < len(requests)` for every launch; the first request names the
script's main model; a chat has exactly one request and no launch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ...core.model import BlockRun, DurationHints
from ..prompt import Prompt

GapKind = Literal["start", "tool", "user"]

TOOL_START = "<start>"
"""Placeholder tool of a first request: nothing ran before it."""
TOOL_USER = "<user>"
"""Placeholder tool of a request that follows a human message."""
TOOL_UNKNOWN = "<tool>"
"""Placeholder for a tool whose name the trace does not record (all AgentX tool results except sub-agents)."""
TOOL_SUBAGENT = "Task"
"""Claude Code's sub-agent tool: the gap before the parent's next request after a blocking child."""
MAIN_MODEL = "main"
"""The role of the model a session's own calls use (the fleet's large model)."""
SMALL_MODEL = "small"
"""The role of the small fast model: Claude Code's side calls and its Explore sub-agents (haiku in the traces)."""
TOOL_FORMAT_ERROR = "<format-error>"
"""mini-swe-agent reply without exactly one bash block: nothing ran, the harness answered with an error text."""


@dataclass(frozen=True, slots=True)
class RequestSpec:
    """One LLM call of one agent, and the gap that precedes it."""

    prompt: Prompt
    output_tokens: int
    gap_before_s: float
    gap_kind: GapKind
    tool: str
    """The tool that ran in the gap before this request (or a placeholder, see the TOOL_* constants)."""
    hints: DurationHints | None = None
    """What the tool call said about its duration, when the trace tells (mini-swe-agent: 60 s timeout, `sleep N`)."""
    output_block_runs: tuple[BlockRun, ...] = ()
    program: str | None = None
    """For a shell tool: the program its command ran first, as a live client would report it."""
    model: str = MAIN_MODEL
    """The role of the model the call is for (`MAIN_MODEL`, `SMALL_MODEL`); see the module docstring."""

    def __post_init__(self) -> None:
        if self.output_tokens < 0 or self.gap_before_s < 0:
            raise ValueError("output_tokens and gap_before_s must be non-negative")
        if not self.model:
            raise ValueError("model: name the model role of the call (MAIN_MODEL or SMALL_MODEL)")

    @property
    def context_tokens(self) -> int:
        """KV the call needs at its end: prompt plus output."""
        return self.prompt.tokens + self.output_tokens


@dataclass(frozen=True, slots=True)
class ScriptMeta:
    source: str
    """One of "agentx", "mini-swe-agent", "synthetic:<preset>"."""
    model: str
    """Model of the first request in the original trace (informational: the simulated node serves its own model)."""
    shared_prefix_tokens: int = 0
    """Tokens at the head of every prompt whose block ids other scripts of the workload also use."""
    origin: str = ""
    """Where the script came from: trace id, instance id, or `seed:index` for synthetic sessions."""
    chat: bool = False
    """A chat request (one call, no tool, no following turn) rather than an agent session."""


@dataclass(frozen=True, slots=True)
class SubagentLaunch:
    after_request: int
    """Index of the parent request after whose answer the child starts."""
    delay_s: float
    script: SessionScript
    blocks_parent: bool
    """True when the parent's next request waits for the child (Claude Code `Task` with status "completed")."""


@dataclass(frozen=True, slots=True)
class SessionScript:
    id: str
    requests: tuple[RequestSpec, ...]
    meta: ScriptMeta
    subagents: tuple[SubagentLaunch, ...] = ()

    def __post_init__(self) -> None:
        if not self.requests:
            raise ValueError(f"{self.id}: a script needs at least one request")
        if any(not 0 <= launch.after_request < len(self.requests) for launch in self.subagents):
            raise ValueError(f"{self.id}: a sub-agent launch points outside the parent's requests")
        if self.meta.chat and (len(self.requests) != 1 or self.subagents):
            raise ValueError(f"{self.id}: a chat has exactly one request and no sub-agent")

    @property
    def model(self) -> str:
        """The script's main model: its first request's."""
        return self.requests[0].model

    def is_side_call(self, index: int) -> bool:
        """Whether `requests[index]` is a side call: a call for another model than the script's main one."""
        return self.requests[index].model != self.model

    def all_requests(self) -> tuple[RequestSpec, ...]:
        """Own requests, then each child's (recursively), in launch order."""
        nested = tuple(r for launch in self.subagents for r in launch.script.all_requests())
        return self.requests + nested

    @property
    def peak_context_tokens(self) -> int:
        """The largest prompt + output over the script, sub-agents included: what the context cap compares."""
        return max(request.context_tokens for request in self.all_requests())


@dataclass(frozen=True, slots=True)
class RemovedScript:
    id: str
    peak_context_tokens: int
    requests: int
    reason: str


@dataclass(frozen=True, slots=True)
class LoadReport:
    source: str
    traces_read: int
    traces_kept: int
    requests: int
    """Kept requests, sub-agent requests included."""
    subagent_requests: int
    subagents: int
    prompt_tokens: int
    """Sum of prompt tokens over the kept requests."""
    max_context: int | None
    removed: tuple[RemovedScript, ...] = ()
    user_gaps_capped: int = 0
    tool_gaps_capped: int = 0

    @property
    def traces_removed(self) -> int:
        return len(self.removed)

    @property
    def requests_removed(self) -> int:
        return sum(script.requests for script in self.removed)

    @property
    def gaps_capped(self) -> int:
        return self.user_gaps_capped + self.tool_gaps_capped


@dataclass(frozen=True, slots=True)
class Workload:
    name: str
    scripts: tuple[SessionScript, ...]
    report: LoadReport
