"""The limit: a fleet whose KV never runs out (nothing evicted, nothing preempted, nobody waits for memory), the
limit as the best per metric over the policies rerun there, each run's excess over it, and `tao sim --limit`; the
never-evict fleet (`tao sim --never-evict`), which tells schedulers the real capacity and never evicts."""

import json

import matplotlib
import pytest

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from tao_coordinator.fakevllm.metrics import cache_config_labels
from tao_coordinator.sim.driver import FleetSimulation
from tao_coordinator.sim.limit import Limit, beats_limit_on, excess, limit_of, limits_of
from tao_coordinator.sim.limit_fleet import limit_profile, never_evict_profile, workload_block_bound
from tao_coordinator.sim.node import NodeProfile, profile_by_name
from tao_coordinator.sim.node.profile import with_cpu_tier
from tao_coordinator.sim.report import RunResult
from tao_coordinator.sim.workloads import generate
from tao_sdk.cli import main as tao
from tests.sim.conftest import run_metrics

TP1 = profile_by_name("h100-tp1")
SMALL = [
    "sim", "--trace", "synthetic:swe-agent", "--sessions", "8", "--nodes", "1", "--node-profile", "h100-tp1",
    "--policy", "tao,round-robin", "--concurrency", "4", "--no-timing",
]  # fmt: skip
"""One TP1 node (about 34k KV tokens) for four swe-agent sessions: memory binds, so the limit is far below."""


def _workload():
    return generate("swe-agent", sessions=6, seed=1, max_context=40_000)


def _tight(workload):
    """A node that holds two of the workload's largest contexts: sessions evict each other's prefixes."""
    peak = max(script.peak_context_tokens for script in workload.scripts)
    return NodeProfile("tight", TP1.step, num_gpu_blocks=2 * (peak // 16) + 2)


def _prompt_ids(workload):
    return {i for script in workload.scripts for request in script.all_requests() for i in request.prompt.block_ids()}


def _cached_ids(simulation):
    return {i for engine in simulation.engines.values() for f, c in engine.cached_block_runs() for i in range(f, f + c)}


@pytest.mark.parametrize("policy", ["tao", "round-robin"])
def test_the_limit_fleet_keeps_every_block_and_nobody_waits_for_memory(policy):
    workload = _workload()
    tight = _tight(workload)
    real = FleetSimulation(workload, policy, 4, tight, 1)
    constrained = real.run(timing=False)
    assert _prompt_ids(workload) - _cached_ids(real), "the tight node should have evicted something"
    unbounded = FleetSimulation(workload, policy, 4, limit_profile(tight, workload), 1)
    limit = unbounded.run(timing=False)
    # every prompt block ever computed is still cached at the end: nothing was evicted
    assert not _prompt_ids(workload) - _cached_ids(unbounded)
    assert limit.preemptions == 0 and limit.rejected_requests == 0
    # no admission wait: what the agent sees is the engine's own time to first token
    assert limit.ttft_mean_s == pytest.approx(limit.engine_ttft_mean_s, rel=1e-9)
    assert limit.requests == constrained.requests
    assert limit.latency_mean_s < constrained.latency_mean_s and limit.ttft_mean_s < constrained.ttft_mean_s
    # one node: a prefix computed twice was evicted in between, which the limit fleet never does
    assert constrained.recomputed_tokens > 0 and limit.recomputed_tokens == 0


def test_the_never_evict_fleet_keeps_every_block_but_tao_still_waits_for_the_memory_it_is_told_of():
    workload = _workload()
    tight = _tight(workload)
    fleet = never_evict_profile(tight, workload)
    simulation = FleetSimulation(workload, "tao", 4, fleet, 1)
    assert simulation.coordinator.nodes["node-00"].capacity_tokens == tight.capacity_tokens
    run = simulation.run(timing=False)
    assert not _prompt_ids(workload) - _cached_ids(simulation)
    (engine,) = simulation.engines.values()
    counters = engine.counters()
    assert counters.num_gpu_blocks == tight.num_gpu_blocks and counters.num_preemptions == 0
    # one node and nothing evicted: no prefix is ever computed twice
    assert run.recomputed_tokens == 0
    # but the coordinator planned for the tight node: agents waited for a place beyond the engine's own TTFT
    assert run.ttft_mean_s > run.engine_ttft_mean_s + 0.5
    unbounded = FleetSimulation(workload, "tao", 4, limit_profile(tight, workload), 1).run(timing=False)
    assert unbounded.ttft_mean_s == pytest.approx(unbounded.engine_ttft_mean_s, rel=1e-9)


def test_a_never_evict_profile_advertises_the_real_blocks_and_the_limit_profile_forgets_them():
    workload = _workload()
    fleet = never_evict_profile(TP1, workload)
    assert fleet.name == "h100-tp1+never-evict" and fleet.num_gpu_blocks == limit_profile(TP1, workload).num_gpu_blocks
    assert fleet.reported_gpu_blocks == TP1.num_gpu_blocks and fleet.reported_capacity_tokens == TP1.capacity_tokens
    assert fleet.model_len_limit == TP1.model_len_limit
    assert limit_profile(fleet, workload).advertised_gpu_blocks is None
    # a fake vLLM server on such a profile reports the advertised blocks in its cache config, as the simulator does
    labels = cache_config_labels(fleet)
    assert labels["num_gpu_blocks"] == str(TP1.num_gpu_blocks)
    assert labels["kv_cache_size_tokens"] == str(TP1.num_gpu_blocks * TP1.block_size)
    with pytest.raises(ValueError, match="advertised_gpu_blocks: must be between 2 and num_gpu_blocks"):
        NodeProfile("bad", TP1.step, num_gpu_blocks=10, advertised_gpu_blocks=11)


def test_sim_never_evict_reports_the_real_capacity_and_keeps_the_limit_fleet_apart(tmp_path, capsys):
    out = tmp_path / "run.json"
    assert tao([*SMALL, "--never-evict", "--limit", "--json", str(out), "--no-plots"]) == 0
    printed = capsys.readouterr().out
    assert f"fleet: 1 × h100-tp1+never-evict ({TP1.capacity_tokens:,} KV tokens each, never evicted)" in printed
    assert "limit fleet: 1 × h100-tp1+limit " in printed
    document = json.loads(out.read_text())
    assert document["fleet"]["never_evict"] is True and document["fleet"]["capacity_tokens"] == TP1.capacity_tokens
    assert all(run["metrics"]["preemptions"] == 0 for run in document["runs"])
    assert tao([*SMALL, "--never-evict", "--cpu-kv-gib", "8", "--no-plots"]) == 2
    assert "--never-evict: nodes that never evict have no use for a CPU tier" in capsys.readouterr().err


def test_the_limit_profile_keeps_compute_and_the_context_cap_and_drops_the_tier():
    workload = _workload()
    tiered = with_cpu_tier(TP1, 64)
    unbounded = limit_profile(tiered, workload)
    assert unbounded.step == TP1.step and unbounded.max_num_batched_tokens == TP1.max_num_batched_tokens
    assert unbounded.max_num_seqs == TP1.max_num_seqs
    assert unbounded.model_len_limit == TP1.model_len_limit
    assert unbounded.cpu_tier is None and unbounded.name == "h100-tp1+limit"
    bound = sum(-(-r.context_tokens // 16) + 1 for s in workload.scripts for r in s.all_requests())
    assert workload_block_bound(workload, 16) == bound
    assert unbounded.num_gpu_blocks == bound + 1


def test_the_limit_is_the_best_per_metric_and_excess_is_positive_when_worse():
    limit = limit_of(64, [("a", run_metrics(400.0, 0.2, 1000.0)), ("b", run_metrics(500.0, 0.1, 1200.0))])
    assert limit.values == {"latency_mean_s": 400.0, "ttft_mean_s": 0.1, "decode_throughput_tok_s": 1200.0}
    assert limit.set_by == {"latency_mean_s": "a", "ttft_mean_s": "b", "decode_throughput_tok_s": "b"}
    shown = excess(run_metrics(500.0, 0.15, 900.0), limit)
    assert shown == pytest.approx({"latency_mean_s": 0.25, "ttft_mean_s": 0.5, "decode_throughput_tok_s": 0.25})
    assert beats_limit_on(run_metrics(500.0, 0.15, 900.0), limit) == []
    # a run better than the limit on a metric means the limit failed to bound it there
    assert beats_limit_on(run_metrics(390.0, 0.1, 1300.0), limit) == ["latency_mean_s", "decode_throughput_tok_s"]
    # dicts (run files) work as RunMetrics do; one limit per concurrency
    assert excess({"latency_mean_s": 400.0, "ttft_mean_s": None, "decode_throughput_tok_s": 1200.0}, limit) == {
        "latency_mean_s": 0.0,
        "decode_throughput_tok_s": 0.0,
    }
    runs = [RunResult("a", c, 0, run_metrics(100.0 * c, 0.1, 10.0)) for c in (1, 2)]
    assert list(limits_of(runs)) == [1, 2] and isinstance(limits_of(runs)[2], Limit)


def test_sim_limit_writes_limits_and_excess_and_no_run_beats_the_limit(tmp_path, capsys):
    out = tmp_path / "run.json"
    assert tao([*SMALL, "--limit", "--json", str(out), "--no-plots"]) == 0
    printed = capsys.readouterr().out
    assert "limit fleet: 1 × h100-tp1+limit" in printed and "latency excess" in printed
    document = json.loads(out.read_text())
    (bound,) = document["limits"]["bounds"]
    assert bound["concurrency"] == 4 and set(bound["metrics"]) == set(bound["set_by"]) == {
        "latency_mean_s",
        "ttft_mean_s",
        "decode_throughput_tok_s",
    }
    assert [(r["policy"], r["concurrency"]) for r in document["limits"]["runs"]] == [("tao", 4), ("round-robin", 4)]
    for run in document["runs"]:
        assert run["beats_limit_on"] == []
        for field, value in run["excess_over_limit"].items():
            limit = bound["metrics"][field]
            measured = run["metrics"][field]
            sign = 1 if field != "decode_throughput_tok_s" else -1
            assert value == pytest.approx(sign * (measured - limit) / limit, rel=1e-4)
            assert value > 0.1  # memory binds on one TP1 node: every policy is well above the limit


def test_limit_policies_choose_who_runs_on_the_limit_fleet_and_need_limit(tmp_path, capsys):
    out = tmp_path / "run.json"
    assert tao([*SMALL, "--limit", "--limit-policies", "round-robin", "--json", str(out), "--no-plots"]) == 0
    document = json.loads(out.read_text())
    assert [r["policy"] for r in document["limits"]["runs"]] == ["round-robin"]
    assert set(document["limits"]["bounds"][0]["set_by"].values()) == {"round-robin"}
    assert tao([*SMALL, "--limit-policies", "tao", "--no-plots"]) == 2
    assert "--limit-policies: only means something with --limit" in capsys.readouterr().err
    assert tao([*SMALL, "--limit", "--limit-policies", "no-such-policy", "--no-plots"]) == 2


def test_the_charts_of_bounded_metrics_draw_the_limit(monkeypatch, tmp_path):
    kept = []
    close = plt.close

    def keep(figure=None):
        if figure is not None:
            kept.append(figure.axes)
        close(figure)

    monkeypatch.setattr(plt, "close", keep)
    argv = [*SMALL[:-3], "--concurrency", "2,4", "--no-timing", "--limit", "--limit-policies", "round-robin"]
    assert tao([*argv, "--plots", str(tmp_path / "plots")]) == 0
    labels = [[line.get_label() for line in axis.lines] for axes in kept for axis in axes]
    # latency (mean, p99), TTFT (mean, p99), throughput, hit rate: the limit bounds the means and throughput only
    assert [("limit" in shown) for shown in labels] == [True, False, True, False, True, False]
