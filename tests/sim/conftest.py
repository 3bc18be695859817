"""Helpers shared by the simulator's tests."""

from tao_coordinator.sim.metrics import RunMetrics


def run_metrics(latency: float, ttft: float, throughput: float, **fields: object) -> RunMetrics:
    """A run's metrics with the three figures the limit bounds, plain values elsewhere, `fields` overriding any."""
    base: dict[str, object] = {
        "latency_mean_s": latency,
        "latency_p50_s": latency,
        "latency_p99_s": latency,
        "ttft_mean_s": ttft,
        "ttft_p50_s": ttft,
        "ttft_p99_s": ttft,
        "decode_throughput_tok_s": throughput,
        "tool_end_to_first_token_mean_s": ttft,
        "prefix_hit_rate": 0.5,
        "preemptions": 0,
        "makespan_s": 1000.0,
        "plan_mean_ms": None,
        "plan_p95_ms": None,
        "planner_overhead_share": None,
        "engine_ttft_mean_s": ttft,
        "requests": 10,
        "rejected_requests": 0,
        "plans": 0,
    }
    return RunMetrics(**{**base, **fields})
