"""The fleet simulator end to end: hand-computed figures on tiny traces, determinism, the context cap, the CLI."""

import json

import pytest

from tao_coordinator.sim.driver import FleetSimulation
from tao_coordinator.sim.node import NodeProfile, profile_by_name
from tao_coordinator.sim.workloads import generate, load_agentx
from tao_sdk.cli import main as tao


def _request(t, tokens, out, ids, kind="tool_result", think=0.0):
    return {
        "t": t,
        "type": "n",
        "model": "m",
        "in": tokens,
        "out": out,
        "hash_ids": ids,
        "input_types": [kind] if t else ["text"],
        "output_types": ["text"],
        "stop": "end_turn",
        "api_time": 1.0,
        "think_time": think,
    }


def _trace(trace_id, requests):
    return {
        "id": trace_id,
        "models": ["m"],
        "block_size": 64,
        "hash_id_scope": "local",
        "tool_tokens": 0,
        "system_tokens": 0,
        "requests": requests,
    }


def _write(tmp_path, traces):
    path = tmp_path / "trace.jsonl"
    path.write_text("".join(json.dumps(trace) + "\n" for trace in traces))
    return path


def _prefill_ms(new, offset):
    """One prefill step of `new` tokens after `offset` cached ones on H100 TP1 — §8.4 of the vLLM reference, by hand:
    linear max(23.4, 0.099·T) + 0.15·min(…); attention 2.097e6·n·(offset + n/2) / 4e14 FLOP/s; no decode, no
    all-reduce at TP1; 1.5 ms overhead + 1.556e9 B of lm_head at 2.8e12 B/s."""
    linear = max(23.4, 0.099 * new) + 0.15 * min(23.4, 0.099 * new)
    attention = 2.097e6 * new * (offset + new / 2) / 4e14 * 1e3
    return linear + attention + 1.5 + 1.556e9 / 2.8e12 * 1e3


def test_tiny_trace_ttft_and_hit_rate_by_hand(tmp_path):
    # one session: 1,024 tokens (16 trace blocks), then after a 10 s tool 2,048 tokens extending the same prefix
    first = list(range(1, 17))
    second = first + list(range(17, 33))
    path = _write(
        tmp_path, [_trace("trace_0001", [_request(0, 1024, 1, first), _request(11, 2048, 1, second, think=10)])]
    )
    workload = load_agentx(path)
    simulation = FleetSimulation(workload, "round-robin", 1, profile_by_name("h100-tp1"), 1)
    metrics = simulation.run()
    ttft_first, ttft_second = _prefill_ms(1024, 0) / 1e3, _prefill_ms(1024, 1024) / 1e3
    assert simulation.recorder.ttfts == pytest.approx([ttft_first, ttft_second], rel=1e-9)
    assert metrics.tool_end_to_first_token_mean_s == pytest.approx(ttft_second, rel=1e-9)
    # the second prompt finds the first one's 1,024 tokens cached: 1,024 of 3,072 prompt tokens were hits
    assert metrics.prefix_hit_rate == pytest.approx(1024 / 3072)
    # one output token each: the session lasts both prefills plus the tool
    assert metrics.latency_mean_s == pytest.approx(ttft_first + 10.0 + ttft_second, rel=1e-9)
    assert metrics.preemptions == 0


def test_tiny_trace_preemption_count_by_hand(tmp_path):
    # a node of 10 usable 16-token blocks. Two sessions arrive together, each 64 prompt tokens (4 blocks) and 64
    # output tokens: both are admitted (8 blocks); decoding in lockstep, each needs a 5th block after its 64th
    # output... the first gets the last free block, the second has none and is preempted (recompute): 1 preemption.
    # When the first finishes (7 cached blocks + 1 partial freed), the second is re-admitted alone and completes.
    profile = NodeProfile("tiny", profile_by_name("h100-tp1").step, num_gpu_blocks=11)
    traces = [_trace(f"trace_{k:04d}", [_request(0, 64, 64, [10 * k + 1])]) for k in (1, 2)]
    workload = load_agentx(_write(tmp_path, traces))
    simulation = FleetSimulation(workload, "round-robin", 2, profile, 1)
    metrics = simulation.run()
    assert metrics.preemptions == 1
    assert metrics.requests == 2 and metrics.rejected_requests == 0


def test_same_seed_gives_byte_identical_json(tmp_path):
    outputs = []
    for name in ("a.json", "b.json"):
        path = tmp_path / name
        code = tao(
            [
                "sim",
                "--trace",
                "synthetic:swe-agent",
                "--sessions",
                "12",
                "--policy",
                "tao,tao-no-dp,round-robin",
                "--concurrency",
                "4,8",
                "--nodes",
                "2",
                "--seed",
                "7",
                "--no-timing",
                "--json",
                str(path),
            ]
        )
        assert code == 0
        outputs.append(path.read_bytes())
    assert outputs[0] == outputs[1]
    document = json.loads(outputs[0])
    assert [(run["policy"], run["concurrency"]) for run in document["runs"]] == [
        ("tao", 4),
        ("tao", 8),
        ("tao-no-dp", 4),
        ("tao-no-dp", 8),
        ("round-robin", 4),
        ("round-robin", 8),
    ]
    for run in document["runs"]:
        metrics = run["metrics"]
        assert metrics["requests"] == document["workload"]["requests"]
        assert 0 < metrics["prefix_hit_rate"] <= 1
        assert metrics["latency_p50_s"] <= metrics["latency_p99_s"]
        assert metrics["plan_mean_ms"] is None


def test_timing_is_reported_when_asked_and_plots_are_written(tmp_path, capsys):
    code = tao(
        [
            "sim",
            "--sessions",
            "6",
            "--concurrency",
            "3",
            "--nodes",
            "2",
            "--json",
            str(tmp_path / "r.json"),
            "--plots",
            str(tmp_path / "plots"),
        ]
    )
    assert code == 0
    runs = {run["policy"]: run["metrics"] for run in json.loads((tmp_path / "r.json").read_text())["runs"]}
    assert runs["tao"]["plan_mean_ms"] > 0 and runs["tao"]["plans"] > 0
    assert runs["round-robin"]["plans"] == 0
    assert sorted(p.name for p in (tmp_path / "plots").iterdir()) == [
        "hit_rate.png",
        "latency.png",
        "throughput.png",
        "ttft.png",
    ]
    assert "tao" in capsys.readouterr().out


def test_context_cap_removes_what_cannot_fit_and_says_so(capsys):
    workload = generate("claude-code", sessions=8, seed=3)
    peak = max(script.peak_context_tokens for script in workload.scripts)
    assert tao(["sim", "--sessions", "8", "--seed", "3", "--max-context", str(peak - 1), "--concurrency", "2"]) == 0
    out = capsys.readouterr().out
    assert "the context cap of" in out and "removed" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--policy", "nope"], "unknown policy 'nope'"),
        (["--concurrency", "0"], "--concurrency: '0'"),
        (["--concurrency", "x"], "--concurrency: 'x'"),
        (["--node-profile", "a100"], "h100-tp2"),
        (["--trace", "/no/such/file"], "--trace"),
        (["--trace", "synthetic:nope"], "unknown synthetic preset"),
        (["--nodes", "0"], "--nodes"),
    ],
)
def test_bad_arguments_are_named_and_write_nothing(tmp_path, capsys, args, message):
    out = tmp_path / "never.json"
    assert tao(["sim", *args, "--json", str(out)]) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()
