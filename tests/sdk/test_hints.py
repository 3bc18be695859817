"""Duration hints parsed out of shell commands."""

import pytest

from tao_sdk import command_hints
from tao_sdk.hints import CommandHints, parse_duration


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("sleep 5", CommandHints(sleep_s=5)),
        ("sleep 1.5 && echo hi", CommandHints(sleep_s=1.5)),
        ("sleep 2; sleep 3m", CommandHints(sleep_s=182)),
        ("cd x && sleep 1 || sleep 2", CommandHints(sleep_s=3)),
        ("timeout 30 pytest -x", CommandHints(timeout_s=30)),
        ("timeout -k 5 2m make && timeout 10s ls", CommandHints(timeout_s=10)),
        ("sleep 10 | cat", CommandHints(sleep_s=10)),
        ("(sleep 4) | (sleep 6)", CommandHints()),
        ("python -m http.server &", CommandHints(background=True)),
        ("nohup sleep 100 &", CommandHints(sleep_s=100, background=True)),
        ("make && make test", CommandHints()),
        ("echo 'sleep 5'", CommandHints()),
        ("sleep", CommandHints()),
        ("sleep soon", CommandHints()),
        ("unbalanced 'quote && sleep 2", CommandHints(sleep_s=2)),
    ],
)
def test_what_is_understood(command, expected):
    assert command_hints(command) == expected


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
