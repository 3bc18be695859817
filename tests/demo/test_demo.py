"""`tao demo` end to end on a tiny configuration (fake fleet, coordinator process, SDK agents), checked as a user
reads it: both policies ran the same workload, the table and the comparison line are printed, the units are said."""

import json
import re

from tao_coordinator.demo.run import DemoResult, render
from tao_sdk.cli import main as tao


def test_the_demo_runs_both_policies_on_the_same_workload_and_prints_the_comparison(tmp_path, capsys):
    out = tmp_path / "demo.json"
    assert tao(["demo", "--sessions", "3", "--time-scale", "64", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    header = re.search(r"(\d+) agent sessions at once, (\d+) LLM calls per policy", printed)
    assert header, printed
    sessions, calls = int(header[1]), int(header[2])
    results = json.loads(out.read_text())
    assert [r["policy"] for r in results] == ["tao", "round-robin"]
    for result in results:
        assert result["failed_agents"] == 0
        assert (result["sessions"], result["calls"]) == (sessions, calls) == (3, calls)
        assert 0 < result["prefix_hit_rate"] <= 1 and result["throughput_tok_s"] > 0
    lines = printed.splitlines()
    assert any(line.startswith("policy") and "task latency" in line for line in lines)
    for policy in ("tao", "round-robin"):
        assert any(re.match(rf"{policy}\s+\d+\.\d / \d+\.\d", line) for line in lines), printed
    assert re.search(r"tao against round-robin: task latency [+-]\d+\.\d%, TTFT [+-]\d+\.\d%", printed)
    assert "wall-clock seconds" in printed and "sped up 64×" in printed
    assert "spread:" in printed and "--repeats" in printed


def _result(policy: str, latency: float, repeat: int) -> DemoResult:
    return DemoResult(policy, latency, latency * 2, 0.5, 1.0, 100.0, 0.5, 10, 0, 30.0, sessions=3, repeat=repeat)


def test_repeats_show_each_policys_range_and_the_range_of_the_change():
    results = [_result("tao", 8.0, 0), _result("round-robin", 10.0, 0), _result("tao", 6.0, 1)]
    results.append(_result("round-robin", 10.0, 1))
    printed = render(results, 16)
    assert re.search(r"^tao\s+7\.0 /", printed, re.M)
    assert re.search(r"^  range\s+6\.0–8\.0", printed, re.M)
    assert "tao against round-robin: task latency -30.0%" in printed
    assert "task latency change over 2 repeats: from -40.0% to -20.0%" in printed
    assert "2 run(s) per policy" in printed and "spread:" not in printed


def test_bad_demo_arguments():
    assert tao(["demo", "--sessions", "0"]) == 2
    assert tao(["demo", "--repeats", "0"]) == 2
