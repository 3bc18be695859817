"""`tao bench planner` on a small replay: the JSON rows of docs/algorithm.md#measured, shares and gaps that add up, and
bad arguments refused by name before anything runs."""

import json

import pytest

from tao_coordinator.bench.planner import PLANNERS
from tao_coordinator.bench.planner_replay import TIMED_PLANNERS, evenly_spaced
from tao_sdk.cli import main

SMALL = ["--sizes", "12x2", "--node-profile", "h100-tp1", "--every", "1", "--snapshots", "6", "--milp-samples", "2"]
"""Twelve synthetic sessions on two small nodes: contended from the start, six snapshots, two of them for the MILP."""
PROMISED = {
    "trace",
    "sessions",
    "nodes",
    "node_profile",
    "plans",
    "exact_share",
    "gap_max",
    "gap_zero_share",
    "milp_solved",
    "milp_sampled",
    "mean_ms",
    "p50_ms",
    "p95_ms",
    "max_ms",
    "candidates_mean",
    "methods",
}


@pytest.mark.parametrize("policy", ["tao", "tao-no-dp"])
def test_json_rows_have_the_promised_fields_and_consistent_figures(tmp_path, capsys, policy):
    out = tmp_path / "planner.json"
    assert main(["bench", "planner", *SMALL, "--policy", policy, "--json", str(out)]) == 0
    (row,) = json.loads(out.read_text())
    assert row.keys() >= PROMISED
    fleet = (row["trace"], row["sessions"], row["nodes"], row["node_profile"])
    assert fleet == ("synthetic:claude-code", 12, 2, "h100-tp1")
    assert row["plans"] == 6 and row["stopped_early"] and row["replay_plans"] == 6
    assert sum(row["methods"].values()) == row["plans"]
    certified = row["exact_share"] * row["plans"]
    assert 0 <= certified <= row["plans"] and certified == pytest.approx(round(certified))
    if policy == "tao-no-dp":  # best-fit decreasing proves nothing
        assert row["methods"] == {"greedy": 6} and row["exact_share"] == 0
    assert 0 < row["p50_ms"] <= row["p95_ms"] <= row["max_ms"] and row["mean_ms"] <= row["max_ms"]
    assert row["candidates_mean"] > 0
    assert (row["milp_sampled"], row["milp_solved"]) == (2, 2)
    assert 0.0 <= row["gap_max"] <= 1.0 and 0.0 <= row["gap_zero_share"] <= 1.0
    assert "12×2" in capsys.readouterr().out


def test_every_kth_snapshot_is_recorded_and_gaps_are_null_without_a_milp_sample(tmp_path):
    out = tmp_path / "planner.json"
    argv = ["bench", "planner", *SMALL, "--every", "3", "--milp-samples", "0", "--json", str(out)]
    assert main(argv) == 0
    (row,) = json.loads(out.read_text())
    assert (row["every"], row["plans"], row["replay_plans"]) == (3, 6, 16)
    assert (row["milp_sampled"], row["milp_solved"]) == (0, 0)
    assert row["gap_max"] is None and row["gap_mean"] is None and row["gap_zero_share"] is None


def _write_agentx(path, sessions):
    """`sessions` AgentX traces of two calls each (1k then 2k tokens, the second extending the first's blocks)."""
    lines = []
    for k in range(sessions):
        first = list(range(100 * k, 100 * k + 16))
        requests = [(0, 1024, first, 0.0), (5, 2048, [*first, *range(100 * k + 16, 100 * k + 32)], 3.0)]
        calls = [
            {"t": t, "type": "n", "model": "m", "in": tokens, "out": 8, "hash_ids": ids, "api_time": 1.0}
            | {"input_types": ["tool_result"] if t else ["text"], "output_types": ["text"], "stop": "end_turn"}
            | {"think_time": think}
            for t, tokens, ids, think in requests
        ]
        trace = {"id": f"trace_{k:04d}", "models": ["m"], "block_size": 64, "hash_id_scope": "local"}
        lines.append(json.dumps(trace | {"tool_tokens": 0, "system_tokens": 0, "requests": calls}) + "\n")
    path.write_text("".join(lines))


def test_a_trace_file_is_replayed_at_each_concurrency(tmp_path):
    trace = str(tmp_path / "agentx.jsonl")
    _write_agentx(tmp_path / "agentx.jsonl", 4)
    out = tmp_path / "planner.json"
    argv = ["--trace", trace, "--concurrency", "2,3", "--nodes", "1", "--node-profile", "h100-tp1"]
    assert main(["bench", "planner", *argv, "--milp-samples", "1", "--json", str(out)]) == 0
    rows = json.loads(out.read_text())
    assert [(row["trace"], row["sessions"], row["nodes"]) for row in rows] == [(trace, 2, 1), (trace, 3, 1)]
    for row in rows:
        assert row["workload_sessions"] == 4 and not row["stopped_early"]
        assert row["plans"] == row["replay_plans"] > 0 and sum(row["methods"].values()) == row["plans"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--sizes", "12x2", "--concurrency", "0"], "--concurrency"),
        (["--trace", "synthetic", "--concurrency", "0"], "--concurrency: '0'"),
        (["--trace", "/no/such/trace.jsonl.gz"], "--trace: '/no/such/trace.jsonl.gz'"),
        (["--sizes", "12"], "--sizes: '12'"),
        (["--sizes", "12x2", "--every", "0"], "--every"),
        (["--sizes", "12x2", "--node-profile", "a100"], "--node-profile: unknown node profile 'a100'"),
        (["--sizes", "12x2", "--milp-time-limit", "0"], "--milp-time-limit"),
    ],
)
def test_bad_arguments_are_named_and_write_nothing(tmp_path, capsys, args, message):
    out = tmp_path / "never.json"
    assert main(["bench", "planner", *args, "--json", str(out)]) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_an_unknown_planner_is_refused(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["bench", "planner", "--policy", "round-robin"])
    assert exit_info.value.code == 2
    assert "--policy" in capsys.readouterr().err


def test_the_milp_sample_is_spread_evenly():
    assert evenly_spaced(100, 4) == [12, 37, 62, 87]
    assert evenly_spaced(3, 10) == [0, 1, 2]
    assert evenly_spaced(0, 5) == []


def test_the_planners_offered_are_the_ones_the_replay_builds():
    assert sorted(PLANNERS) == sorted(TIMED_PLANNERS)
