"""The program a shell command runs (`tao_sdk.hints.program_of`), and `tool_start`'s `program` on the wire and in the
core event. The cases of `program_of` are in `shell_hints.json`, which the OpenCode plugin's test reads too
(integrations/opencode/test/hints.test.mjs)."""

import json
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from tao_coordinator.core.errors import InvalidEvent
from tao_coordinator.core.events import ToolStart
from tao_sdk import protocol
from tao_sdk.hints import PROGRAM_MAX_CHARS, PROGRAM_PATTERN, program_of

SHELL_HINTS = json.loads((Path(__file__).parent / "shell_hints.json").read_text())


@pytest.mark.parametrize(
    ("command", "program"), [(case["command"], case["program"]) for case in SHELL_HINTS["program_of"]]
)
def test_the_program_a_command_runs(command, program):
    assert program_of(command) == program


def test_it_agrees_with_the_traces_prog_field():
    """`prog` of `traces/claude_code_sessions` (cut at 24 characters there), for commands as Claude Code writes them."""
    cases = {
        "cd /home/u/src && ls -la": "ls",
        "AUTONOMOUS_MODE=true ./autonomous_deploy.sh create x-$(date +%s)": "autonomous_deploy.sh",
        "PORT=8081 node simple-mcp-server.js &": "node",
        "sudo apt update && sudo apt install -y libgtk-3-dev": "sudo",
        "timeout 5 ./vimmacs start 2>&1 || true": "timeout",
        "/home/u/flutter/bin/flutter doctor": "flutter",
        "./test_schemantics_v3_final.sh": "test_schemantics_v3_fina",
    }
    assert {command: (program_of(command) or "")[:24] for command in cases} == cases


PIECES = [*"ab/._+-=$()`'\"\\;&|#{}! \t\né", "cd ", "X=", "sudo "]


@given(st.lists(st.sampled_from(PIECES), max_size=30))
def test_any_command_gives_none_or_a_valid_program(pieces):
    program = program_of("".join(pieces))
    assert program is None or (re.match(PROGRAM_PATTERN, program) and len(program) <= PROGRAM_MAX_CHARS)
    if program is not None:
        ToolStart("s", "c", "bash", program=program)
        protocol.ToolStartRequest(call_id="c", tool="bash", program=program)


@pytest.mark.parametrize("program", ["", "ls -la", ".hidden", "-x", "a/b", "cargo\n", "é", "x" * 65, 7])
def test_a_bad_program_is_refused_naming_the_field(program):
    with pytest.raises(ValidationError) as refused:
        protocol.ToolStartRequest(call_id="c", tool="bash", program=program)
    assert refused.value.errors()[0]["loc"] == ("program",)
    with pytest.raises(InvalidEvent) as invalid:
        ToolStart("s", "c", "bash", program=program)
    assert invalid.value.field == "program"


def test_program_is_optional_and_after_the_fields_before_it():
    assert ToolStart("s", "c", "bash").program is None
    assert protocol.ToolStartRequest(call_id="c", tool="bash").program is None
    assert protocol.ToolStartRequest(call_id="c", tool="bash", program="x" * 64).program == "x" * 64
    # fields come after the ones before them, so positional construction keeps its meaning (age_s came later)
    assert list(ToolStart.__dataclass_fields__)[:5] == ["session_id", "call_id", "tool", "hints", "program"]
