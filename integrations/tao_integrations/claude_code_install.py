"""`tao install claude-code`: merge TAO's hooks and an `env` block into a Claude Code settings file.

Where: `--project DIR` (default: the current directory) writes `DIR/.claude/settings.local.json` — the per-machine
project file, since the hook command and the proxy URL are paths and ports of this machine; `--user` writes
`~/.claude/settings.json` (`$CLAUDE_CONFIG_DIR/settings.json` when set).

What: one command hook (`tao hook claude-code`) per event listed in `HOOKS`, tool events only for the tools in
`TOOL_MATCHER` (each hook is a process start, and fast tools such as Read would pay more for the report than they
take), and `env`: `ANTHROPIC_BASE_URL` and `TAO_PROXY_URL` at the proxy, the model names with `--model` (and
`--small-model`, `SMALL_MODEL_KEYS`), the key with `--api-key`.

Invariants: other hooks and settings are kept as they are; installing twice gives the same file; `--uninstall`
removes only our hook handlers and puts back the `env` values we replaced (recorded in `TAO_MANAGED_ENV`).
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from functools import partial
from pathlib import Path
from typing import Any

from .install_files import (
    InstallError,
    add_change_arguments,
    add_place_arguments,
    bad_proxy,
    change_file,
    tao_command,
    user_dir,
)

HOOK_WORDS = ("hook", "claude-code")
TOOL_MATCHER = "^(Bash|TaskOutput|WebFetch|WebSearch|mcp__.*)$"
HOOKS: dict[str, tuple[str | None, int]] = {
    "SessionStart": (None, 5),
    "UserPromptSubmit": (None, 5),
    "PreToolUse": (TOOL_MATCHER, 5),
    "PostToolUse": (TOOL_MATCHER, 5),
    "PostToolUseFailure": (TOOL_MATCHER, 5),
    "Stop": (None, 5),
    "SessionEnd": (None, 10),
}
"""Event → (tool matcher, hook timeout in seconds). A timeout is only where Claude Code kills the hook: the hook
returns within its relay timeout (1.5 s) plus Python's start-up, and Claude Code waits no longer than it runs.
SessionEnd's 10 s replaces Claude Code's 1.5 s default, which a start-up slowed by a loaded machine can exceed: a
killed SessionEnd hook leaves the session holding its place until its lease runs out."""
BACKGROUND_HOOKS = frozenset({"PostToolUse", "PostToolUseFailure"})
"""Run with `"async": true` (Claude Code 2.1 runs them without waiting): the next model call does not wait for the
tool's end to be reported; `tao proxy` ends the tool at that call when the hook has not yet (`inferred_tools.py`).
PreToolUse stays synchronous: a start reported after the model call that follows the tool could not be placed."""
MODEL_KEYS = (
    "ANTHROPIC_MODEL",
    "ANTHROPIC_SMALL_FAST_MODEL",
    "ANTHROPIC_DEFAULT_HAIKU_MODEL",
    "ANTHROPIC_DEFAULT_SONNET_MODEL",
    "ANTHROPIC_DEFAULT_OPUS_MODEL",
    "CLAUDE_CODE_SUBAGENT_MODEL",
)
"""Every model setting of Claude Code, each set to `--model`: no call can name a model the fleet does not serve."""
SMALL_MODEL_KEYS = ("ANTHROPIC_SMALL_FAST_MODEL", "ANTHROPIC_DEFAULT_HAIKU_MODEL")
"""What `--small-model` sets instead: the small fast model (its side calls, e.g. tool-use summaries) and the `haiku`
alias (subagents that ask for it, as the built-in Explore agent does). `CLAUDE_CODE_SUBAGENT_MODEL` is then left
unset, since Claude Code puts every subagent on it whatever model the agent asks for, which would keep Explore off
the small model."""
MANAGED = "TAO_MANAGED_ENV"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_place_arguments(
        parser, "install into DIR/.claude/settings.local.json (default: .)", "install into ~/.claude/settings.json"
    )
    parser.add_argument("--model", help="served model name for every Claude Code model setting")
    parser.add_argument(
        "--small-model",
        help="served name of a small model for Claude Code's small fast model and the haiku alias (with --model)",
    )
    parser.add_argument("--api-key", help="ANTHROPIC_API_KEY to set (without a Claude login; any string)")
    add_change_arguments(parser)


def settings_path(args: argparse.Namespace) -> Path:
    if args.user:
        return user_dir("CLAUDE_CONFIG_DIR", Path.home() / ".claude") / "settings.json"
    return Path(args.project or ".") / ".claude" / "settings.local.json"


def is_ours(handler: object) -> bool:
    command = handler.get("command") if isinstance(handler, dict) else None
    return isinstance(command, str) and command.rstrip().endswith(" ".join(HOOK_WORDS))


def installed(settings: dict[str, Any], command: str, env: dict[str, str]) -> dict[str, Any]:
    """`settings` with our hooks running `command` and the `env` values set (replacing an earlier install)."""
    result = uninstalled(settings)
    hooks = result.setdefault("hooks", {})
    for event, (matcher, timeout) in HOOKS.items():
        group: dict[str, Any] = {} if matcher is None else {"matcher": matcher}
        handler: dict[str, Any] = {"type": "command", "command": command, "timeout": timeout}
        if event in BACKGROUND_HOOKS:
            handler["async"] = True
        group["hooks"] = [handler]
        hooks.setdefault(event, []).append(group)
    current = result.setdefault("env", {})
    replaced = {key: current.get(key) for key in env}
    current.update(env)
    current[MANAGED] = json.dumps(replaced, sort_keys=True)
    return result


def uninstalled(settings: dict[str, Any]) -> dict[str, Any]:
    """`settings` without our hook handlers and with the `env` values an install replaced put back; containers
    that only our entries filled are removed."""
    result = copy.deepcopy(settings)
    hooks = result.get("hooks")
    if isinstance(hooks, dict):
        for event, groups in list(hooks.items()):
            kept = [g for g in map(_without_ours, groups) if g is not None] if isinstance(groups, list) else groups
            if kept != groups:
                hooks[event] = kept
                if not kept:
                    del hooks[event]
                if not hooks:
                    del result["hooks"]
    env = result.get("env")
    if isinstance(env, dict) and MANAGED in env:
        for key, previous in _managed(env.pop(MANAGED)).items():
            if previous is None:
                env.pop(key, None)
            else:
                env[key] = previous
        if not env:
            del result["env"]
    return result


def _without_ours(group: object) -> object:
    """The matcher group without our handlers; None when nothing else was in it."""
    if not isinstance(group, dict) or not isinstance(group.get("hooks"), list):
        return group
    kept = [handler for handler in group["hooks"] if not is_ours(handler)]
    if not kept and group["hooks"]:
        return None
    return {**group, "hooks": kept}


def _managed(value: object) -> dict[str, str | None]:
    try:
        data = json.loads(value) if isinstance(value, str) else {}
    except json.JSONDecodeError:
        return {}
    if not isinstance(data, dict):
        return {}
    return {str(k): v if isinstance(v, str) else None for k, v in data.items()}


def env_block(args: argparse.Namespace) -> dict[str, str]:
    proxy = args.proxy.rstrip("/")
    env = {"ANTHROPIC_BASE_URL": proxy, "TAO_PROXY_URL": proxy}
    if args.model:
        env.update(dict.fromkeys(MODEL_KEYS, args.model))
    if args.small_model:
        env.update(dict.fromkeys(SMALL_MODEL_KEYS, args.small_model))
        del env["CLAUDE_CODE_SUBAGENT_MODEL"]
    if args.api_key:
        env["ANTHROPIC_API_KEY"] = args.api_key
    return env


def run(args: argparse.Namespace) -> int:
    if bad_proxy(args, "tao install claude-code"):
        return 2
    if args.small_model and not args.model:
        print("tao install claude-code: --small-model needs --model (the main model)", file=sys.stderr)
        return 2
    path = settings_path(args)
    change = (
        uninstalled if args.uninstall else partial(installed, command=tao_command(*HOOK_WORDS), env=env_block(args))
    )
    try:
        changed = change_file(path, change, args.dry_run)
    except InstallError as error:
        print(f"tao install claude-code: {error}", file=sys.stderr)
        return 1
    if changed and not args.dry_run and not args.uninstall:
        print(f"TAO hooks installed in {path}; run `tao proxy --coordinator URL[,URL…] --port …` at {args.proxy}.")
    return 0
