"""Claude Code's tool timeouts, as duration hints: one rule for its hooks (`tao_integrations.claude_code`) and for
`tao proxy` inferring its tools from the wire (`inferred_tools.py`).

- `Bash`: Claude Code's effective timeout is min(`timeout` or `$BASH_DEFAULT_TIMEOUT_MS` (120 s),
  `$BASH_MAX_TIMEOUT_MS` (600 s, never below the default)); a `timeout N` in the command caps it further, its
  `sleep`s are the sleep hint (at most a day), and `run_in_background` or a trailing `&` runs it in the background
  (`hints.command_hints`).
- `TaskOutput`, unless `block` is false: it waits `timeout` ms (30 s by default), at most 600 s.
- any other tool: no hint.

`env` is the harness's environment where it is known (a hook runs in it); the wire does not show it, and the
defaults then stand.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .hints import command_hints

DEFAULT_BASH_TIMEOUT_MS = 120_000
MAX_BASH_TIMEOUT_MS = 600_000
DEFAULT_TASK_OUTPUT_TIMEOUT_MS = 30_000
MAX_SLEEP_S = 86_400.0


def tool_hints(tool: str, tool_input: Mapping[str, Any], env: Mapping[str, str]) -> dict[str, Any]:
    """Duration hints for one tool call (`tao_sdk.protocol.ToolHints` fields), in seconds."""
    if tool == "Bash":
        return bash_hints(tool_input, env)
    if tool == "TaskOutput" and tool_input.get("block", True) is not False:
        timeout_ms = milliseconds(tool_input.get("timeout"), DEFAULT_TASK_OUTPUT_TIMEOUT_MS)
        return {"timeout_s": min(timeout_ms, MAX_BASH_TIMEOUT_MS) / 1000}
    return {}


def bash_hints(tool_input: Mapping[str, Any], env: Mapping[str, str]) -> dict[str, Any]:
    default_ms = milliseconds(env.get("BASH_DEFAULT_TIMEOUT_MS"), DEFAULT_BASH_TIMEOUT_MS)
    max_ms = max(milliseconds(env.get("BASH_MAX_TIMEOUT_MS"), MAX_BASH_TIMEOUT_MS), default_ms)
    timeout_s = min(milliseconds(tool_input.get("timeout"), default_ms), max_ms) / 1000
    command = tool_input.get("command")
    parsed = command_hints(command) if isinstance(command, str) else None
    hints: dict[str, Any] = {
        "timeout_s": min(timeout_s, parsed.timeout_s) if parsed and parsed.timeout_s else timeout_s
    }
    if parsed and parsed.sleep_s:
        hints["sleep_s"] = min(parsed.sleep_s, MAX_SLEEP_S)
    hints["background"] = tool_input.get("run_in_background") is True or bool(parsed and parsed.background)
    return hints


def milliseconds(value: object, default: int) -> int:
    """A positive whole number of milliseconds from a harness's value; `default` for anything else."""
    try:
        number = int(float(value))  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        return default
    return number if number > 0 else default
