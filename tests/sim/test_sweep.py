"""A sweep over plan charges (`tao sim --plan-delay-ms 0,1,2`): every run at every charge, and per policy ×
concurrency the median run, its spread and its excess over the limit."""

import json
import statistics
from dataclasses import replace

import pytest

from tao_coordinator.sim.metrics import RunMetrics
from tao_coordinator.sim.report import RunResult
from tao_coordinator.sim.sweep import median_runs, parse_delays
from tao_sdk.cli import main as tao
from tests.sim.conftest import run_metrics

SMALL = [
    "sim", "--trace", "synthetic:swe-agent", "--sessions", "8", "--nodes", "1", "--node-profile", "h100-tp1",
    "--policy", "tao,round-robin", "--concurrency", "4", "--no-timing", "--no-plots",
]  # fmt: skip
"""One TP1 node for four swe-agent sessions: memory binds, so TAO plans, and plans are what a charge moves."""


def _metrics(latency: float, preemptions: int, half_lives: dict[str, float | None] | None = None) -> RunMetrics:
    return run_metrics(latency, latency / 100, 1000.0 / latency, preemptions=preemptions, credit_half_life_s=half_lives)


def test_each_figure_of_the_median_run_is_its_own_median_and_whole_numbers_stay_whole():
    runs = [
        RunResult("tao", 8, 0, _metrics(300.0, 7, {"a": 30.0}), 0.0),
        RunResult("tao", 8, 0, _metrics(100.0, 5, {"a": 10.0}), 1.0),
        RunResult("tao", 8, 0, _metrics(200.0, 8, {"a": 20.0}), 2.0),
        RunResult("rr", 8, 0, _metrics(500.0, 1), 0.0),
    ]
    median, alone = median_runs(runs)
    assert (median.policy, median.plan_delay_ms) == ("tao", None)
    assert median.metrics.latency_mean_s == 200.0 and median.metrics.ttft_mean_s == 2.0
    assert median.metrics.decode_throughput_tok_s == 1000.0 / 200.0  # the median of 10, 5 and 3.3
    assert median.metrics.preemptions == 7 and isinstance(median.metrics.preemptions, int)
    assert median.metrics.credit_half_life_s == {"a": 20.0}  # not a number: the run of the median latency
    assert median.metrics.plan_mean_ms is None
    assert alone is runs[3]  # one charge: the run itself
    # an even count: the mean of the middle two, whole numbers rounded half to even; a figure one run lacks is lacking
    even = [*runs[:3], RunResult("tao", 8, 0, replace(_metrics(400.0, 8, {"a": 40.0}), plan_mean_ms=2.0), 3.0)]
    (median,) = median_runs(even)
    assert median.metrics.latency_mean_s == 250.0 and median.metrics.preemptions == 8  # (7 + 8) / 2 → 8
    assert median.metrics.credit_half_life_s == {"a": 20.0}  # the lower of the two middle latencies
    assert median.metrics.plan_mean_ms is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("1,x", "'x' is not a number of milliseconds"),
        ("0,1,1", "1 is given twice"),
        ("-1", "must be at least 0 and finite, got -1"),
        ("inf", "must be at least 0 and finite, got inf"),
        ("", "'' is not a number of milliseconds"),
    ],
)
def test_bad_charges_are_refused_by_name(text, message, capsys):
    with pytest.raises(ValueError, match=message):
        parse_delays(text)
    assert tao([*SMALL, "--plan-delay-ms", text]) == 2
    assert f"tao sim: --plan-delay-ms: {message}" in capsys.readouterr().err


def test_parse_delays_keeps_the_order_given():
    assert parse_delays("2, 0,0.5") == [2.0, 0.0, 0.5]


def test_a_sweep_runs_every_charge_and_reports_the_median_run_and_its_excess(tmp_path, capsys):
    out = tmp_path / "sweep.json"
    assert tao([*SMALL, "--plan-delay-ms", "0,1000,2000", "--limit", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "each plan is delivered 0, 1000, 2000 ms (a sweep: each run at one of them) after it starts" in printed
    assert "median over plan charges D = 0, 1000, 2000 ms" in printed and "D ms" in printed
    assert "tao × 4 (D = 1000 ms): credit half-life at the end, s: node-00" in printed
    document = json.loads(out.read_text())
    assert document["planning"] == {"timing": "fixed", "delays_ms": [0.0, 1000.0, 2000.0]}
    runs = document["runs"]
    assert [(r["policy"], r["plan_delay_ms"]) for r in runs] == [
        (policy, delay) for policy in ("tao", "round-robin") for delay in (0.0, 1000.0, 2000.0)
    ]
    assert [r["plan_delay_ms"] for r in document["limits"]["runs"]] == [0.0, 1000.0, 2000.0] * 2  # at every charge
    tao_latencies = [r["metrics"]["latency_mean_s"] for r in runs if r["policy"] == "tao"]
    assert len(set(tao_latencies)) > 1  # charges of a second move a plan-driven policy: the sweep has something to do
    bounds = document["limits"]["bounds"][0]["metrics"]
    for median in document["medians"]:
        assert "plan_delay_ms" not in median
        mine = [r["metrics"] for r in runs if r["policy"] == median["policy"]]
        for field in ("latency_mean_s", "ttft_mean_s", "decode_throughput_tok_s"):
            assert median["metrics"][field] == pytest.approx(statistics.median(m[field] for m in mine), rel=1e-5)
        latency = median["metrics"]["latency_mean_s"]
        limit = bounds["latency_mean_s"]
        assert median["excess_over_limit"]["latency_mean_s"] == pytest.approx((latency - limit) / limit, rel=1e-4)
        assert median["beats_limit_on"] == []
        assert isinstance(median["metrics"]["requests"], int)


def test_one_charge_is_no_sweep(tmp_path):
    out = tmp_path / "one.json"
    assert tao([*SMALL, "--plan-delay-ms", "5", "--json", str(out)]) == 0
    document = json.loads(out.read_text())
    assert document["planning"] == {"timing": "fixed", "delay_ms": 5.0} and "medians" not in document
    assert [r["plan_delay_ms"] for r in document["runs"]] == [5.0, 5.0]


def test_worker_processes_give_the_same_runs_in_the_same_order(tmp_path, capsys):
    argv = [*SMALL, "--plan-delay-ms", "0,1000,2000", "--limit"]
    assert tao([*argv, "--json", str(tmp_path / "one.json")]) == 0
    assert tao([*argv, "--jobs", "3", "--json", str(tmp_path / "three.json")]) == 0
    assert (tmp_path / "one.json").read_bytes() == (tmp_path / "three.json").read_bytes()
    assert "6 replays in 3 worker processes" in capsys.readouterr().err
    assert tao([*SMALL, "--jobs", "0"]) == 2
    assert "tao sim: --jobs: must be at least 1, got 0" in capsys.readouterr().err
