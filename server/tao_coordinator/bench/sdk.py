"""`tao bench sdk`: what the SDK adds to each model call — acquire before it, report after it — on loopback.

One fake vLLM node (engine time scaled down so the node itself costs almost nothing) and a real coordinator in its
own process. The benchmark alternates calls made directly to the node with calls made through a session's routed
`openai.OpenAI` client (same prompt, non-streaming, one output token), so drift on a shared machine affects both
alike.

Two figures. The SDK's own time per call is measured around the SDK's transport — acquire, URL rewrite, the node
request, reading the body, the `llm_end` report — minus the node request measured just inside it: exactly what
routing adds. The end-to-end difference of the medians (routed − direct) also contains how the fake node reacts to
a request that arrives after a short idle gap (the acquire), which is the fake's real-time emulation, not the SDK.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx2

from tao_sdk.sessions import PLACEHOLDER_OPENAI
from tao_sdk.transport import TaoTransport

from ..fakevllm.config import DEFAULT_MODEL, FakeNodeConfig
from ..local_coordinator import local_coordinator


class _Stopwatch(httpx2.BaseTransport):
    """Times what happens inside the wrapped transport, the response body read and the stream closed included."""

    def __init__(self, inner: httpx2.BaseTransport) -> None:
        self.inner = inner
        self.spent_ms = 0.0

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        started = time.perf_counter()
        response = self.inner.handle_request(request)
        body = response.read()
        response.close()
        self.spent_ms += (time.perf_counter() - started) * 1e3
        return httpx2.Response(response.status_code, headers=response.headers, content=body, request=request)

    def close(self) -> None:
        self.inner.close()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--calls", type=int, default=400, help="calls of each kind")
    parser.add_argument("--json", type=Path, help="write the figures as JSON to this file")


def _timed(call: Callable[[], Any]) -> float:
    started = time.perf_counter()
    call()
    return (time.perf_counter() - started) * 1e3


def _measure(coordinator: str, node_url: str, calls: int) -> dict[str, list[float]]:
    import openai

    import tao_sdk

    messages: Any = [{"role": "user", "content": "benchmark " * 50}]
    direct = openai.OpenAI(base_url=node_url + "/v1", api_key="x")
    with tao_sdk.session(coordinator) as session:
        node = _Stopwatch(httpx2.HTTPTransport())
        sdk = _Stopwatch(TaoTransport(session.sync_router(), node))
        routed = openai.OpenAI(base_url=PLACEHOLDER_OPENAI, api_key="x", http_client=httpx2.Client(transport=sdk))

        def direct_call() -> None:
            direct.chat.completions.create(model=DEFAULT_MODEL, messages=messages, max_tokens=1)

        def routed_call() -> None:
            routed.chat.completions.create(model=DEFAULT_MODEL, messages=messages, max_tokens=1)

        for _ in range(10):
            direct_call()
            routed_call()
        timings: dict[str, list[float]] = {"direct": [], "routed": [], "sdk_own": []}
        for _ in range(calls):
            timings["direct"].append(_timed(direct_call))
            node.spent_ms = sdk.spent_ms = 0.0
            timings["routed"].append(_timed(routed_call))
            timings["sdk_own"].append(sdk.spent_ms - node.spent_ms)
    return timings


def run(args: argparse.Namespace) -> int:
    from ..fakevllm.fleet import ThreadedFleet
    from ..percentile import percentile

    if args.calls < 10:
        print("tao bench sdk: --calls must be at least 10", file=sys.stderr)
        return 2
    with (
        ThreadedFleet(1, FakeNodeConfig(time_scale=1000), kv_events=False) as fleet,
        local_coordinator([f"n0={fleet.urls[0]},10000000"]) as url,
    ):
        timings = _measure(url, fleet.urls[0], args.calls)
    figures = {
        name: {
            "p50_ms": percentile(t, 0.5, method="nearest"),
            "p99_ms": percentile(t, 0.99, method="nearest"),
            "mean_ms": statistics.fmean(t),
        }
        for name, t in timings.items()
    }
    difference = figures["routed"]["p50_ms"] - figures["direct"]["p50_ms"]
    print(f"{args.calls} calls each, alternating; coordinator in its own process, loopback")
    for name, f in figures.items():
        print(f"  {name:8} p50 {f['p50_ms']:.3f} ms   p99 {f['p99_ms']:.3f} ms   mean {f['mean_ms']:.3f} ms")
    print(f"SDK's own time per call (acquire + report + rewrite): {figures['sdk_own']['p50_ms']:.3f} ms at p50")
    print(f"end-to-end difference of the medians (routed − direct): {difference:.3f} ms")
    if args.json:
        document = {"calls": args.calls, **figures, "routed_minus_direct_p50_ms": difference}
        args.json.write_text(json.dumps(document, indent=2) + "\n")
        print(f"wrote {args.json}")
    return 0
