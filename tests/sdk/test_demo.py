"""`tao demo` end to end on a tiny configuration: fake fleet, coordinator process, SDK agents, the comparison."""

import json

from tao_sdk.cli import main as tao


def test_the_demo_runs_and_compares_the_policies(tmp_path, capsys):
    out = tmp_path / "demo.json"
    assert tao(["demo", "--sessions", "3", "--time-scale", "64", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "tao against round-robin" in printed
    results = json.loads(out.read_text())
    assert [r["policy"] for r in results] == ["tao", "round-robin"]
    for result in results:
        assert result["failed_agents"] == 0 and result["calls"] > 0
        assert 0 < result["prefix_hit_rate"] <= 1 and result["throughput_tok_s"] > 0


def test_bad_demo_arguments():
    assert tao(["demo", "--sessions", "0"]) == 2
