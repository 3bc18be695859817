"""What every fault run reads of a live coordinator, and the one way the table's latency columns are computed.

All of it is loopback HTTP a client could send: `GET /v1/nodes`, `GET /metrics` (parsed with prometheus-client's
own parser), polled every 20 ms by `reached` until a condition holds."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import httpx2
from prometheus_client.parser import text_string_to_metric_families

from ...percentile import percentile

TIMEOUT_S = 20.0


def nodes(url: str) -> dict[str, Any]:
    """The coordinator's `GET /v1/nodes`, by node name."""
    return {node["name"]: node for node in httpx2.get(url + "/v1/nodes", timeout=5).json()["nodes"]}


def metric(url: str, name: str, **labels: str) -> float | None:
    """The first sample of `name` on the coordinator's `/metrics` whose labels include `labels`; None when none."""
    for family in text_string_to_metric_families(httpx2.get(url + "/metrics", timeout=5).text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return float(sample.value)
    return None


def reached(check: Callable[[], bool], timeout: float = TIMEOUT_S) -> float:
    """The monotonic time `check()` first held, polled every 20 ms; `TimeoutError` after `timeout`."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"not reached within {timeout:g} s")
        time.sleep(0.02)
    return time.monotonic()


def added_ms(usual_s: list[float], affected_s: list[float]) -> tuple[float | None, float | None]:
    """p50 and p99 of what the fault added to the affected calls: each one's duration less the usual calls' median
    (never below 0), in ms; None for both when either list is empty."""
    if not usual_s or not affected_s:
        return None, None
    usual = statistics.median(usual_s)
    added = sorted(max(0.0, duration - usual) * 1000 for duration in affected_s)
    return percentile(added, 0.5, method="nearest"), percentile(added, 0.99, method="nearest")
