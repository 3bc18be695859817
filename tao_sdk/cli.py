"""The `tao` command. Only the chosen subcommand's module is imported, so `tao --help` stays fast and a missing
optional dependency is reported by name instead of as a traceback. A command module imports what it runs (the
planner, aiohttp, numpy) inside `run`, so `tao COMMAND --help` stays fast too (`tests/test_cli_imports.py`)."""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import re
import sys
from collections.abc import Callable, Sequence
from types import ModuleType

COMMANDS: dict[tuple[str, ...], tuple[str, str]] = {
    ("demo",): (
        "tao_coordinator.demo.run",
        "run TAO against a simple baseline on a small fake vLLM fleet with synthetic agents (about a minute)",
    ),
    ("sim",): (
        "tao_coordinator.sim.cli",
        "replay agent traces through scheduling policies on a simulated vLLM fleet and compare them",
    ),
    ("proxy",): (
        "tao_sdk.proxy_cli",
        "a local OpenAI/Anthropic endpoint that routes each call to the node the coordinator assigned",
    ),
    ("coordinator",): (
        "tao_coordinator.web.cli",
        "run the coordinator beside a vLLM fleet",
    ),
    ("top",): (
        "tao_sdk.top",
        "a live terminal view of a coordinator's nodes and sessions, refreshed every second",
    ),
    ("bench", "coordinator"): (
        "tao_coordinator.bench.coordinator",
        "acquire round trip and event ingestion of a live coordinator on loopback (--ha: replicas on Redis, faults)",
    ),
    ("bench", "faults"): (
        "tao_coordinator.bench.fault_table",
        "every fault a fleet meets (dead or refusing nodes, bad scrapes, a full disk, floods, Redis lost) as a table",
    ),
    ("bench", "memory"): (
        "tao_coordinator.bench.memory",
        "a live coordinator's memory and database stay bounded when clients name 100,000 distinct tools",
    ),
    ("bench", "sdk"): (
        "tao_coordinator.bench.sdk",
        "the SDK's added latency per model call against calling the node directly",
    ),
    ("bench", "estimator"): (
        "tao_coordinator.bench.estimator",
        "tool-duration prediction on the real traces: the coordinator's bound against simple alternatives",
    ),
    ("bench", "planner"): (
        "tao_coordinator.bench.planner",
        "time the planner on the snapshots of simulated replays and measure its gap to the exact MILP",
    ),
    ("bench", "compare"): (
        "tao_coordinator.bench.compare",
        "TAO, its ablations and every baseline side by side on the dev traces (the published table)",
    ),
    ("fake-vllm",): (
        "tao_coordinator.fakevllm.cli",
        "serve a fake vLLM node: vLLM's HTTP, metrics and KV-event formats over the simulated node",
    ),
    ("bench", "fake-vllm"): (
        "tao_coordinator.fakevllm.bench",
        "measure the fake vLLM server: startup time, requests/s and p99 latency of concurrent streams",
    ),
    ("hook", "claude-code"): (
        "tao_integrations.claude_code",
        "report one Claude Code hook event (stdin) to `tao proxy`; installed by `tao install claude-code`",
    ),
    ("install", "claude-code"): (
        "tao_integrations.claude_code_install",
        "add TAO's hooks and the proxy's address to Claude Code's settings (or --uninstall them)",
    ),
    ("install", "opencode"): (
        "tao_integrations.opencode_install",
        "add TAO's plugin and a provider pointing at `tao proxy` to OpenCode's config (or --uninstall them)",
    ),
}

SERVER_EXTRA = "pip install 'tao-sdk[server]'"


def _load(module_name: str) -> ModuleType:
    try:
        return importlib.import_module(module_name)
    except ImportError as error:
        missing = error.name or str(error)
        sys.exit(f"tao: this command needs {missing!r}, which is not installed; try: {SERVER_EXTRA}")


HELP = ("-h", "--help")


def version() -> str:
    """The installed distribution's version; a source tree that was never installed has none to report."""
    try:
        return importlib.metadata.version("tao-sdk")
    except importlib.metadata.PackageNotFoundError:
        return "unknown (not installed; pip install -e .)"


def usage(prefix: tuple[str, ...] = ()) -> str:
    """Usage of every command starting with `prefix` (all commands when empty), one line each."""
    chosen = {words: help_text for words, (_, help_text) in COMMANDS.items() if words[: len(prefix)] == prefix}
    width = max(len(" ".join(words)) for words in chosen)
    group = " ".join(("tao", *prefix))
    lines = [f"usage: {group} {'SUBCOMMAND' if prefix else 'COMMAND'} [options]", ""]
    if not prefix:
        lines += ["Tool-aware scheduling of agent sessions on vLLM fleets.", ""]
    lines += [f"  tao {' '.join(words):<{width}}  {help_text}" for words, help_text in chosen.items()]
    lines += ["", "`tao COMMAND --help` shows a command's options; `tao --version` the installed version."]
    return "\n".join(lines)


def _groups() -> set[str]:
    """First words that only lead to subcommands (`bench`, `hook`, `install`), never run on their own."""
    return {words[0] for words in COMMANDS if len(words) > 1} - {words[0] for words in COMMANDS if len(words) == 1}


def _without_command(words: list[str]) -> int:
    """Answers a command line that names no runnable command: help, version, a bare group, or an unknown word.

    `--help` (for `tao` or a group) prints to stdout and exits 0; a bare group such as `tao bench` is a usage
    error: its subcommands go to stderr and the exit status is 2, like argparse's for a missing argument."""
    if not words or words[0] in HELP:
        print(usage())
        return 0
    if words[0] == "--version":
        print(f"tao {version()}")
        return 0
    group = (words[0],) if words[0] in _groups() else ()
    if group and words[1:2] and words[1] in HELP:
        print(usage(group))
        return 0
    if group and len(words) == 1:
        print(f"tao {words[0]}: a subcommand is required\n", file=sys.stderr)
    else:
        print(f"tao: unknown command {' '.join(words[:2])!r}\n", file=sys.stderr)
    print(usage(group), file=sys.stderr)
    return 2


class DefaultsShown(argparse.HelpFormatter):
    """Ends each option's help with its default, `(default: X)`, so no help string repeats a default by hand; not
    when the help already speaks of it (`default`, or a last parenthesis opening with it, `(0: none)`), or when there
    is none to show (None, off, an empty list or string)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text, default = action.help, action.default
        nothing = default is None or default is False or default is argparse.SUPPRESS or default in ([], "")
        if not text or not action.option_strings or nothing:
            return text
        shown = "on" if default is True else f"{default:g}" if isinstance(default, float) else str(default)
        if "default" in text or re.search(rf"\({re.escape(shown)}\b[^()]*\)$", text):
            return text
        return f"{text} (default: {shown.replace('%', '%%')})"


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    matches = [key for key in COMMANDS if tuple(words[: len(key)]) == key]
    if not matches:
        return _without_command(words)
    key = max(matches, key=len)
    module_name, help_text = COMMANDS[key]
    module = _load(module_name)
    parser = argparse.ArgumentParser(prog="tao " + " ".join(key), description=help_text, formatter_class=DefaultsShown)
    add_arguments: Callable[[argparse.ArgumentParser], None] = module.add_arguments
    add_arguments(parser)
    run: Callable[[argparse.Namespace], int] = module.run
    return run(parser.parse_args(words[len(key) :]))


if __name__ == "__main__":
    sys.exit(main())
