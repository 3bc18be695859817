"""What hostile input can make the coordinator hold, and the limits the protocol's models cannot state.

Every free string of the protocol is bounded by its pydantic model (`tao_sdk/protocol.py`): ids and tool names
1–200 characters (a session id only of `tao_sdk.ids.SESSION_ID_RULE`'s characters, never `/`), model, workflow,
parent session and step ids 200, harness 100, labels at most 50 with keys 1–64 and values ≤ 256 characters,
`expected_next_tools` ≤ 50 names (at registration and again on each acquire, which replaces them);
every integer ≤ 10**8 (and any JSON integer ≤ `body.MAX_INT_DIGITS` digits), every number finite. What is not a
field limit is here, counted in UTF-8 bytes, as the wire carries text:

- a session's agent context — harness, ids, model, label keys and values, expected tool names, step id — takes at
  most `CoreSettings.max_context_bytes` (a registration past it is a 422 on `context`, an acquire whose step id and
  expected tools would take it past is a 422 on the field, and neither changes anything);
- a session runs at most `CoreSettings.max_running_tools` tools at once, whose call ids, tool names and programs
  take at most `CoreSettings.max_running_tool_bytes` together (a 409 past either: end one first);
- what a session's timeline keeps of any text (call ids, tool names, programs, a model call's `error`) is clipped
  to `timeline.TEXT_BYTES`.

Why bytes: a Python string of non-ASCII characters takes up to 4 bytes a character, and once pydantic has read it,
its UTF-8 form too (CPython caches it in the string): a context at every field limit in 4-byte characters held
~230 KiB that way (measured with tracemalloc; ~43 KiB in ASCII). A budget in UTF-8 bytes bounds a string's memory
to about twice its budget plus ~80 bytes of header, whatever its script.

Memory bounds under hostile input:

- per session (only API-token holders create one, at most `limits.max_live_sessions` per token, `caps.py`):
  `SESSION_BYTES_BOUND`. Measured with tracemalloc, every string in 4-byte characters
  (`tests/web/test_adversarial.py`), at the default limits of `core/settings.py`: registered with its context at
  `max_context_bytes` ~56 KiB (~43 KiB of it the
  155 strings, twice over, and their headers); a timeline filled with model calls (`timeline.ENTRIES` entries,
  ~0.3 KiB each, text clipped to `timeline.TEXT_BYTES`) ~36 KiB per 42 calls; each tool ~1.1 KiB (its running
  record and timeline entry, or, ended, a learned level of the session's own: the core keeps at most 64) — ~280 KiB
  in all at every limit. A usual session holds a few KiB, and its timeline up to ~60 KiB once full (`tao bench
  memory --sessions` measures resident memory per session, typical and at the limits);
- per tool name: learned levels are bounded by the forecaster, not by names: at most `core.forecast_max_levels`
  (tool, program) levels of `core.forecast_window` durations each, least recently used evicted first
  (docs/coordinator.md; `tao bench memory`); a name is ≤ 200 characters;
- per open connection: its request line and headers ≤ `serve.MAX_HEADERS` lines of ≤ `serve.MAX_FIELD_BYTES`
  (128 KiB), held about twice while parsed, and a body ≤ `server.max_body_bytes` while it is read:
  `CONNECTION_BYTES_BOUND` + the body; measured 230 KiB for a connection stalled with every header line at its
  limit. A connection closes after `server.idle_timeout_s` without a request in progress or `server.body_timeout_s`
  into a body, and at most `server.max_connections` are open (`serve.py`).
"""

from __future__ import annotations

from collections.abc import Iterable

from tao_sdk import protocol

from ..core import model
from ..core.settings import CoreSettings
from .errors import RequestError

SESSION_BYTES_BOUND = 320 * 1024
"""What one registered session can make the coordinator hold, at most (see the module docstring)."""

CONNECTION_BYTES_BOUND = 2 * 32 * 4096 + 64 * 1024
"""What one open connection can make the coordinator hold before its body is read (see the module docstring)."""


def utf8_bytes(texts: Iterable[str | None]) -> int:
    return sum(len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass")) for text in texts if text)


def context_bytes(context: protocol.AgentContext | model.AgentProfile, tools: Iterable[str], step_id: str) -> int:
    """UTF-8 bytes of a context's text, with `tools` as its expected tools and `step_id` as the session's step."""
    fixed = (context.harness, context.workflow_id, context.parent_session_id, context.model, context.client_session_id)
    labels = (text for pair in context.labels.items() for text in pair)
    return utf8_bytes(fixed) + utf8_bytes(labels) + utf8_bytes(tools) + utf8_bytes((step_id,))


def check_context(context: protocol.AgentContext, settings: CoreSettings) -> None:
    """A registration's context within `settings.max_context_bytes`, or a 422 naming it."""
    taken, limit = context_bytes(context, context.expected_next_tools, ""), settings.max_context_bytes
    if taken > limit:
        raise RequestError(
            422, f"context: takes {taken:,} bytes of UTF-8; a session's may take at most {limit:,}", "context"
        )


def check_acquire(session: model.AgentSession | None, body: protocol.AcquireRequest, settings: CoreSettings) -> None:
    """The session's context with the acquire's step id and expected tools within `settings.max_context_bytes`, or
    a 422. Nothing to check for a session the core does not know (the core answers that)."""
    if session is None or (body.step_id is None and body.expected_next_tools is None):
        return
    tools = session.context.expected_next_tools if body.expected_next_tools is None else body.expected_next_tools
    step = session.step_id if body.step_id is None else body.step_id
    taken, limit = context_bytes(session.context, tools, step), settings.max_context_bytes
    if taken > limit:
        field = "expected_next_tools" if body.expected_next_tools is not None else "step_id"
        message = f"{field}: the session's context would take {taken:,} bytes of UTF-8, at most {limit:,}"
        raise RequestError(422, message, field)


def check_tool_start(
    session: model.AgentSession | None, body: protocol.ToolStartRequest, settings: CoreSettings
) -> None:
    """Room for one more running tool in the session: `settings.max_running_tools` and `max_running_tool_bytes`, or
    a 409. A session the core does not know, or a call id it runs already, is the core's to answer."""
    if session is None or any(tool.call_id == body.call_id for tool in session.tools):
        return
    if len(session.tools) >= (most := settings.max_running_tools):
        raise RequestError(409, f"the session already runs {most} tools; end one first", "call_id")
    running = utf8_bytes(text for tool in session.tools for text in (tool.call_id, tool.tool, tool.program))
    taken = running + utf8_bytes((body.call_id, body.tool, body.program))
    if taken > (limit := settings.max_running_tool_bytes):
        message = (
            f"the session's running tools would take {taken:,} bytes of UTF-8 in call ids, names and programs, "
            f"at most {limit:,}; end one first"
        )
        raise RequestError(409, message, "call_id")
