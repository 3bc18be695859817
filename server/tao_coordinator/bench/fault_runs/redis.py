"""Redis restarted without persistence under a coordinator on `--redis` and live SDK sessions: every stored session
is gone. Measured: the model calls around it (failed ones, latency added against the calls before), the time until
the coordinator says it lost its state (`tao_redis_anomalies{kind="lost"}`) and until it serves as leader again,
and the fence before and after (it must not go back)."""

from __future__ import annotations

import tempfile
import threading
import time
from pathlib import Path

import httpx2

import tao_sdk

from ...fakevllm import FakeNodeConfig, ThreadedFleet
from ...fakevllm.config import DEFAULT_MODEL
from ...ha import LocalRedis, RedisNotInstalled
from ...local_coordinator import coordinator_process
from ..faults import until
from . import FaultRow
from .observe import added_ms, metric

REDIS_RUN_SESSIONS = 4
BEFORE_S = 3.0
AFTER_S = 6.0


def run() -> list[FaultRow]:
    name = "Redis restarted without persistence"
    try:
        redis = LocalRedis()
    except RedisNotInstalled as error:
        return [FaultRow(name, 0, 0, note=f"not run: {error}")]
    with (
        redis,
        tempfile.TemporaryDirectory(prefix="tao-faults-") as scratch,
        ThreadedFleet(2, FakeNodeConfig(time_scale=50), kv_events=False) as fleet,
    ):
        nodes = [f"node-{k}={url},10000000" for k, url in enumerate(fleet.urls)]
        log = Path(scratch) / "coordinator.log"
        with coordinator_process(nodes, log_path=log, extra_args=["--redis", redis.url]) as coordinator:
            url = coordinator.url
            until(lambda: _leader(url)[0] == "leader", time.monotonic(), 10.0)
            fence_before = _leader(url)[1]
            stop = threading.Event()
            calls: list[tuple[float, float, bool]] = []
            agents = [
                threading.Thread(target=_agent, args=(url, calls, stop), daemon=True) for _ in range(REDIS_RUN_SESSIONS)
            ]
            for agent in agents:
                agent.start()
            time.sleep(BEFORE_S)
            restarted = time.monotonic()
            redis.restart()
            detect_s = until(lambda: _lost(url) >= 1, restarted, 10.0)
            recover_s = until(lambda: _leader(url)[0] == "leader", restarted, 10.0)
            time.sleep(AFTER_S)
            live = len(httpx2.get(url + "/v1/sessions", timeout=5).json()["sessions"])
            stop.set()
            for agent in agents:
                agent.join(30)
            fence_after = _leader(url)[1]
            tracebacks = coordinator.tracebacks()
    before = [end - start for start, end, _ in calls if end < restarted]
    window = restarted + (recover_s or AFTER_S)
    added_p50_ms, added_p99_ms = added_ms(
        before, [end - start for start, end, _ in calls if end >= restarted and start < window]
    )
    return [
        FaultRow(
            name,
            calls=len(calls),
            failed=sum(failed for _, _, failed in calls),
            added_p50_ms=added_p50_ms,
            added_p99_ms=added_p99_ms,
            detect_s=detect_s,
            recover_s=recover_s,
            tracebacks=tracebacks,
            note=f"fence {fence_before} before, {fence_after} after (never back); "
            f"{live} of {REDIS_RUN_SESSIONS} sessions registered again on their own",
        )
    ]


def _agent(url: str, calls: list[tuple[float, float, bool]], stop: threading.Event) -> None:
    with tao_sdk.session(url, context=tao_sdk.AgentContext(harness="bench-faults")) as s:
        client = s.openai(max_retries=0)
        turn = 0
        while not stop.is_set():
            with s.tool("bash", command="true"):
                pass
            started = time.monotonic()
            messages = [{"role": "user", "content": f"turn {turn} of a looping agent"}]
            try:
                client.chat.completions.create(model=DEFAULT_MODEL, messages=messages, max_tokens=2)
                calls.append((started, time.monotonic(), False))
            except Exception:  # counted: a call the agent saw fail
                calls.append((started, time.monotonic(), True))
            turn += 1
            stop.wait(0.25)


def _leader(url: str) -> tuple[str, int | None]:
    try:
        body = httpx2.get(url + "/v1/leader", timeout=2).json()
    except (httpx2.HTTPError, ValueError):
        return "unreachable", None
    return str(body["role"]), body["fence"]


def _lost(url: str) -> float:
    try:
        return metric(url, "tao_redis_anomalies_total", kind="lost") or 0.0
    except httpx2.HTTPError:
        return 0.0
