"""The state directory's disk fills up under a real coordinator process (a real tmpfs).

Nothing is acknowledged that is not stored: every tool end answered 204 is in the SQLite file after a restart; one
that cannot be stored is answered 503 (a JSON reason, Retry-After) and changes nothing — its call still runs, so the
same tool end sent again later is accepted, not refused as a repeat. The store's state changes are one log line
each, refusals are counted, and the service takes tool ends again within one scrape interval of space returning.
"""

from __future__ import annotations

import contextlib
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest

from tao_coordinator.bench.fault_runs.disk import SCRAPE_INTERVAL_S, TmpfsUnavailable, disk_full, fill, tmpfs
from tao_coordinator.fakevllm import FakeNodeConfig, ThreadedFleet
from tao_coordinator.local_coordinator import CoordinatorProcess, coordinator_process


def test_a_flood_against_a_full_disk_loses_no_acknowledged_tool_end():
    try:
        run = disk_full(clients=8, before_s=0.5, full_s=1.5, after_s=0.5)
    except TmpfsUnavailable as error:
        pytest.skip(f"needs a real tmpfs: {error}")
    assert run.refused > 0 and len(run.acknowledged) > run.refused / 10, run
    assert run.lost == 0, f"{run.lost} tool ends answered 204 and not in the store after a restart"
    assert run.refusals_well_formed
    assert run.other_answers == 0, "a refused tool end sent again must be accepted: the refusal changed nothing"
    assert run.recover_s is not None and run.recover_s <= SCRAPE_INTERVAL_S, run.recover_s
    assert run.failing_lines == run.recovered_lines >= 1 and run.failing_lines <= 2
    assert run.refused_metric == run.refused
    assert f"{len(run.acknowledged)} rows written by this run, {run.refused} tool ends not written" in (
        run.shutdown_line
    )
    assert run.tracebacks == 0 and run.restarted


@pytest.fixture
def full_state() -> Iterator[tuple[CoordinatorProcess, Path]]:
    with contextlib.ExitStack() as stack:
        scratch = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        fleet = stack.enter_context(ThreadedFleet(1, FakeNodeConfig(time_scale=50), kv_events=False))
        try:
            state = stack.enter_context(tmpfs(scratch / "state"))
        except TmpfsUnavailable as error:
            pytest.skip(f"needs a real tmpfs: {error}")
        nodes = [f"node-0={fleet.urls[0]},10000000"]
        yield stack.enter_context(coordinator_process(nodes, state, log_path=scratch / "log")), state


def test_a_refused_tool_end_changes_nothing_and_is_accepted_once_space_returns(full_state):
    coordinator, state = full_state
    url = coordinator.url
    assert httpx2.post(f"{url}/v1/sessions", json={"session_id": "s1"}).status_code == 201
    start = {"call_id": "c1", "tool": "pytest", "program": "tox"}
    assert httpx2.post(f"{url}/v1/sessions/s1/tool_start", json=start).status_code == 204
    filler = fill(state)

    refused = httpx2.post(f"{url}/v1/sessions/s1/tool_end", json={"call_id": "c1", "duration_s": 2.5})
    assert refused.status_code == 503
    assert refused.json()["code"] == "store_unavailable" and "disk is full" in refused.json()["error"]
    assert int(refused.headers["Retry-After"]) >= 1
    batched = {"events": [{"kind": "tool_end", "session_id": "s1", "tool_end": {"call_id": "c1"}}]}
    assert httpx2.post(f"{url}/v1/events", json=batched).json()["results"][0]["status"] == 503
    session = next(s for s in httpx2.get(f"{url}/v1/sessions").json()["sessions"] if s["session_id"] == "s1")
    assert session["phase"] == "in_tool" and session["running_tools"] == ["pytest"]
    assert "tao_store_writable 0.0" in httpx2.get(f"{url}/metrics").text

    filler.unlink()
    freed = time.monotonic()
    end, refusals = {"call_id": "c1", "duration_s": 2.5}, 2
    while (again := httpx2.post(f"{url}/v1/sessions/s1/tool_end", json=end)).status_code == 503:
        assert time.monotonic() - freed < SCRAPE_INTERVAL_S, "not writable again within one scrape interval"
        refusals += 1
        time.sleep(0.05)
    assert again.status_code == 204
    metrics = httpx2.get(f"{url}/metrics").text
    assert "tao_store_writable 1.0" in metrics and f"tao_store_refused_writes_total {refusals:.1f}" in metrics
    assert coordinator.tracebacks() == 0
