"""The SDK against a coordinator that stalls (a real `tao coordinator` process, SIGSTOP then SIGCONT): no model call
waits past the SDK's timeouts, and afterwards the session's state converges with the coordinator's."""

import threading
import time

import httpx2
import pytest

import tao_sdk
from tao_coordinator.fakevllm import FakeNodeConfig, ThreadedFleet
from tao_coordinator.local_coordinator import coordinator_process

MODEL = "Qwen/Qwen3-32B"
TOKEN = "convergence-test-token-0123456789"
REQUEST_TIMEOUT_S = 1.0
CONNECT_TIMEOUT_S = 0.5


@pytest.fixture(scope="module")
def fleet():
    with ThreadedFleet(1, FakeNodeConfig(time_scale=50), kv_events=False) as running:
        yield running


@pytest.fixture
def stoppable(fleet, tmp_path):
    with coordinator_process([f"node-0={fleet.urls[0]}"], tmp_path, token=TOKEN) as running:
        yield running
        running.resume()


def open_session(coordinator, fleet, **options):
    options = {"request_timeout_s": REQUEST_TIMEOUT_S, "retry_interval_s": 0.3, **options}
    return tao_sdk.session(coordinator.url, TOKEN, fallback_nodes=fleet.urls, **options)


def ask(client, text):
    return client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": text}], max_tokens=2)


def phase(coordinator, session_id):
    """The session's phase as the coordinator shows it (`GET /v1/sessions`)."""
    answer = httpx2.get(coordinator.url + "/v1/sessions", headers={"Authorization": f"Bearer {TOKEN}"}).json()
    return next(s["phase"] for s in answer["sessions"] if s["session_id"] == session_id)


def scheduled(s, client, text):
    """Make one model call; True when the coordinator placed it (the session's grant changed), not the SDK alone."""
    before = s.state.last
    ask(client, text)
    return s.state.last is not before


def until_scheduled(s, client, within_s):
    deadline = time.monotonic() + within_s
    turn = 0
    while not scheduled(s, client, f"after {turn}"):
        assert time.monotonic() < deadline, "the session was not scheduled again"
        with s.tool("bash", command="true"):
            pass
        time.sleep(0.1)
        turn += 1


@pytest.mark.parametrize("lost", ["tool_end", "llm_end"])
def test_after_a_stall_the_session_converges_and_is_scheduled_again(stoppable, fleet, lost):
    """`tool_end`: the stall hits a tool_start, which times out and is applied on resume; its tool_end was dropped
    while detached (before: every later acquire got 409 and ran unscheduled). `llm_end`: the stall hits an acquire,
    which the coordinator grants on resume after the SDK routed the call on its own (before: every tool_start got
    409, so the coordinator never saw another tool)."""
    with open_session(stoppable, fleet) as s:
        client = s.openai(max_retries=0)
        assert scheduled(s, client, "before")
        s.flush()  # so that the stall hits the request below, not the report of that call
        stoppable.pause()
        resume = threading.Timer(2.0, stoppable.resume)
        resume.start()
        if lost == "tool_end":
            with s.tool("bash", command="true"):
                s.flush()  # the tool_start times out
        else:
            ask(client, "during")  # the acquire times out; the call goes to the last node
        assert s.detached
        resume.join()
        until_scheduled(s, client, within_s=5)
        for turn in range(3):
            with s.tool("bash", command="true"):
                s.flush()
                assert phase(stoppable, s.id) == "in_tool"
            s.flush()
            assert phase(stoppable, s.id) == "ready"
            assert scheduled(s, client, f"converged {turn}")


def test_no_model_call_waits_through_a_stall(stoppable, fleet):
    with open_session(stoppable, fleet) as s:
        client = s.openai(max_retries=0)
        assert scheduled(s, client, "before")
        s.flush()
        stoppable.pause()
        resume = threading.Timer(4.0, stoppable.resume)
        resume.start()
        try:
            started = time.monotonic()
            ask(client, "during the stall")
            waited = time.monotonic() - started
        finally:
            resume.cancel()
            stoppable.resume()
        assert waited <= CONNECT_TIMEOUT_S + REQUEST_TIMEOUT_S + 0.5  # before: until the resume, 4 s
        assert s.detached


def test_a_call_waiting_for_a_place_is_routed_on_its_own_when_the_coordinator_stalls(fleet, tmp_path):
    """The stall hits an acquire that is long-polling for a place (before: it waited until the resume)."""
    with (
        coordinator_process([f"node-0={fleet.urls[0]},4096"], tmp_path, token=TOKEN) as stoppable,
        open_session(stoppable, fleet) as holder,
        open_session(stoppable, fleet) as waiter,
    ):
        holder.sync_router().acquire(3500)  # a model call that holds the node's only place, never ending
        done = threading.Event()

        def wait_for_a_place() -> None:
            ask(waiter.openai(max_retries=0), "y" * 14_000)
            done.set()

        caller = threading.Thread(target=wait_for_a_place, daemon=True)
        caller.start()
        assert not done.wait(1.5), "the second session was admitted at once: the test needs it to wait"
        stoppable.pause()
        stalled = time.monotonic()
        try:
            returned = done.wait(4.0)
        finally:
            stoppable.resume()
        assert returned and time.monotonic() - stalled <= CONNECT_TIMEOUT_S + REQUEST_TIMEOUT_S + 0.5
        assert waiter.detached
        caller.join(5)


def test_after_a_restart_between_two_calls_the_next_call_is_scheduled(coordinator_factory, fleet):
    """The SDK never saw the coordinator away: its next acquire is refused (the new process does not know the session
    or its token), and the session registers again at once instead of routing every later call on its own."""
    first = coordinator_factory(fleet.urls)
    with tao_sdk.session(first.url, first.token, fallback_nodes=fleet.urls) as s:
        client = s.openai(max_retries=0)
        assert scheduled(s, client, "before")
        s.flush()
        first.stop()
        second = coordinator_factory(fleet.urls, port=int(first.url.rsplit(":", 1)[1]))
        for turn in range(3):
            assert scheduled(s, client, f"after {turn}")
        assert not s.detached
        s.flush()
        assert second.service.coordinator.sessions[s.id].completed_calls == 3
