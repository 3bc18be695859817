"""The long-running commands fail with one line naming what is wrong, not a traceback (issue 15, finding 9)."""

import gzip
import socket
import subprocess
import sys

import pytest


def tao(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tao_sdk.cli", *args], capture_output=True, text=True, timeout=60)


@pytest.fixture
def taken_port():
    with socket.create_server(("127.0.0.1", 0)) as held:
        yield held.getsockname()[1]


@pytest.mark.parametrize(
    "command",
    [
        ("coordinator", "--insecure-no-auth", "--state-dir", "{tmp}"),
        ("proxy", "--nodes", "http://127.0.0.1:9"),
    ],
)
def test_a_port_in_use_is_one_line_naming_it(tmp_path, taken_port, command):
    run = tao(*(word.format(tmp=tmp_path) for word in command), "--port", str(taken_port))
    assert run.returncode == 1
    assert run.stderr.strip().splitlines() == [
        f"tao {command[0]}: cannot listen on 127.0.0.1:{taken_port}: Address already in use"
    ]
    assert "started" not in run.stdout + run.stderr


@pytest.mark.parametrize(
    ("name", "content", "problem"),
    [
        ("trace.jsonl", b"not json\n", "is not JSON: Expecting value"),
        ("trace.json", b'{"requests": [', "is not JSON"),
        ("trace.jsonl", b'\n\n{"requests": [}\n', "is not JSON"),
        ("trace.jsonl", b"\xff\xfe\x00garbage\n", "could not be read"),
        ("trace.jsonl.gz", b"not gzip", "could not be read: Not a gzipped file"),
        ("trace.jsonl.gz", gzip.compress(b'{"requests": []}\n')[:-12], "could not be read"),
    ],
)
def test_a_trace_that_is_not_json_is_one_line_naming_the_file(tmp_path, name, content, problem):
    trace = tmp_path / name
    trace.write_bytes(content)
    run = tao("sim", "--trace", str(trace))
    assert run.returncode == 2
    assert len(run.stderr.strip().splitlines()) == 1, run.stderr
    assert run.stderr.startswith(f"tao sim: --trace: {str(trace)!r} ") and problem in run.stderr
