"""What a tool's duration is learned under: a harness-normalised tool name, and for shell tools the program.

Harnesses name the same tool differently (Claude Code `Bash`, OpenCode `bash`, Gemini CLI `run_shell_command`);
`normalise_tool` maps them to one name, so a fleet running several harnesses learns one distribution per tool. The
program (`cargo`, `ls`, `pytest`) is what the client saw the command start with; the command text itself never
reaches the coordinator.

A call is forecast from the most specific level that has data, smoothed towards the next: the session's own calls of
that (tool, program), then every session's (tool, program), then the tool, then every tool, then a prior
(`predictive.py`). `ToolKey.levels` lists the shared levels, most specific first.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

ALL_TOOLS = "*"
"""The level that pools every tool."""

_ALIASES = {
    "shell": "bash",
    "sh": "bash",
    "run_shell_command": "bash",
    "execute_command": "bash",
    "terminal": "bash",
    "list": "ls",
    "list_directory": "ls",
    "read_file": "read",
    "view": "read",
    "write_file": "write",
    "create": "write",
    "edit_file": "edit",
    "str_replace": "edit",
    "str_replace_editor": "edit",
    "todo_write": "todowrite",
    "web_fetch": "webfetch",
    "web_search": "websearch",
}
_SEPARATORS = re.compile(r"[\s\-]+")


def normalise_tool(name: str) -> str:
    """One spelling per tool across harnesses: lower case, `-` and spaces as `_`, known aliases folded."""
    folded = _SEPARATORS.sub("_", name.strip().lower())
    if folded == ALL_TOOLS:
        return "_*"  # a tool named like the all-tools level must not learn into it
    return _ALIASES.get(folded, folded)


@dataclass(frozen=True, slots=True)
class ToolKey:
    tool: str
    """Normalised (see `normalise_tool`)."""
    program: str | None = None

    @classmethod
    def of(cls, tool: str, program: str | None = None) -> ToolKey:
        return cls(normalise_tool(tool), program.lower() if program else None)

    @property
    def levels(self) -> tuple[str, ...]:
        """The shared history levels this call learns into and is forecast from, most specific first."""
        if self.program is None:
            return (self.tool, ALL_TOOLS)
        return (f"{self.tool}:{self.program}", self.tool, ALL_TOOLS)

    @property
    def session_level(self) -> str:
        """The level of one session's own calls of this tool and program."""
        return self.levels[0]
