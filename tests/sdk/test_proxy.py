"""`tao proxy` with the real openai and anthropic clients, fake vLLM nodes and a real coordinator."""

import asyncio
import threading
import time

import anthropic
import httpx2
import openai
import pytest
from aiohttp import web

from tao_coordinator.core.events import Close, Register, ToolStart
from tao_sdk.proxy import ProxyConfig, RoutingProxy
from tests.conftest import listen_to_feed

MODEL = "Qwen/Qwen3-32B"


class ThreadedApp:
    """An aiohttp app served on a loopback port from its own event loop in a thread, as a context manager."""

    def __init__(self, app: web.Application) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.runner = web.AppRunner(app, access_log=None)

    def __enter__(self):
        self.thread.start()

        async def start():
            await self.runner.setup()
            await web.TCPSite(self.runner, "127.0.0.1", 0).start()

        asyncio.run_coroutine_threadsafe(start(), self.loop).result(10)
        self.url = f"http://127.0.0.1:{self.runner.addresses[0][1]}"
        return self

    def __exit__(self, *exc):
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


class ThreadedProxy(ThreadedApp):
    def __init__(self, config: ProxyConfig) -> None:
        self.proxy = RoutingProxy(config)
        super().__init__(self.proxy.app())


@pytest.fixture
def proxy(coordinator):
    with ThreadedProxy(ProxyConfig(coordinator.url, coordinator.token)) as running:
        yield running


def sessions(coordinator):
    return coordinator.service.coordinator.sessions


def settled(coordinator, session_id, calls):
    """The proxy reports after the response has reached the client: wait for the report to arrive."""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        session = sessions(coordinator).get(session_id)
        if session is not None and session.completed_calls >= calls:
            return session
        time.sleep(0.01)
    raise AssertionError(f"{session_id} did not report {calls} calls")


def test_openai_through_the_proxy_is_routed_and_reported(proxy, coordinator):
    headers = {"x-session-affinity": "ses_opencode_1", "x-agent-harness": "opencode"}
    with openai.OpenAI(base_url=proxy.url + "/v1", api_key="x", default_headers=headers) as client:
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi " * 40}], max_tokens=4)
        stream = client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "hi " * 40 + "more"}], max_tokens=6, stream=True
        )
        assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    session = settled(coordinator, "ses_opencode_1", 2)
    assert session.context.harness == "opencode"
    assert (session.completed_calls, session.output_tokens_total) == (2, 10)
    assert session.last_node == session.node


def test_anthropic_through_the_proxy_reports_cached_tokens(proxy, coordinator):
    headers = {"X-Claude-Code-Session-Id": "cc-session-7"}
    prompt = "a long shared context " * 100
    with anthropic.Anthropic(base_url=proxy.url, api_key="x", default_headers=headers) as client:
        client.messages.create(model=MODEL, max_tokens=4, messages=[{"role": "user", "content": prompt}])
        with client.messages.stream(
            model=MODEL, max_tokens=4, messages=[{"role": "user", "content": prompt + " and more"}]
        ) as stream:
            final = stream.get_final_message()
    assert final.usage.cache_read_input_tokens > 0
    session = settled(coordinator, "cc-session-7", 2)
    assert session.completed_calls == 2
    assert session.evidence[0].tokens == session.context_tokens


def test_completions_stream_and_the_session_and_agent_headers(proxy, coordinator):
    headers = {
        "X-Session-Id": "mine-42",
        "x-tao-session": "loses-to-x-session-id",
        "x-agent-harness": "my-harness",
        "x-agent-workflow-id": "bugfix",
        "x-agent-model": MODEL,
        "x-agent-shared-prefix-tokens": "1200",
        "x-agent-expected-next-tools": "bash, pytest",
        "x-agent-client-session-id": "client-7",
        "x-agent-label-Team": "infra",
    }
    with openai.OpenAI(base_url=proxy.url + "/v1", api_key="x", default_headers=headers) as client:
        stream = client.completions.create(model=MODEL, prompt="complete this " * 30, max_tokens=5, stream=True)
        assert "".join(chunk.choices[0].text for chunk in stream if chunk.choices)
    session = settled(coordinator, "mine-42", 1)
    assert "loses-to-x-session-id" not in sessions(coordinator)
    assert session.output_tokens_total == 5 and session.context_tokens > 5  # the usage chunk the proxy asked for
    context = session.context
    assert (context.harness, context.workflow_id, context.model) == ("my-harness", "bugfix", MODEL)
    assert (context.shared_prefix_tokens, context.expected_next_tools) == (1200, ("bash", "pytest"))
    assert (context.client_session_id, dict(context.labels)) == ("client-7", {"team": "infra"})


def test_a_session_id_the_coordinator_would_refuse_is_replaced_by_a_stable_one(proxy, coordinator):
    headers = {"x-session-affinity": "not a valid id!"}
    with openai.OpenAI(base_url=proxy.url + "/v1", api_key="x", default_headers=headers) as client:
        for turn in range(2):
            messages = [{"role": "user", "content": f"x{turn}"}]
            client.chat.completions.create(model=MODEL, messages=messages, max_tokens=2)
    [named] = [sid for sid in sessions(coordinator) if sid.startswith("tao-proxy-")]
    assert settled(coordinator, named, 2).last_node is not None  # one scheduled session, not a detached one


def test_hook_events_are_relayed_with_the_proxys_session_token(proxy, coordinator):
    fed = []
    listen_to_feed(coordinator.service, lambda event, actions, error: fed.append(event))
    registration = {"context": {"harness": "claude-code", "client_session_id": "cc-hooked", "labels": {"source": "x"}}}
    events = {
        "events": [
            {"kind": "register", "session_id": "cc-hooked", "registration": registration},
            {
                "kind": "tool_start",
                "session_id": "cc-hooked",
                "tool_start": {"call_id": "toolu_1", "tool": "Bash", "hints": {"timeout_s": 120}, "program": "ls"},
            },
        ]
    }
    answer = httpx2.post(proxy.url + "/tao/v1/events", json=events).json()
    assert all(result["ok"] for result in answer["results"])
    assert [(e.call_id, e.program) for e in fed if isinstance(e, ToolStart)] == [("toolu_1", "ls")]
    session = sessions(coordinator)["cc-hooked"]
    assert session.context.harness == "claude-code" and session.tools[0].hints.timeout_s == 120
    assert (session.context.client_session_id, dict(session.context.labels)) == ("cc-hooked", {"source": "x"})
    end = {"events": [{"kind": "tool_end", "session_id": "cc-hooked", "tool_end": {"call_id": "toolu_1"}}]}
    httpx2.post(proxy.url + "/tao/v1/events", json=end)
    assert not sessions(coordinator)["cc-hooked"].tools
    assert httpx2.post(proxy.url + "/tao/v1/events", json={"events": "nope"}).status_code == 422
    bad = {**events["events"][1], "tool_start": {"call_id": "toolu_2", "tool": "Bash", "program": "ls -la"}}
    assert httpx2.post(proxy.url + "/tao/v1/events", json={"events": [bad]}).status_code == 422


def test_a_close_relayed_while_the_session_registers_waits_for_the_registration(proxy, coordinator):
    """A hook's close can reach the proxy while the session's registration is still on its way (a short session, or
    SessionStart's hook racing the first model call). It must wait for the registration: a router not yet
    registered drops a close, and the session would then hold its place until its lease ran out."""
    fed = []

    def registration_answered_late(event, actions, error):
        if getattr(event, "session_id", None) == "cc-short":
            fed.append(event)
        if isinstance(event, Register):
            time.sleep(0.5)  # the coordinator answers the registration half a second late

    listen_to_feed(coordinator.service, registration_answered_late)
    context = {"harness": "claude-code"}
    register = {"events": [{"kind": "register", "session_id": "cc-short", "registration": {"context": context}}]}
    registering = threading.Thread(target=httpx2.post, args=(proxy.url + "/tao/v1/events",), kwargs={"json": register})
    registering.start()
    deadline = time.monotonic() + 5
    while not fed:
        assert time.monotonic() < deadline, "the registration never reached the coordinator"
        time.sleep(0.01)
    close = {"events": [{"kind": "close", "session_id": "cc-short"}]}
    answer = httpx2.post(proxy.url + "/tao/v1/events", json=close, timeout=10).json()
    registering.join(10)
    assert answer["results"] == [{"ok": True, "status": 204}]
    assert [type(event) for event in fed] == [Register, Close]
    assert "cc-short" not in sessions(coordinator)


def test_a_hook_report_after_the_close_does_not_open_the_session_again(proxy, coordinator):
    """Claude Code's tool ends come from a hook it runs in the background, which can report after the session's
    close: that report is dropped, where it used to register the session again (given a place nobody would use
    until its lease ran out). A registration, as of a resumed session, opens it again."""

    def relay(*events):
        answer = httpx2.post(proxy.url + "/tao/v1/events", json={"events": list(events)})
        assert answer.json()["results"] == [{"ok": True, "status": 204}] * len(events)

    register = {"kind": "register", "session_id": "cc-done", "registration": {"context": {"harness": "claude-code"}}}
    start = {"kind": "tool_start", "session_id": "cc-done", "tool_start": {"call_id": "toolu_1", "tool": "Bash"}}
    relay(register, start)
    assert sessions(coordinator)["cc-done"].tools
    relay({"kind": "close", "session_id": "cc-done"})
    relay({"kind": "tool_end", "session_id": "cc-done", "tool_end": {"call_id": "toolu_1"}})
    assert "cc-done" not in sessions(coordinator) and "cc-done" not in proxy.proxy.sessions
    relay({"kind": "close", "session_id": "cc-done"})  # twice: nothing to do
    relay(register)
    assert "cc-done" in sessions(coordinator)


@pytest.mark.parametrize("path", ["/healthz", "/health"])
def test_the_proxy_answers_health_probes_on_both_paths(proxy, coordinator, path):
    with openai.OpenAI(base_url=proxy.url + "/v1", api_key="x", default_headers={"x-session-affinity": "ses_h"}) as c:
        c.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "x"}], max_tokens=1)
    reply = httpx2.get(proxy.url + path)
    assert (reply.status_code, reply.json()) == (200, {"status": "ok", "sessions": 1})


def test_without_a_coordinator_the_proxy_routes_on_its_own(fleet):
    config = ProxyConfig("http://127.0.0.1:9", fallback_nodes=tuple(fleet.urls))
    with (
        ThreadedProxy(config) as proxy,
        openai.OpenAI(base_url=proxy.url + "/v1", api_key="x", max_retries=0) as client,
    ):
        reply = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "x"}], max_tokens=2)
        assert reply.usage.completion_tokens == 2
        assert [m.id for m in client.models.list().data] == [MODEL]


def test_without_nodes_the_proxy_learns_them_from_the_coordinator_and_fails_open_to_them(fleet, coordinator):
    with (
        ThreadedProxy(ProxyConfig(coordinator.url, coordinator.token)) as proxy,
        openai.OpenAI(base_url=proxy.url + "/v1", api_key="x", max_retries=0) as client,
    ):
        deadline = time.monotonic() + 10
        while proxy.proxy.learned_nodes != tuple(sorted(fleet.urls)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert proxy.proxy.learned_nodes == tuple(sorted(fleet.urls))
        coordinator.stop()
        # a new session, so it has no last node to fall back on: only the learned list can route it
        headers = {"x-session-affinity": "ses_after_the_coordinator_left"}
        reply = client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "x"}], max_tokens=2, extra_headers=headers
        )
        assert reply.usage.completion_tokens == 2


def test_with_no_coordinator_and_no_node_a_call_is_answered_503():
    with (
        ThreadedProxy(ProxyConfig("http://127.0.0.1:9")) as proxy,
        openai.OpenAI(base_url=proxy.url + "/v1", api_key="x", max_retries=0) as client,
        pytest.raises(openai.InternalServerError, match="no fallback node") as refused,
    ):
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "x"}], max_tokens=2)
    assert refused.value.status_code == 503
