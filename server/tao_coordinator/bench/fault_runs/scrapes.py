"""How the coordinator observes a node that lies or restarts, as rows of the table: a `/metrics` with NaN or ±Inf, an
absurd or zero capacity, an empty `/metrics`, and an engine restart that numbers its KV events from 0 again.

One `tao coordinator` process with the default fleet settings (2 s scrapes, unhealthy after 2 failed ones, KV
evidence handed to the core every 0.5 s) over two fake vLLM nodes, `bad` (KV events, replay socket) and `good`.
Faults are flipped on `bad` while everything runs (`PUT /fake/faults`, `POST /fake/restart`, `fakevllm/faults.py`).

Metrics rows: while the fault is on and until it is undone, a client makes model calls through the coordinator
(register, acquire, a chat to the granted node, llm_end, close) one after another; a call fails when it is not
admitted or raises. detect_s: from the flip to `GET /v1/nodes` showing `bad` not healthy (each fault of the row in
turn, the longest); recover_s: from the fault undone to `bad` healthy again. The note gives the reason shown and,
for capacity, the capacity shown meanwhile (the believed one, never the reported one).

KV-event restart: session `old` computes a long prefix on `bad`, whose engine then restarts; session `new` computes
a short one. The restart shows only with the new process's first batch, so both times run from the start of that
call: detect_s to the coordinator's `tao_node_kv_event_resets_total`, recover_s to the node's KV credit
(`tao_node_kv_credit_tokens`) being `new`'s alone (the stale credit of `old` gone). The target is 2 s.
"""

from __future__ import annotations

import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx2

from ...fakevllm import FakeNodeConfig, ThreadedFleet
from ...fakevllm.config import DEFAULT_MODEL
from ...fakevllm.fleet import FakeNode
from ...local_coordinator import CoordinatorProcess, coordinator_process
from . import FaultRow
from .observe import metric, nodes, reached

"""Longest wait for one detection or recovery (two scrapes take 4 s)."""
CREDIT_TARGET_S = 2.0
SCRAPE_INTERVAL_S = 2.0
"""The fleet's default."""


@dataclass
class Traffic:
    calls: int = 0
    failed: int = 0
    placed: list[tuple[float, str]] = field(default_factory=list)
    """(when the acquire was answered, the node it named) of every admitted call."""

    def on_bad_within(self, windows: list[tuple[float, float]]) -> int:
        return sum(node == "bad" and any(a <= at < b for a, b in windows) for at, node in self.placed)


def run(scrape_interval_s: float = SCRAPE_INTERVAL_S) -> list[FaultRow]:
    """The four rows; `scrape_interval_s` other than the default only to test this run quickly."""
    with (
        tempfile.TemporaryDirectory(prefix="tao-scrapes-") as scratch,
        ThreadedFleet(2, FakeNodeConfig(time_scale=50)) as fleet,
    ):
        bad, good = fleet.nodes
        config = Path(scratch) / "fleet.toml"
        config.write_text(f"[fleet]\nscrape_interval_s = {scrape_interval_s}\n\n" + _fleet_toml(bad, good))
        log = Path(scratch) / "coordinator.log"
        with coordinator_process([], log_path=log, extra_args=["--config", str(config)]) as coordinator:
            reached(lambda: all(n["healthy"] for n in nodes(coordinator.url).values()))
            rows = []
            for fault, flips in (
                (
                    "metrics NaN/Inf",
                    [{"metrics": "nan", "metrics_series": "vllm:kv_cache_usage_perc"}, {"metrics": "inf"}],
                ),
                ("absurd capacity (1.6e31, then 0)", [{"metrics": "huge_capacity"}, {"metrics": "zero_capacity"}]),
                ("empty /metrics", [{"metrics": "empty"}]),
            ):
                before = coordinator.tracebacks()
                row = _metrics_row(coordinator, bad, fault, flips)
                row.tracebacks = coordinator.tracebacks() - before
                rows.append(row)
            before = coordinator.tracebacks()
            row = _restart_row(coordinator, bad)
            row.tracebacks = coordinator.tracebacks() - before
            rows.append(row)
    return rows


def _fleet_toml(bad: FakeNode, good: FakeNode) -> str:
    return (
        f'[[nodes]]\nname = "bad"\nurl = "{bad.url}"\n'
        f'kv_events = "{bad.kv_endpoint}"\nkv_events_replay = "{bad.kv_replay_endpoint}"\n\n'
        f'[[nodes]]\nname = "good"\nurl = "{good.url}"\n'
    )


def _metrics_row(coordinator: CoordinatorProcess, bad: FakeNode, fault: str, flips: list[dict[str, str]]) -> FaultRow:
    url = coordinator.url
    capacity = nodes(url)["bad"]["capacity_tokens"]
    detects, recovers, reasons, shown_capacity = [], [], [], set()
    shown_bad: list[tuple[float, float]] = []
    """When `GET /v1/nodes` showed `bad` unusable: no acquire answered then may name it."""
    with _traffic(url) as traffic:
        for faults in flips:
            _put_faults(bad, faults)
            flipped = time.monotonic()
            shown = reached(lambda: not nodes(url)["bad"]["healthy"])
            detects.append(shown - flipped)
            node = nodes(url)["bad"]
            reasons.append(node["unhealthy_reason"])
            shown_capacity.add(node["capacity_tokens"])
            _put_faults(bad, {})
            undone = time.monotonic()
            recovers.append(reached(lambda: nodes(url)["bad"]["healthy"]) - undone)
            shown_bad.append((shown, undone))
    note = "; ".join(f"shown: {reason}" for reason in reasons)
    if "capacity" in fault:
        note += f"; capacity shown meanwhile {sorted(shown_capacity)} (believed {capacity})"
    note += f"; {traffic.on_bad_within(shown_bad)} calls placed on it while shown unusable"
    return FaultRow(fault, traffic.calls, traffic.failed, detect_s=max(detects), recover_s=max(recovers), note=note)


def _restart_row(coordinator: CoordinatorProcess, bad: FakeNode) -> FaultRow:
    url = coordinator.url
    with httpx2.Client(base_url=url, timeout=10) as http:
        for session in ("old", "new"):
            assert http.post("/v1/sessions", json={"session_id": session}).status_code == 201
    time.sleep(0.5)
    _chat(bad.openai_base_url, "old", 1200)
    reached(lambda: _credit(url) > 0)
    old_credit = _credit(url)
    httpx2.post(bad.url + "/fake/restart", timeout=10).raise_for_status()
    started = time.monotonic()
    _chat(bad.openai_base_url, "new", 300)
    detect = reached(lambda: metric(url, "tao_node_kv_event_resets_total", node="bad") == 1) - started
    recover = reached(lambda: 0 < _credit(url) != old_credit) - started
    note = (
        f"KV credit on the node {old_credit} tokens (old) → {_credit(url)} (new) "
        f"{recover:.2f} s after the new process's first call (target {CREDIT_TARGET_S:g} s)"
    )
    return FaultRow(
        "KV-event restart (numbers back to 0)", calls=2, failed=0, detect_s=detect, recover_s=recover, note=note
    )


@contextmanager
def _traffic(url: str) -> Iterator[Traffic]:
    """Model calls one after another through the coordinator until the block ends."""
    traffic, stop = Traffic(), threading.Event()

    def loop() -> None:
        with httpx2.Client(base_url=url, timeout=10) as http:
            k = 0
            while not stop.is_set():
                k += 1
                traffic.calls += 1
                try:
                    if not _one_call(http, f"t{time.monotonic_ns()}-{k}", traffic):
                        traffic.failed += 1
                except (httpx2.HTTPError, ValueError, KeyError):
                    traffic.failed += 1
                time.sleep(0.05)

    thread = threading.Thread(target=loop, name="scrape-fault traffic", daemon=True)
    thread.start()
    try:
        yield traffic
    finally:
        stop.set()
        thread.join(30)


def _one_call(http: httpx2.Client, session: str, traffic: Traffic) -> bool:
    """One model call as a client makes it; False when it was not admitted."""
    http.post("/v1/sessions", json={"session_id": session, "expected_input_tokens": 2000}).raise_for_status()
    try:
        grant = http.post(f"/v1/sessions/{session}/acquire", json={"wait_s": 2.0}).json()
        if grant.get("status") != "admitted":
            return False
        traffic.placed.append((time.monotonic(), str(grant["node"])))
        _chat(grant["base_url"], session, 200)
        end = {"node": grant["node"], "prompt_tokens": 200, "completion_tokens": 4}
        http.post(f"/v1/sessions/{session}/llm_end", json=end).raise_for_status()
        return True
    finally:
        http.delete(f"/v1/sessions/{session}")


def _chat(base_url: str, session: str, words: int) -> None:
    text = f"[{session}] " + " ".join(f"w{i % 89}" for i in range(words))
    body = {"model": DEFAULT_MODEL, "messages": [{"role": "user", "content": text}], "max_tokens": 4}
    answer = httpx2.post(f"{base_url}/chat/completions", json=body, headers={"X-Session-ID": session}, timeout=10)
    answer.raise_for_status()


def _put_faults(node: FakeNode, faults: dict[str, str]) -> None:
    httpx2.put(node.url + "/fake/faults", json=faults, timeout=10).raise_for_status()


def _credit(url: str) -> float:
    return metric(url, "tao_node_kv_credit_tokens", node="bad", tier="GPU") or 0.0
