"""Backpressure end to end: one small fake vLLM node, a real coordinator, more sessions than places. Waiting calls
are told their position and an estimated wait; the SDK shows them, `tao proxy` passes them on as headers, and past
its bound answers 429 with Retry-After while the session keeps its place."""

import statistics
import subprocess
import sys
import threading
import time

import httpx2
import openai
import pytest

import tao_sdk
from tao_coordinator.fakevllm import FakeNodeConfig, ThreadedFleet
from tao_sdk.proxy import ProxyConfig
from tao_sdk.queue_state import QueueState

from .test_proxy import MODEL, ThreadedProxy

PROMPT = "word " * 800  # about 1,000 tokens: with the default 512 of output, one session fills the node
HOLD_S = 0.8
"""How long each session holds its place between its two calls: the steady rate the queue is served at."""
POLL = {"request_timeout_s": 0.5}  # a waiting call is told where it stands every 0.25 s


@pytest.fixture(scope="module")
def one_node():
    with ThreadedFleet(1, FakeNodeConfig(time_scale=50)) as running:
        yield running


@pytest.fixture
def small_coordinator(coordinator_factory, one_node):
    nodes = [{"name": "node-0", "url": one_node.urls[0], "capacity_tokens": 1_500}]
    return coordinator_factory(one_node.urls, nodes=nodes)


def chat(client: openai.OpenAI) -> None:
    client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": PROMPT}], max_tokens=4)


def in_order(coordinator, count: int, run) -> None:
    """Run `run(k)` for k in range(count), each in a thread started once the session before it has asked for its
    place (it holds one or waits for one), so that they ask in order."""
    asked = coordinator.call(asking(coordinator))
    threads = []
    for k in range(count):
        thread = threading.Thread(target=run, args=(k,))
        thread.start()
        threads.append(thread)
        deadline = time.monotonic() + 10
        while coordinator.call(asking(coordinator)) < asked + k + 1 and time.monotonic() < deadline:
            time.sleep(0.005)
    for thread in threads:
        thread.join(60)


async def asking(coordinator) -> int:
    """Sessions that hold a place or wait for one, read on the coordinator's own loop."""
    sessions = coordinator.service.coordinator.sessions.values()
    return len([s for s in sessions if s.acquire_pending or s.node is not None])


def ratios(told: list[QueueState], granted_at: float) -> list[float]:
    """Each estimate against the wait that was left when it was given."""
    return [q.estimated_wait_s / (granted_at - q.updated_at) for q in told if q.estimated_wait_s]


def test_sdk_sessions_are_told_increasing_positions_and_a_wait_close_to_the_real_one(small_coordinator):
    sessions = 6
    told: dict[int, list[QueueState]] = {k: [] for k in range(sessions)}
    shown: dict[int, list[bool]] = {k: [] for k in range(sessions)}
    granted_at: dict[int, float] = {}

    def run(k: int) -> None:
        opened: list[tao_sdk.Session] = []

        def on_queue(queue: QueueState) -> None:
            told[k].append(queue)
            shown[k].append(opened[0].queue is queue)

        context = tao_sdk.AgentContext(harness="queue-test")
        with tao_sdk.session(small_coordinator.url, small_coordinator.token, context, on_queue=on_queue, **POLL) as s:
            opened.append(s)
            client = s.openai()
            chat(client)
            granted_at[k] = time.time()
            assert s.queue is None
            time.sleep(HOLD_S)
            chat(client)

    in_order(small_coordinator, sessions, run)
    assert len(granted_at) == sessions
    assert told[0] == []  # the first found the node free
    first = [told[k][0].position for k in range(1, sessions)]
    assert first == [1, 2, 3, 4, 5]
    for k in range(1, sessions):
        positions = [q.position for q in told[k]]
        assert positions == sorted(positions, reverse=True) and all(shown[k])
    estimated = [k for k in range(sessions) if any(q.estimated_wait_s for q in told[k])]
    assert len(estimated) >= 3  # once the queue has been served, waiting calls get a finite estimate
    found = [r for k in estimated for r in ratios(told[k], granted_at[k])]
    print(
        f"estimate / remaining wait over {len(found)} answers: median {statistics.median(found):.2f}, "
        f"min {min(found):.2f}, max {max(found):.2f}"
    )
    assert 1 / 3 < statistics.median(found) < 3


def close(proxy: ThreadedProxy, session_id: str) -> None:
    events = {"events": [{"kind": "close", "session_id": session_id}]}
    assert httpx2.post(proxy.url + "/tao/v1/events", json=events).status_code == 200


def call(proxy: ThreadedProxy, session_id: str) -> httpx2.Response:
    body = {"model": MODEL, "messages": [{"role": "user", "content": PROMPT + session_id}], "max_tokens": 4}
    return httpx2.post(proxy.url + "/v1/chat/completions", json=body, headers={"x-tao-session": session_id}, timeout=30)


def test_the_proxy_passes_the_queue_on_as_headers(small_coordinator):
    headers: dict[int, httpx2.Headers] = {}
    with ThreadedProxy(ProxyConfig(small_coordinator.url, small_coordinator.token, options=POLL)) as proxy:
        assert "x-tao-queue-position" not in call(proxy, "holder").headers  # it did not wait
        threading.Timer(HOLD_S, close, (proxy, "holder")).start()
        first = call(proxy, "first").headers
        assert first["x-tao-queue-position"] == "1" and "x-tao-estimated-wait" not in first  # not served yet
        threading.Timer(HOLD_S, close, (proxy, "first")).start()

        def run(k: int) -> None:
            headers[k] = call(proxy, f"proxy-q-{k}").headers
            time.sleep(HOLD_S)
            close(proxy, f"proxy-q-{k}")

        in_order(small_coordinator, 3, run)
    assert [int(headers[k]["x-tao-queue-position"]) for k in range(3)] == [1, 2, 3]
    waits = [float(headers[k]["x-tao-estimated-wait"]) for k in range(3)]
    print(f"proxy: estimated waits {waits} s with {HOLD_S} s per session")
    assert waits == sorted(waits) and 0 < waits[0] < 30


def test_past_its_bound_the_proxy_answers_429_and_the_session_keeps_its_place(small_coordinator):
    config = ProxyConfig(small_coordinator.url, small_coordinator.token, options=POLL, max_queue_wait_s=0.0)
    with ThreadedProxy(config) as proxy:
        assert call(proxy, "holder").status_code == 200
        threading.Timer(0.5, close, (proxy, "holder")).start()
        assert call(proxy, "first").status_code == 200  # no estimate yet: it waits, and the queue is served once
        refused = call(proxy, "second")
        assert refused.status_code == 429
        assert int(refused.headers["retry-after"]) >= 1 and refused.headers["x-should-retry"] == "true"
        assert refused.headers["x-tao-queue-position"] == "1" and float(refused.headers["x-tao-estimated-wait"]) > 0
        assert refused.json()["error"]["type"] == "rate_limit_error"
        assert small_coordinator.call(standing(small_coordinator, "second")) is not None
        close(proxy, "first")  # its place goes to "second" while it is away, and is kept for its retry
        assert call(proxy, "second").status_code == 200
        # a real client retries the 429 after Retry-After and comes back to its place
        threading.Timer(0.5, close, (proxy, "second")).start()
        with openai.OpenAI(
            base_url=proxy.url + "/v1", api_key="x", default_headers={"x-tao-session": "third"}, max_retries=5
        ) as client:
            chat(client)


async def standing(coordinator, session_id: str):
    """The session's queue position, read on the coordinator's own loop."""
    service = coordinator.service
    return service.coordinator.queue_position(session_id, service.now())


def test_a_negative_bound_is_refused_naming_the_option():
    run = subprocess.run(
        [sys.executable, "-m", "tao_sdk.cli", "proxy", "--nodes", "http://127.0.0.1:9", "--max-queue-wait-s", "-1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 2 and run.stderr.strip() == "tao proxy: --max-queue-wait-s: a number of seconds, 0 or more"
