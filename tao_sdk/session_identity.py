"""Which session a model call belongs to, from what harnesses send today (`tao proxy`; no I/O).

The first of these headers that is present names the session:

| header | sent by |
|---|---|
| `X-Claude-Code-Session-Id` | Claude Code, every request |
| `x-session-affinity` | OpenCode (with `x-session-id`, to providers other than its own) |
| `X-Session-Id` | OpenCode; any client |
| `x-tao-session` | TAO's OpenCode plugin; any client |
| `session-id` | Codex (`codex-rs/codex-api/src/requests/headers.rs`; older releases sent `session_id`) |
| `session_id` | Codex, older releases |

Gemini CLI sends none (its `x-gemini-api-privileged-user-id` names the installation, not a session, and would
merge every session of a machine); mini-swe-agent (litellm) sends none.

Without one, a conversation is named by a digest of how it began, which every request of it repeats: the system
prompt (OpenAI `system`/`developer` messages before the first user message, or Anthropic `system`) and the first
user message, their text only (`cache_control` marks move from turn to turn; a system block starting with
`x-anthropic-billing-header` carries a per-request hash and is left out). Two agents given the same system prompt
and the same first message share a session: give each its own header. A request that has no user message
(a completion of a bare prompt, a model list) belongs to the one anonymous session, `ANONYMOUS`.

An id the coordinator would refuse (`ids.SESSION_ID_PATTERN`, e.g. one with spaces) is replaced by a stable digest
of it. Invariant: the same headers and the same conversation opening always give the same id.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any

from .ids import SESSION_ID_PATTERN

SESSION_HEADERS = (
    "X-Claude-Code-Session-Id",
    "x-session-affinity",
    "X-Session-Id",
    "x-tao-session",
    "session-id",
    "session_id",
)
ANONYMOUS = "tao-proxy-anonymous"
REPLACED_PREFIX = "tao-proxy-"
CONVERSATION_PREFIX = "tao-conversation-"
BILLING_BLOCK = "x-anthropic-billing-header"
_VALID_SESSION_ID = re.compile(SESSION_ID_PATTERN)


def session_id_of(headers: Mapping[str, str], payload: Any) -> str:
    """The session of a request: its first session header, else the digest of its conversation's opening."""
    named = next((headers[h] for h in SESSION_HEADERS if headers.get(h)), None)
    if named is None:
        opening = conversation_opening(payload)
        if opening is None:
            return ANONYMOUS
        return CONVERSATION_PREFIX + hashlib.sha256(opening.encode()).hexdigest()[:32]
    if _VALID_SESSION_ID.fullmatch(named):
        return named
    return REPLACED_PREFIX + hashlib.sha256(named.encode()).hexdigest()[:32]


def conversation_opening(payload: Any) -> str | None:
    """The text a conversation began with (system prompt and first user message), None without a user message."""
    messages = payload.get("messages") if isinstance(payload, dict) else None
    if not isinstance(messages, list):
        return None
    system = [_text(payload.get("system"))]
    for message in messages:
        if not isinstance(message, dict):
            continue
        role = message.get("role")
        if role in ("system", "developer"):
            system.append(_text(message.get("content")))
        elif role == "user":
            return json.dumps([system, _text(message.get("content"))])
        else:
            return None
    return None


def _text(content: object) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    texts = [block.get("text") for block in content if isinstance(block, dict)]
    return "\n".join(t for t in texts if isinstance(t, str) and not t.startswith(BILLING_BLOCK))
