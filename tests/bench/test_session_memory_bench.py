"""`tao bench memory --sessions`, small: real coordinator processes, sessions of each kind, their resident memory."""

import argparse
import json

from tao_coordinator.bench.memory import add_arguments, run
from tao_coordinator.web.limits import SESSION_BYTES_BOUND


def test_the_memory_of_a_session_is_measured_for_each_kind(tmp_path, capsys):
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--sessions", "25", "--json", str(tmp_path / "sessions.json")])
    assert run(args) == 0
    figures = {f["kind"]: f for f in json.loads((tmp_path / "sessions.json").read_text())}
    assert [(k, f["sessions"]) for k, f in figures.items()] == [("registered", 25), ("active", 5), ("limits", 5)]
    # a session at every limit holds far more than a usual one, and within about the bound (RSS adds the allocators')
    assert figures["limits"]["per_session_bytes"] > figures["registered"]["per_session_bytes"]
    assert figures["limits"]["per_session_bytes"] <= 2 * SESSION_BYTES_BOUND
    assert "per session" in capsys.readouterr().out
