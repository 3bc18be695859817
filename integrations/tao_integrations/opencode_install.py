"""`tao install opencode`: place TAO's OpenCode plugin and a `tao` provider that points OpenCode at `tao proxy`.

Where: `--project DIR` (default: the current directory) writes `DIR/.opencode/plugin/tao.ts` and merges into
`DIR/.opencode/opencode.json`; `--user` uses `$XDG_CONFIG_HOME/opencode/` (default `~/.config/opencode/`). OpenCode
loads every `plugin/*.ts` of those directories by itself; the plugin finds the relay through the provider's
`baseURL`.

The provider is `@ai-sdk/openai-compatible` (bundled with OpenCode) at `<proxy>/v1` with one model, whose output
limit is set (without it OpenCode asks for 32,000 tokens, more than a small vLLM context allows); `model` and
`small_model` are set to it, since OpenCode's first request (the title) goes to `small_model`.

Invariants: other providers, plugins and settings are kept; installing twice gives the same files; `--uninstall`
removes the `tao` provider, `model`/`small_model` only while they name it, and the plugin file only if it is ours.
"""

from __future__ import annotations

import argparse
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
    user_dir,
)

PROVIDER = "tao"
PLUGIN_MARKER = "export const TaoPlugin"
PLUGIN_SOURCE = Path(__file__).parent / "opencode_plugin.ts"
"""The plugin: in the repository a symlink to `integrations/opencode/src/index.ts` (the npm package's only source
file); a built wheel holds a copy, so a plain `pip install` can place it too."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_place_arguments(parser, "install into DIR/.opencode/ (default: .)", "install into ~/.config/opencode/")
    parser.add_argument("--model", help="served model name (required to install)")
    parser.add_argument("--context", type=int, default=32_768, help="the model's context length")
    parser.add_argument("--output", type=int, default=4_096, help="most tokens OpenCode asks for per call")
    parser.add_argument("--api-key", default="tao", help="key sent to the proxy (it does not check it)")
    add_change_arguments(parser)


def config_dir(args: argparse.Namespace) -> Path:
    if args.user:
        return user_dir("XDG_CONFIG_HOME", Path.home() / ".config") / "opencode"
    return Path(args.project or ".") / ".opencode"


def provider(args: argparse.Namespace) -> dict[str, Any]:
    limit = {"context": args.context, "output": args.output}
    return {
        "npm": "@ai-sdk/openai-compatible",
        "name": "TAO (tao proxy)",
        "options": {
            "baseURL": args.proxy.rstrip("/") + "/v1",
            "apiKey": args.api_key,
            "headers": {"x-agent-harness": "opencode"},
        },
        "models": {args.model: {"name": args.model, "limit": limit}},
    }


def installed(config: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    result = uninstalled(config)
    result.setdefault("provider", {})[PROVIDER] = provider(args)
    result["model"] = result["small_model"] = f"{PROVIDER}/{args.model}"
    return result


def uninstalled(config: dict[str, Any]) -> dict[str, Any]:
    result = dict(config)
    providers = result.get("provider")
    if isinstance(providers, dict) and PROVIDER in providers:
        result["provider"] = {k: v for k, v in providers.items() if k != PROVIDER}
        if not result["provider"]:
            del result["provider"]
    for key in ("model", "small_model"):
        if isinstance(result.get(key), str) and result[key].startswith(PROVIDER + "/"):
            del result[key]
    return result


def _plugin_change(path: Path, install: bool, dry_run: bool) -> bool:
    current = path.read_text(encoding="utf-8") if path.exists() else None
    if current is not None and PLUGIN_MARKER not in current:
        raise InstallError(f"{path}: exists and is not TAO's plugin; move it away first")
    wanted = PLUGIN_SOURCE.read_text(encoding="utf-8") if install else None
    if current == wanted:
        print(f"{path}: already up to date")
        return False
    print(f"{'write' if wanted else 'remove'} {path}" + (" (dry run)" if dry_run else ""))
    if not dry_run:
        if wanted is None:
            path.unlink()
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(wanted, encoding="utf-8")
    return True


def run(args: argparse.Namespace) -> int:
    if not args.uninstall and not args.model:
        print("tao install opencode: --model: the served model name is required", file=sys.stderr)
        return 2
    if bad_proxy(args, "tao install opencode"):
        return 2
    if not args.uninstall and not PLUGIN_SOURCE.is_file():
        print(f"tao install opencode: the plugin source {PLUGIN_SOURCE} is missing", file=sys.stderr)
        return 1
    directory = config_dir(args)
    path = directory / "opencode.json"
    try:
        if (directory / "opencode.jsonc").exists():
            raise InstallError(f"{directory / 'opencode.jsonc'} exists: merge the `tao` provider by hand")
        change_file(path, uninstalled if args.uninstall else partial(installed, args=args), args.dry_run)
        _plugin_change(directory / "plugin" / "tao.ts", not args.uninstall, args.dry_run)
    except InstallError as error:
        print(f"tao install opencode: {error}", file=sys.stderr)
        return 1
    return 0
