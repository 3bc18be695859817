"""`tao bench planner` on a small fleet: the JSON rows the issue promises, and shares and gaps that add up."""

import json

import pytest

from tao_sdk.cli import main


@pytest.mark.parametrize("policy", ["tao", "tao-no-dp"])
def test_json_rows_have_the_promised_fields_and_consistent_figures(tmp_path, capsys, policy):
    out = tmp_path / "planner.json"
    argv = ["bench", "planner", "--sizes", "12x2", "--snapshots", "8", "--milp-samples", "2", "--policy", policy]
    assert main([*argv, "--json", str(out)]) == 0
    (row,) = json.loads(out.read_text())
    promised = {"sessions", "nodes", "mean_ms", "p50_ms", "p95_ms", "max_ms", "fallback_share", "gap"}
    assert promised <= row.keys()
    assert (row["sessions"], row["nodes"], row["snapshots"]) == (12, 2, 8)
    assert 0 < row["p50_ms"] <= row["p95_ms"] <= row["max_ms"]
    assert row["milp_solved"] == 2 and 0.0 <= row["gap"] <= 1.0
    # TAO's pipeline solves every snapshot by one of its three methods; best-fit decreasing by none of them
    pipeline = row["all_fit_share"] + row["dp_share"] + row["fallback_share"]
    assert pipeline == pytest.approx(1.0 if policy == "tao" else 0.0)
    assert "12×2" in capsys.readouterr().out


def test_an_unknown_planner_is_refused(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["bench", "planner", "--policy", "round-robin"])
    assert exit_info.value.code == 2
    assert "--policy" in capsys.readouterr().err
