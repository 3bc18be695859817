"""What hostile input can make the coordinator hold, and the one limit the protocol's models cannot state.

Every free string of the protocol is bounded by its pydantic model (`tao_sdk/protocol.py`): ids and tool names
1–200 characters (a session id only of `tao_sdk.ids.SESSION_ID_RULE`'s characters, never `/`), model, workflow,
parent session and step ids 200, harness 100, labels at most 50 with keys 1–64 and values ≤ 256 characters,
`expected_next_tools` ≤ 50 names (at registration and again on each acquire, which replaces them);
every integer ≤ 10**8 (and any JSON integer ≤ `body.MAX_INT_DIGITS` digits), every number finite. What is not a
field limit is here: a session runs at most `MAX_RUNNING_TOOLS` tools at once.

Memory bounds under hostile input (Python strings take up to 4 bytes a character plus ~60 bytes of header):

- per label: ≤ 64 + 256 characters: ≤ 1.5 KiB;
- per session (only API-token holders create one): its context — ≤ 50 labels, ≤ 50 expected tool names of ≤ 200
  characters, six strings of ≤ 200 (the step id among them) — ≤ 125 KiB, and ≤ `MAX_RUNNING_TOOLS` running tools
  whose call id and tool name are ≤ 200 characters each (≤ 1.8 KiB a tool), each string held about twice (the
  validated body's and the core's and forecaster's keys): `SESSION_BYTES_BOUND` all told; measured 478 KiB with
  every string at its limit in 4-byte characters (`tests/web/test_adversarial.py`), a few KiB for a usual session;
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

from .errors import RequestError
from .service import CoordinatorService

MAX_RUNNING_TOOLS = 64
"""Tools one session runs at once, at most (harnesses run a handful in parallel)."""

SESSION_BYTES_BOUND = 640 * 1024
"""What one registered session can make the coordinator hold, at most (see the module docstring)."""

CONNECTION_BYTES_BOUND = 2 * 32 * 4096 + 64 * 1024
"""What one open connection can make the coordinator hold before its body is read (see the module docstring)."""


def check_tool_start(service: CoordinatorService, session_id: str, call_id: str) -> None:
    session = service.coordinator.state.sessions.get(session_id)
    if session is None or len(session.tools) < MAX_RUNNING_TOOLS:
        return
    if all(tool.call_id != call_id for tool in session.tools):
        raise RequestError(409, f"the session already runs {MAX_RUNNING_TOOLS} tools; end one first", "call_id")
