"""`tao bench compare --limit`: limit cells on the limit fleet, a limit row in the policy tables, the excess table,
and `limits` / `excess` in results.json."""

import json

import pytest

from tao_coordinator.bench.compare import Bench, Cell, plan_cells, run, run_cell
from tao_coordinator.bench.compare_report import Planning
from tao_coordinator.core.policies import ABLATIONS, BASELINES, VARIANTS
from tao_coordinator.sim.workloads.files import TRACES_ENV
from tests.bench.test_compare import _args
from tests.bench.test_compare import _record as run_record


def _record(policy, concurrency, limit=False, **metrics):
    record = run_record(policy, concurrency, **metrics)
    return record | ({"limit": True} if limit else {})


def test_limit_cells_rerun_tao_and_the_baselines_on_the_limit_fleet():
    plain = plan_cells(_args("--workloads", "swe", "--concurrency", "64"))
    assert not any(cell.limit for cell in plain)
    cells = plan_cells(_args("--workloads", "swe", "--concurrency", "64,128", "--limit"))
    limited = [cell for cell in cells if cell.limit]
    assert len(cells) - len(limited) == 2 * (1 + len(ABLATIONS) + len(VARIANTS) + len(BASELINES))
    assert {cell.policy for cell in limited} == {"tao", *BASELINES} and len(limited) == 2 * (1 + len(BASELINES))
    assert all(cell.key.endswith("__limit") for cell in limited)
    chosen = plan_cells(_args("--workloads", "swe", "--concurrency", "64", "--limit", "--limit-policies", "dynamo"))
    assert [cell.policy for cell in chosen if cell.limit] == ["dynamo"]
    with pytest.raises(ValueError, match="--limit-policies: only means something with --limit"):
        plan_cells(_args("--limit-policies", "tao"))


def test_a_limit_cell_runs_on_kv_that_never_runs_out(tmp_path, monkeypatch):
    monkeypatch.setenv(TRACES_ENV, str(tmp_path))
    # two sessions of 64 prompt + 64 output tokens on a 10-block node: the real node preempts, the limit node never
    trace = {"models": ["m"], "block_size": 64, "hash_id_scope": "local", "tool_tokens": 0, "system_tokens": 0}
    requests = [
        {"t": 0, "type": "n", "model": "m", "in": 64, "out": 64, "hash_ids": [k], "input_types": ["text"],
         "output_types": ["text"], "stop": "end_turn", "api_time": 1.0, "think_time": 0.0}
        for k in (1, 2)
    ]  # fmt: skip
    lines = [json.dumps(trace | {"id": f"trace_{k:04d}", "requests": [r]}) for k, r in enumerate(requests)]
    (tmp_path / "limit-test.jsonl").write_text("\n".join(lines) + "\n")
    bench = Bench("agentx", "limit-test.jsonl", 1, "h100-tp1")
    fixed = Planning("fixed", 0.0)
    record = run_cell(Cell(bench, "round-robin", 2, 0, fixed, limit=True))
    assert record["limit"] is True and record["metrics"]["preemptions"] == 0
    assert "limit" not in run_cell(Cell(bench, "round-robin", 2, 0, fixed))


def test_the_report_shows_the_limit_row_and_every_policy_s_excess(tmp_path):
    runs = tmp_path / "runs"
    runs.mkdir()
    records = [
        _record("tao", 64, latency_mean_s=110.0, ttft_mean_s=1.2, decode_throughput_tok_s=950.0),
        _record("thunderagent", 64, latency_mean_s=150.0, ttft_mean_s=2.0, decode_throughput_tok_s=900.0),
        _record("tao", 64, limit=True, latency_mean_s=100.0, ttft_mean_s=1.0, decode_throughput_tok_s=980.0),
        _record("thunderagent", 64, limit=True, latency_mean_s=105.0, ttft_mean_s=1.1, decode_throughput_tok_s=1000.0),
    ]
    for k, record in enumerate(records):
        (runs / f"cell{k}.json").write_text(json.dumps(record))
    assert run(_args("--out", str(tmp_path), "--report")) == 0
    report = (tmp_path / "results.md").read_text()
    assert "| 64 | *limit* | 100 | – | 1.00 | – | 1,000 |" in report
    assert "| 64 | *limit* | 100 s (tao) | 1.000 s (tao) | 1,000 tok/s (thunderagent) | |" in report
    assert "| 64 | **tao** | +10.0% | +20.0% | +5.0% | – |" in report
    assert "| 64 | thunderagent | +50.0% | +100.0% | +10.0% | – |" in report
    document = json.loads((tmp_path / "results.json").read_text())
    assert [r["policy"] for r in document["runs"]] == ["tao", "thunderagent"]
    assert len(document["limit_runs"]) == 2
    (limit,) = document["limits"]
    assert (limit["workload"], limit["seed"], limit["concurrency"]) == ("swe", 0, 64)
    assert limit["metrics"] == {"latency_mean_s": 100.0, "ttft_mean_s": 1.0, "decode_throughput_tok_s": 1000.0}
    excess = {row["policy"]: row for row in document["excess"]}
    assert excess["tao"]["excess"] == pytest.approx(
        {"latency_mean_s": 0.1, "ttft_mean_s": 0.2, "decode_throughput_tok_s": 0.05}
    )
    assert excess["thunderagent"]["beats_limit_on"] == []
