"""What `tao install …` shares: the options saying where to install and what to change, reading a JSON settings file
and writing it back with a diff (or only showing the diff), and the command line that runs `tao`.

Invariant: a file that exists but is not a JSON object is never overwritten (`InstallError` names it); unchanged
files are not rewritten.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import shlex
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from .relay import DEFAULT_PROXY_URL


class InstallError(Exception):
    """A settings file cannot be changed safely; the message says which and why."""


def add_place_arguments(parser: argparse.ArgumentParser, project: str, user: str) -> None:
    """`--project DIR` or `--user` (their help says where each installs), and `--proxy`."""
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--project", metavar="DIR", help=project)
    where.add_argument("--user", action="store_true", help=user)
    parser.add_argument("--proxy", default=DEFAULT_PROXY_URL, help=f"URL of `tao proxy` ({DEFAULT_PROXY_URL})")


def add_change_arguments(parser: argparse.ArgumentParser) -> None:
    """`--uninstall` and `--dry-run`, the last options of every `tao install …`."""
    parser.add_argument("--uninstall", action="store_true", help="remove what an install added")
    parser.add_argument("--dry-run", action="store_true", help="print the change without writing it")


def bad_proxy(args: argparse.Namespace, command: str) -> bool:
    """Whether `--proxy` is not an http(s) URL (then `command` has said so on stderr)."""
    if args.proxy.startswith(("http://", "https://")):
        return False
    print(f"{command}: --proxy: expected an http(s) URL, got {args.proxy!r}", file=sys.stderr)
    return True


def user_dir(variable: str, default: Path) -> Path:
    """The folder `$variable` names (a harness's own setting, e.g. `CLAUDE_CONFIG_DIR`), else `default`."""
    configured = os.environ.get(variable)
    return Path(configured) if configured else default


def change_file(path: Path, change: Callable[[dict[str, Any]], dict[str, Any]], dry_run: bool) -> bool:
    """Apply `change` to the JSON object in `path` (removing the file when nothing is left), showing the diff; True
    when something changes. `InstallError` when the file is not a JSON object."""
    old_text, data = read_object(path)
    new = change(data)
    return apply(path, old_text, render(new) if new else "", dry_run, sys.stdout)


def read_object(path: Path) -> tuple[str, dict[str, Any]]:
    """The file's text ("" when missing) and its JSON object ({} when missing or empty)."""
    if not path.exists():
        return "", {}
    text = path.read_text(encoding="utf-8")
    if not text.strip():
        return text, {}
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise InstallError(f"{path}: not valid JSON ({error}); fix or move it, then run this again") from None
    if not isinstance(data, dict):
        raise InstallError(f"{path}: expected a JSON object at the top level")
    return text, data


def render(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def apply(path: Path, old: str, new: str, dry_run: bool, out: TextIO) -> bool:
    """Print the unified diff from `old` to `new` and, unless `dry_run`, write `new` (removing the file when `new`
    is empty). True when something changes."""
    if old == new:
        print(f"{path}: already up to date", file=out)
        return False
    diff = difflib.unified_diff(
        old.splitlines(keepends=True), new.splitlines(keepends=True), f"{path} (before)", f"{path} (after)"
    )
    out.writelines(line if line.endswith("\n") else line + "\n" for line in diff)
    if not dry_run:
        if new:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(new, encoding="utf-8")
        else:
            path.unlink(missing_ok=True)
    return True


def tao_command(*words: str) -> str:
    """A shell command running `tao WORDS…` with this installation: the `tao` script beside this interpreter, else
    the one on PATH, else `python -m tao_sdk.cli`."""
    beside = Path(sys.executable).parent / "tao"
    found = str(beside) if beside.is_file() else shutil.which("tao")
    prefix = [found] if found else [sys.executable, "-m", "tao_sdk.cli"]
    return shlex.join([*prefix, *words])
