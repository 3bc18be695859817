"""Duration hints parsed from a shell command, for `tool_start`.

What is understood (anything else contributes nothing, never an error):
- `sleep N` — N seconds (a number with an optional `s`, `m`, `h` or `d` suffix); several sleeps in one command add
  up when they run one after another (`;`, `&&`, `||`, newlines);
- `timeout [options] DURATION command…` — the command is killed after DURATION: an upper cap on the whole tool;
- a trailing `&` (or `nohup … &`) — the command runs in the background: the tool returns at once.
Pipes (`|`) run their parts concurrently, so sleeps inside a pipeline count once, by the longest.

`program_of` names the program a command runs, for `tool_start`'s `program` (the coordinator learns tool durations
per tool and program; the command text itself is never sent). The rule is the one of the Claude Code traces' `prog`
(`traces/README.md` §3), parsed with shell quoting: the first word of the first part (`;`, `&&`, `||`, `|`, `&`,
newlines, `(`, `{` and `!` separate or open parts), as a basename (`./build/run.sh` → `run.sh`,
`/usr/bin/python3` → `python3`), after these are skipped:
- leading `VAR=value` assignments (`FOO=1 make` → `make`; `X=1 && ls` → `ls`);
- leading `cd DIR` parts (`cd repo && pytest -q` → `pytest`), since they run nothing; a command that only changes
  directory is `cd`.
Wrappers are not skipped: `sudo`, `env`, `time`, `nohup`, `timeout 60 …`, `xargs` are the program themselves, as
are shell keywords and builtins (`for`, `if`, `source`, `export`). The name keeps only `[A-Za-z0-9._+-]`, starts
with a letter or digit and is cut to 64 characters; none (None) when nothing is left, the command is empty, or the
word is an expansion (`$CMD`, `` `…` ``) whose value only the shell knows.
"""

from __future__ import annotations

import contextlib
import io
import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass

_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION = re.compile(r"^(\d+(?:\.\d*)?|\.\d+)([smhd]?)$")
_SEQUENCE = re.compile(r"\s*(?:&&|\|\||;|\n)\s*")


@dataclass(frozen=True, slots=True)
class CommandHints:
    sleep_s: float | None = None
    timeout_s: float | None = None
    background: bool = False


def parse_duration(text: str) -> float | None:
    match = _DURATION.match(text.strip())
    return float(match.group(1)) * _UNITS[match.group(2)] if match else None


def _words(part: str) -> list[str]:
    try:
        return shlex.split(part)
    except ValueError:
        return part.split()


def _sleep_in(words: list[str]) -> float:
    total = 0.0
    for k, word in enumerate(words[:-1]):
        if word == "sleep":
            total += parse_duration(words[k + 1]) or 0.0
    return total


_TIMEOUT_OPTIONS_WITH_VALUE = ("-k", "-s", "--kill-after", "--signal")


def _timeout_in(words: list[str]) -> float | None:
    if not words or words[0] != "timeout":
        return None
    rest = iter(words[1:])
    for word in rest:
        if word in _TIMEOUT_OPTIONS_WITH_VALUE:
            next(rest, None)
        elif not word.startswith("-"):
            return parse_duration(word)
    return None


def command_hints(command: str) -> CommandHints:
    stripped = command.strip()
    background = stripped.endswith("&") and not stripped.endswith("&&")
    sleep = 0.0
    caps: list[float] = []
    for part in _SEQUENCE.split(stripped.rstrip("&")):
        stages = [_words(stage) for stage in part.split("|")]
        sleep += max((_sleep_in(words) for words in stages), default=0.0)
        caps += [cap for cap in (_timeout_in(words) for words in stages) if cap is not None]
    return CommandHints(
        sleep_s=sleep or None,
        timeout_s=min(caps) if caps else None,
        background=background,
    )


PROGRAM_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._+-]*$"
"""What `tool_start`'s `program` may be (with at most `PROGRAM_MAX_CHARS`): a file name, never a command line."""
PROGRAM_MAX_CHARS = 64
_OPERATORS = ";&|()\n"
_OPENERS = ("{", "!")
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\+?=")
_NOT_PROGRAM = re.compile(r"[^A-Za-z0-9._+-]")


class _KeepNewlines(io.StringIO):
    """Ends a `#` comment before its newline, which then still separates commands (shlex would eat it)."""

    def readline(self, size: int = -1, /) -> str:  # type: ignore[override]  # typeshed's IOBase says bytes
        line = super().readline(size)
        if line.endswith("\n"):
            self.seek(self.tell() - 1)
        return line


def _tokens(command: str) -> Iterator[str]:
    source = _KeepNewlines(command.replace("\\\n", " "))
    lexer = shlex.shlex(source, posix=True, punctuation_chars=_OPERATORS)
    lexer.whitespace, lexer.whitespace_split = " \t\r", True
    with contextlib.suppress(ValueError):  # an unbalanced quote ends the words, after those read so far
        yield from lexer


def _name(word: str) -> str | None:
    if "$" in word or "`" in word:
        return None
    name = _NOT_PROGRAM.sub("", word.rstrip("/").rsplit("/", 1)[-1]).lstrip("._+-")
    return name[:PROGRAM_MAX_CHARS] or None


def program_of(command: str) -> str | None:
    """The program `command` runs first (see the module docstring): `"cd x && FOO=1 pytest -q"` → `"pytest"`."""
    changes_directory = in_cd = in_value = False
    depth = 0  # of the `$(…)` that an assignment's value opened
    for token in _tokens(command):
        is_operator = all(char in _OPERATORS for char in token)
        if in_value and is_operator and (depth or token.startswith("(")):
            depth += token.count("(") - token.count(")")
            in_value = depth > 0
        elif in_value and depth:
            continue
        elif in_cd:
            in_cd = not is_operator
        elif _ASSIGNMENT.match(token):
            in_value, depth = token.endswith("$"), 0
        elif is_operator or token in _OPENERS:
            in_value = False
        elif token == "cd":
            changes_directory = in_cd = True
        else:
            return _name(token)
    return "cd" if changes_directory else None
