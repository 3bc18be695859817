"""vLLM 0.33 `/metrics` as a two-engine node shows it (golden texts in `data/`, written from the vLLM reference): the
figures read, the CPU tier unknown until it is shown, every figure checked, and the capacity rules
(`capacity_guard.py`)."""

from __future__ import annotations

import math
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from tao_coordinator.config import FleetConfig, NodeConfig
from tao_coordinator.fleet.capacity_guard import CapacityGuard
from tao_coordinator.fleet.poller import NodeObservation, NodePoller
from tao_coordinator.fleet.vllm_metrics import MetricsFormatError, parse_metrics
from tests.fleet.conftest import scripted_node

DATA = Path(__file__).parent / "data"
SERVING = (DATA / "vllm-0.33-dp2-serving.txt").read_text()
FRESH = (DATA / "vllm-0.33-dp2-fresh.txt").read_text()


def test_a_serving_node_reads_as_two_ranks_with_a_cpu_tier_rejections_and_host_hits():
    metrics = parse_metrics(SERVING)
    assert (metrics.ranks, metrics.capacity_tokens) == (2, (35452 - 2) * 16)
    assert metrics.cpu_capacity_tokens == 2 * 16384 * 16
    assert (metrics.admission_rejections, metrics.host_cached_tokens) == (4, 132096 + 500000)
    assert (metrics.running, metrics.waiting, metrics.kv_fetch_waiting) == (67, 7, 3)
    assert metrics.kv_usage == pytest.approx((0.8734 + 0.5) / 2)
    assert metrics.process_start == 1.79598040123e9


def test_a_fresh_node_has_no_cpu_tier_figure_yet_which_is_unknown_not_none():
    metrics = parse_metrics(FRESH)
    assert metrics.cpu_capacity_tokens is None
    assert (metrics.capacity_tokens, metrics.admission_rejections, metrics.host_cached_tokens) == (567200, 0, 0)


def test_ranks_that_have_not_stepped_yet_are_taken_as_alike():
    one_rank = "\n".join(
        line
        for line in SERVING.splitlines()
        if not line.startswith("vllm:kv_offload_config_info{") or 'engine="0"' in line
    )
    assert parse_metrics(one_rank + "\n").cpu_capacity_tokens == 2 * 16384 * 16


READ = [
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:kv_cache_usage_perc",
    "vllm:prefix_cache_queries_total",
    "vllm:prefix_cache_hits_total",
    "vllm:num_preemptions_total",
    "vllm:prompt_tokens_by_source_total",
    "vllm:prompt_tokens_cached_by_source_total",
    "vllm:generation_tokens_total",
    "vllm:admission_rejections_total",
    "vllm:inter_token_latency_seconds_sum",
    "vllm:inter_token_latency_seconds_count",
    "vllm:request_prefill_time_seconds_sum",
    "vllm:kv_offload_load_time_total",
    "vllm:num_requests_kv_fetch_by_stage",
    "process_start_time_seconds",
]


def with_value(text: str, series: str, value: str) -> str:
    """`text` with the last sample of `series` set to `value` (for a labelled series: one with `source="host"` or
    `stage="in_progress"` where it has those)."""
    lines = text.splitlines()
    hits = [k for k, line in enumerate(lines) if line.startswith((series + "{", series + " "))]
    preferred = [k for k in hits if 'source="host"' in lines[k] or 'stage="in_progress"' in lines[k]]
    k = (preferred or hits)[-1]
    lines[k] = lines[k].rsplit(" ", 1)[0] + " " + value
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("series", READ)
@pytest.mark.parametrize(("value", "shown"), [("NaN", "is NaN"), ("+Inf", "is +Inf"), ("-Inf", "is -Inf"), ("-3", "")])
def test_every_figure_read_is_checked_and_named(series, value, shown):
    with pytest.raises(MetricsFormatError) as raised:
        parse_metrics(with_value(SERVING, series, value))
    assert raised.value.kind == "bad_figure" and str(raised.value).startswith(series)
    assert shown in str(raised.value)


@pytest.mark.parametrize(
    ("series", "value"), [("vllm:kv_cache_usage_perc", "1.5"), ("vllm:num_requests_running", "1e300")]
)
def test_figures_out_of_their_range_are_refused(series, value):
    with pytest.raises(MetricsFormatError, match="outside"):
        parse_metrics(with_value(SERVING, series, value))


def test_a_nan_in_a_series_the_coordinator_does_not_read_is_harmless():
    assert parse_metrics(with_value(SERVING, "vllm:request_success_total", "NaN")).running == 67


@pytest.mark.parametrize("text", ["", "\n\n", "# HELP python_info x\n# TYPE python_info gauge\npython_info 1.0\n"])
def test_no_vllm_series_is_an_empty_scrape(text):
    with pytest.raises(MetricsFormatError) as raised:
        parse_metrics(text)
    assert raised.value.kind == "empty"


def test_capacity_rules():
    guard = CapacityGuard(ceiling=10**9)
    assert guard.check(None, None, (1.0, 1)) is None and guard.trusted is None  # no figure: nothing to judge
    assert guard.check(322_000, None, (1.0, 1)) is None and guard.trusted == 322_000
    for capacity, cpu, kind in ((0, None, "no_capacity"), (-16, None, "no_capacity"),
                                (16 * 10**30, None, "above_ceiling"), (322_000, 10**10, "above_ceiling"),
                                (644_000, None, "capacity_changed")):  # fmt: skip
        quarantine = guard.check(capacity, cpu, (1.0, 1))
        assert quarantine is not None and quarantine.kind == kind, capacity
        assert guard.trusted == 322_000
    assert guard.check(322_000, 10**8, (1.0, 1)) is None
    assert guard.check(644_000, None, (2.0, 1)) is None and guard.trusted == 644_000  # a new process
    assert guard.check(966_000, None, (2.0, 2)) is None  # an engine more
    guard.node_lost()
    assert guard.check(322_000, None, (2.0, 2)) is None and guard.trusted == 322_000  # back after being lost
    assert guard.check(644_000, None, (2.0, 2)) is not None


async def test_the_poller_keeps_a_known_cpu_tier_while_a_restarted_node_does_not_show_it_yet():
    texts = [FRESH, SERVING, FRESH]

    async def metrics(request: web.Request) -> web.Response:
        return web.Response(text=texts.pop(0))

    async def health(request: web.Request) -> web.Response:
        return web.Response()

    seen: list[NodeObservation] = []
    async with scripted_node({"/health": health, "/metrics": metrics}) as url, aiohttp.ClientSession() as http:
        poller = NodePoller(NodeConfig(name="n", url=url), FleetConfig(), http, seen.append)
        for _ in range(3):
            await poller.scrape_once()
    assert [(o.cpu_capacity_tokens, o.cpu_tier_known) for o in seen] == [(0, False), (524288, True), (524288, True)]
    assert all(o.healthy for o in seen) and seen[1].admission_rejections == 4
    assert not math.isnan(seen[1].load.kv_usage)
