"""`tao bench compare` charges planning: measured by default, recorded in every run file with the planner's
counters, shown in the tables — and run files from before still render and are not taken for charged runs."""

import argparse
import json

from tao_coordinator.bench.compare import Bench, Cell, add_arguments, is_done, plan_cells, run, run_cell
from tao_coordinator.bench.compare_report import UNCHARGED, Planning, render_report
from tao_coordinator.sim.workloads.files import TRACES_ENV


def _args(*argv):
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(argv)


def _request(t, tokens, ids, think=0.0):
    return {
        "t": t,
        "type": "n",
        "model": "m",
        "in": tokens,
        "out": 8,
        "hash_ids": ids,
        "input_types": ["tool_result"] if t else ["text"],
        "output_types": ["text"],
        "stop": "end_turn",
        "api_time": 1.0,
        "think_time": think,
    }


def _write_traces(directory, sessions):
    lines = []
    for k in range(sessions):
        first = list(range(100 * k, 100 * k + 16))
        second = first + list(range(100 * k + 16, 100 * k + 32))
        requests = [_request(0, 1024, first), _request(5, 2048, second, think=3.0)]
        trace = {"id": f"trace_{k:04d}", "models": ["m"], "block_size": 64, "hash_id_scope": "local"}
        lines.append(json.dumps(trace | {"tool_tokens": 0, "system_tokens": 0, "requests": requests}) + "\n")
    (directory / "planning-test.jsonl").write_text("".join(lines))


def test_compare_charges_measured_planning_unless_told_otherwise():
    assert {cell.planning for cell in plan_cells(_args("--quick"))} == {Planning("measured", 0.0)}
    fixed = plan_cells(_args("--workloads", "swe", "--plan-timing", "fixed", "--plan-delay-ms", "50"))
    assert {cell.planning for cell in fixed} == {Planning("fixed", 50.0)}


def test_a_cell_records_its_planning_and_planner_counters_and_counts_as_done_only_for_that_charge(
    tmp_path, monkeypatch
):
    monkeypatch.setenv(TRACES_ENV, str(tmp_path))
    _write_traces(tmp_path, 4)
    cell = Cell(Bench("agentx", "planning-test.jsonl", 1, "h100-tp1"), "tao", 3, 0, Planning("measured", 0.0))
    record = run_cell(cell)
    assert (record["plan_timing"], record["plan_delay_ms"]) == ("measured", 0.0)
    metrics = record["metrics"]
    assert metrics["plans"] > 0
    assert metrics["plans"] == metrics["plans_applied"] + metrics["plans_cut"] + metrics["plans_dropped"]
    path = tmp_path / "cell.json"
    path.write_text(json.dumps(record))
    assert is_done(path, Planning("measured", 0.0))
    assert not is_done(path, Planning("measured", 5.0)) and not is_done(path, UNCHARGED)
    # a run file from before planning was charged: made with plans free, so not a measured run
    old = {key: value for key, value in record.items() if key not in ("plan_timing", "plan_delay_ms")}
    path.write_text(json.dumps(old))
    assert is_done(path, UNCHARGED) and not is_done(path, Planning("measured", 0.0))
    assert not is_done(tmp_path / "missing.json", UNCHARGED)


def _metrics(**figures):
    base = {
        "latency_mean_s": 100.0,
        "latency_p50_s": 90.0,
        "latency_p99_s": 300.0,
        "ttft_mean_s": 1.0,
        "ttft_p50_s": 0.5,
        "ttft_p99_s": 5.0,
        "decode_throughput_tok_s": 1000.0,
        "tool_end_to_first_token_mean_s": 1.0,
        "prefix_hit_rate": 0.9,
        "preemptions": 0,
        "makespan_s": 1000.0,
        "plan_mean_ms": 1.0,
        "plan_p95_ms": 2.0,
        "planner_overhead_share": 0.001,
        "engine_ttft_mean_s": 0.4,
        "requests": 10,
        "rejected_requests": 0,
        "plans": 20,
    }
    return base | figures


def test_the_tables_show_cut_and_dropped_plans_and_a_dash_for_older_run_files(tmp_path):
    charged = Planning("measured", 0.0).as_record()
    records = [
        {"workload": "swe", "policy": "tao", "concurrency": 64, "seed": 0, **charged, "metrics": _metrics(
            plans_applied=12, plans_cut=3, plans_dropped=5
        )},
        # written before the counters and the planning charge were recorded
        {"workload": "swe", "policy": "thunderagent", "concurrency": 64, "seed": 0, "metrics": _metrics()},
    ]  # fmt: skip
    report = render_report(records, {"swe": (4, "h100-tp2")})
    assert "| cut | dropped |" in report
    assert "| 64 | **tao** |" in report and "| 1,000 | 3 | 5 |" in report
    assert "| 64 | thunderagent |" in report and "| 1,000 | – | – |" in report
    assert "Planning charged per plan: a fixed 0 ms (1 run); each solve's wall-clock time + 0 ms (1 run)." in report
    # --report with plots reads both files back into RunMetrics
    runs = tmp_path / "runs"
    runs.mkdir()
    for k, record in enumerate(records):
        (runs / f"cell{k}.json").write_text(json.dumps(record))
    assert run(_args("--out", str(tmp_path), "--report", "--plots")) == 0
    assert (tmp_path / "img" / "swe" / "latency.png").exists()
    assert "| 1,000 | – | – |" in (tmp_path / "results.md").read_text()
