"""What `tao install …` shares: reading a JSON settings file, writing it back with a diff (or only showing the diff),
and the command line that runs `tao`.

Invariant: a file that exists but is not a JSON object is never overwritten (`InstallError` names it); unchanged
files are not rewritten.
"""

from __future__ import annotations

import difflib
import json
import shlex
import shutil
import sys
from pathlib import Path
from typing import Any, TextIO


class InstallError(Exception):
    """A settings file cannot be changed safely; the message says which and why."""


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
