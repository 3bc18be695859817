"""The program a shell command runs (`tao_sdk.hints.program_of`), and `tool_start`'s `program` on the wire and in the
core event."""

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from tao_coordinator.core.errors import InvalidEvent
from tao_coordinator.core.events import ToolStart
from tao_sdk import protocol
from tao_sdk.hints import PROGRAM_MAX_CHARS, PROGRAM_PATTERN, program_of


@pytest.mark.parametrize(
    ("command", "program"),
    [
        ("ls -la", "ls"),
        ("  cargo build --release  ", "cargo"),
        ("git status && git diff", "git"),
        ("make; make test", "make"),
        ("npm test || echo failed", "npm"),
        ("find . -name '*.py' | head -20", "find"),
        ("python -m http.server &", "python"),
        ("pytest -x\necho done", "pytest"),
        ("/usr/bin/python3 -c 'print(1)'", "python3"),
        ("./target/release/wsp run", "wsp"),
        ("~/bin/tool.sh --flag", "tool.sh"),
        (".venv/bin/python setup.py", "python"),
        ("g++ -O2 -o a a.cc", "g++"),
        ("docker-compose up -d", "docker-compose"),
        ("FOO=1 make", "make"),
        ("CC=gcc CFLAGS='-O2 -g' make -j8", "make"),
        ('DATABASE_URL="postgresql://u:p@localhost:5432/db" sqlx migrate run', "sqlx"),
        ("PATH+=:/opt/bin node s.js", "node"),
        ("X=1 && ls", "ls"),
        ("TOKEN=$(cat ~/.token) && curl -s x", "curl"),
        ("OUT=$(git log --format='%h (%an)' | head -1) make", "make"),
        ("cd repo && pytest -q", "pytest"),
        ("cd 'my dir'; cd sub && FOO=1 npm test", "npm"),
        ('cd "$HOME/src" && make', "make"),
        ("cd /testbed && python reproduce.py", "python"),
        ("cd /tmp", "cd"),
        ("cd a && cd b", "cd"),
        ("(cd x && make)", "make"),
        ("{ ls; pwd; }", "ls"),
        ("! grep -q x f", "grep"),
        ("sudo apt-get install -y jq", "sudo"),
        ("env FOO=1 python x.py", "env"),
        ("time make", "time"),
        ("nohup julia serve.jl &", "nohup"),
        ("timeout -k 5 60 pytest", "timeout"),
        ("for f in *.py; do echo $f; done", "for"),
        ("source .venv/bin/activate && pytest", "source"),
        ("export PATH=$PATH:/x && flutter doctor", "export"),
        ("# check it\nls -la", "ls"),
        ("# don't worry\ncargo test", "cargo"),
        ("cd repo  # go there\nmake", "make"),
        ("ls # a comment", "ls"),
        ("\\\nmv a b", "mv"),
        ("python3 << 'EOF'\nimport os\nEOF", "python3"),
        ("echo 'a && b'", "echo"),
        ("'my tool' --x", "mytool"),
        ("unbalanced 'quote && sleep 2", "unbalanced"),
        ("x" * 80, "x" * 64),
        ("$EDITOR file", None),
        ("`which python` x.py", None),
        ("$(which python) x.py", None),
        ("X=1", None),
        ("", None),
        ("   \n ", None),
        ("'", None),
        ("..", None),
        ("é", None),
    ],
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


def test_program_is_optional_and_last():
    assert ToolStart("s", "c", "bash").program is None
    assert protocol.ToolStartRequest(call_id="c", tool="bash").program is None
    assert protocol.ToolStartRequest(call_id="c", tool="bash", program="x" * 64).program == "x" * 64
    assert list(ToolStart.__dataclass_fields__)[-1] == "program"
