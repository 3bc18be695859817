"""Duration hints parsed out of shell commands, on the cases the OpenCode plugin is tested on too (`shell_hints.json`,
read by integrations/opencode/test/hints.test.mjs)."""

import json
from pathlib import Path

import pytest

from tao_sdk import command_hints
from tao_sdk.hints import CommandHints, parse_duration

SHELL_HINTS = json.loads((Path(__file__).parent / "shell_hints.json").read_text())


@pytest.mark.parametrize("case", SHELL_HINTS["command_hints"], ids=lambda case: case["command"])
def test_what_is_understood(case):
    expected = CommandHints(sleep_s=case["sleep_s"], timeout_s=case["timeout_s"], background=case["background"])
    assert command_hints(case["command"]) == expected


def test_durations():
    assert [parse_duration(t) for t in ("3", "2.5s", "1m", "1h", "1d", ".5", "x", "1w")] == [
        3,
        2.5,
        60,
        3600,
        86400,
        0.5,
        None,
        None,
    ]
