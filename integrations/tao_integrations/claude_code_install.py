"""`tao install claude-code`: merge TAO's hooks and an `env` block into a Claude Code settings file.

Where: `--project DIR` (default: the current directory) writes `DIR/.claude/settings.local.json` — the per-machine
project file, since the hook command and the proxy URL are paths and ports of this machine; `--user` writes
`~/.claude/settings.json` (`$CLAUDE_CONFIG_DIR/settings.json` when set).

What: one command hook (`tao hook claude-code`) per event listed in `HOOKS`, tool events only for the tools in
`TOOL_MATCHER` (each hook is a process start, and fast tools such as Read would pay more for the report than they
take), and `env`: `ANTHROPIC_BASE_URL` and `TAO_PROXY_URL` at the proxy, the model names with `--model`, the key
with `--api-key`.

Invariants: other hooks and settings are kept as they are; installing twice gives the same file; `--uninstall`
removes only our hook handlers and puts back the `env` values we replaced (recorded in `TAO_MANAGED_ENV`).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
from pathlib import Path
from typing import Any

from .install_files import InstallError, apply, read_object, render, tao_command
from .relay import DEFAULT_PROXY_URL

HOOK_WORDS = ("hook", "claude-code")
TOOL_MATCHER = "^(Bash|TaskOutput|WebFetch|WebSearch|mcp__.*)$"
HOOKS: dict[str, tuple[str | None, int]] = {
    "SessionStart": (None, 5),
    "UserPromptSubmit": (None, 5),
    "PreToolUse": (TOOL_MATCHER, 5),
    "PostToolUse": (TOOL_MATCHER, 5),
    "PostToolUseFailure": (TOOL_MATCHER, 5),
    "Stop": (None, 5),
    "SessionEnd": (None, 3),
}
"""Event → (tool matcher, hook timeout in seconds). SessionEnd's 3 s also raises Claude Code's 1.5 s default."""
MODEL_KEYS = (
    "ANTHROPIC_MODEL",
    "ANTHROPIC_SMALL_FAST_MODEL",
    "ANTHROPIC_DEFAULT_HAIKU_MODEL",
    "ANTHROPIC_DEFAULT_SONNET_MODEL",
    "ANTHROPIC_DEFAULT_OPUS_MODEL",
    "CLAUDE_CODE_SUBAGENT_MODEL",
)
MANAGED = "TAO_MANAGED_ENV"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--project", metavar="DIR", help="install into DIR/.claude/settings.local.json (default: .)")
    where.add_argument("--user", action="store_true", help="install into ~/.claude/settings.json")
    parser.add_argument("--proxy", default=DEFAULT_PROXY_URL, help=f"URL of `tao proxy` ({DEFAULT_PROXY_URL})")
    parser.add_argument("--model", help="served model name for every Claude Code model setting")
    parser.add_argument("--api-key", help="ANTHROPIC_API_KEY to set (without a Claude login; any string)")
    parser.add_argument("--uninstall", action="store_true", help="remove what an install added")
    parser.add_argument("--dry-run", action="store_true", help="print the change without writing it")


def settings_path(args: argparse.Namespace) -> Path:
    if args.user:
        config = os.environ.get("CLAUDE_CONFIG_DIR")
        return (Path(config) if config else Path.home() / ".claude") / "settings.json"
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
        group["hooks"] = [{"type": "command", "command": command, "timeout": timeout}]
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
    if args.api_key:
        env["ANTHROPIC_API_KEY"] = args.api_key
    return env


def run(args: argparse.Namespace) -> int:
    if not args.proxy.startswith(("http://", "https://")):
        print(f"tao install claude-code: --proxy: expected an http(s) URL, got {args.proxy!r}", file=sys.stderr)
        return 2
    path = settings_path(args)
    try:
        old_text, settings = read_object(path)
    except InstallError as error:
        print(f"tao install claude-code: {error}", file=sys.stderr)
        return 1
    if args.uninstall:
        new = uninstalled(settings)
    else:
        new = installed(settings, tao_command(*HOOK_WORDS), env_block(args))
    new_text = render(new) if new else ""
    changed = apply(path, old_text, new_text, args.dry_run, sys.stdout)
    if changed and not args.dry_run and not args.uninstall:
        print(f"TAO hooks installed in {path}; run `tao proxy --coordinator URL[,URL…] --port …` at {args.proxy}.")
    return 0
