"""Which Claude Code sessions have a `background-tasks` wait open, remembered across hook processes.

Each hook event is its own short-lived process, and a UserPromptSubmit payload does not say whether the previous
turn ended with background work: every prompt, the first of a `claude -p` run included, would end a wait, and the
coordinator answers 409 to the end of a tool that never started. So the Stop hook that starts a wait leaves a marker
file named after the session, and only a UserPromptSubmit that finds (and removes) it ends the wait.

Invariants: at most one marker per session; a wait is started only when none is open and ended only when one is;
SessionEnd removes the marker. Markers live in `$TAO_HOOK_STATE_DIR`, else `<tmp>/tao-claude-code-<uid>` (created
0700); a session that dies without SessionEnd leaves one empty file there. Session ids are checked against
`SESSION_ID_PATTERN` before they get here, so they are safe file names (no `/`). A marker that cannot be written or
read counts as absent: the hook then reports less, never fails.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tao_sdk import environment

BACKGROUND_WAIT = "background-tasks"
"""Call id (and tool name) of the wait for background tasks after a turn; one at a time per session."""


def state_dir(env: Mapping[str, str]) -> Path:
    configured = environment.hook_state_dir(env)
    if configured:
        return Path(configured)
    uid = os.getuid() if hasattr(os, "getuid") else 0
    return Path(tempfile.gettempdir()) / f"tao-claude-code-{uid}"


def only_open_waits(events: list[dict[str, Any]], folder: Path) -> list[dict[str, Any]]:
    """`events` without a wait start while one is open nor a wait end while none is; records starts and ends."""
    kept = []
    for event in events:
        marker = folder / f"{event['session_id']}.wait"
        if event["kind"] == "close":
            with contextlib.suppress(OSError):
                marker.unlink(missing_ok=True)
        elif _call_id(event) == BACKGROUND_WAIT and event["kind"] == "tool_start":
            if not _create(marker):
                continue
        elif _call_id(event) == BACKGROUND_WAIT and event["kind"] == "tool_end":
            try:
                marker.unlink()
            except OSError:
                continue
        kept.append(event)
    return kept


def _call_id(event: Mapping[str, Any]) -> object:
    body = event.get("tool_start") or event.get("tool_end") or {}
    return body.get("call_id")


def _create(marker: Path) -> bool:
    """Creates the marker; False when it exists already or cannot be written."""
    try:
        marker.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        marker.touch(exist_ok=False)
    except OSError:
        return False
    return True
