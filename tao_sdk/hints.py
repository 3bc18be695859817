"""Duration hints parsed from a shell command, for `tool_start`.

What is understood (anything else contributes nothing, never an error):
- `sleep N` — N seconds (a number with an optional `s`, `m`, `h` or `d` suffix); several sleeps in one command add
  up when they run one after another (`;`, `&&`, `||`, newlines);
- `timeout [options] DURATION command…` — the command is killed after DURATION: an upper cap on the whole tool;
- a trailing `&` (or `nohup … &`) — the command runs in the background: the tool returns at once.
Pipes (`|`) run their parts concurrently, so sleeps inside a pipeline count once, by the longest.
"""

from __future__ import annotations

import re
import shlex
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
