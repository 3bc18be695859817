"""The SDK with the real openai and anthropic packages, against fake vLLM nodes and a real coordinator."""

import asyncio
import logging
import socket
import time

import httpx2
import pytest
from prometheus_client.parser import text_string_to_metric_families

import tao_sdk
from tao_coordinator.core.actions import Route
from tao_coordinator.core.events import LlmEnd, ToolStart
from tao_coordinator.core.model import Phase
from tests.conftest import listen_to_feed

MODEL = "Qwen/Qwen3-32B"


def core_session(coordinator, session_id):
    return coordinator.service.coordinator.sessions.get(session_id)


def seen(coordinator, s):
    """The coordinator's view of session `s`, once the reports it sent in the background have arrived."""
    s.flush()
    return core_session(coordinator, s.id)


def node_requests(fleet):
    """Finished requests per node, read from each node's own /metrics as a scraper would."""
    counts = []
    for url in fleet.urls:
        text = httpx2.get(url + "/metrics").text
        samples = (s for f in text_string_to_metric_families(text) for s in f.samples)
        counts.append(sum(s.value for s in samples if s.name == "vllm:request_success_total"))
    return counts


def open_session(coordinator, **kwargs):
    return tao_sdk.session(coordinator.url, coordinator.token, tao_sdk.AgentContext(harness="test"), **kwargs)


def recorded(coordinator):
    """(event, actions) for every event the coordinator's core is fed from now on (its `feed`, wrapped to listen)."""
    items = []
    listen_to_feed(coordinator.service, lambda event, actions, error: error or items.append((event, actions)))
    return items


def ask(client, text, max_tokens=3):
    messages = [{"role": "user", "content": text}]
    return client.chat.completions.create(model=MODEL, messages=messages, max_tokens=max_tokens)


def test_openai_calls_go_to_the_assigned_node_and_report_usage(coordinator, fleet):
    before = node_requests(fleet)
    with open_session(coordinator) as s:
        client = s.openai()
        for turn in range(3):
            reply = client.chat.completions.create(
                model=MODEL,
                messages=[{"role": "user", "content": "tell me about caching " * (20 + turn)}],
                max_tokens=16,
            )
            assert reply.choices[0].message.content
        session = seen(coordinator, s)
        assert session.phase is Phase.ADMITTED and session.completed_calls == 3
        assert session.context_tokens == reply.usage.prompt_tokens + reply.usage.completion_tokens
        assigned = int(session.node[-1])
        after = node_requests(fleet)
        assert after[assigned] - before[assigned] == 3
        assert sum(after) - sum(before) == 3
    assert seen(coordinator, s) is None  # closed on exit


def test_streaming_calls_report_usage(coordinator):
    with open_session(coordinator) as s:
        client = s.openai()
        stream = client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "stream please " * 40}], max_tokens=24, stream=True
        )
        text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
        assert text
        session = seen(coordinator, s)
        assert session.completed_calls == 1 and session.output_tokens_total == 24
        assert session.context_tokens > 24


def test_llm_end_carries_prompt_cached_and_completion_tokens_and_ttft(coordinator):
    items = recorded(coordinator)
    prompt = "a shared prefix that the node keeps cached " * 40
    with open_session(coordinator) as s:
        openai_client, anthropic_client = s.openai(), s.anthropic()
        plain = ask(openai_client, prompt, max_tokens=4)
        stream = openai_client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": prompt + "and on"}], max_tokens=5, stream=True
        )
        assert "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
        with anthropic_client.messages.stream(
            model=MODEL, max_tokens=6, messages=[{"role": "user", "content": prompt + "and more"}]
        ) as anthropic_stream:
            final = anthropic_stream.get_final_message()
        s.flush()
        assigned = None
        ends = []
        for event, actions in items:
            assigned = next((a.node for a in actions if isinstance(a, Route) and a.session_id == s.id), assigned)
            if isinstance(event, LlmEnd) and event.session_id == s.id:
                assert event.node_id == assigned  # every call ran where the coordinator had put the session
                ends.append(event)
    first, second, third = ends
    assert (first.prompt_tokens, first.completion_tokens, first.ttft_s) == (plain.usage.prompt_tokens, 4, None)
    assert second.completion_tokens == 5 and second.prompt_tokens > 0
    assert third.completion_tokens == final.usage.output_tokens == 6
    for streamed in (second, third):
        assert 0 < streamed.cached_tokens < streamed.prompt_tokens  # the prefix the first call left on the node
        assert 0 < streamed.ttft_s <= streamed.duration_s
    assert third.cached_tokens == final.usage.cache_read_input_tokens


def test_anthropic_calls_streaming_and_not(coordinator):
    with open_session(coordinator) as s:
        client = s.anthropic()
        message = client.messages.create(
            model=MODEL, max_tokens=12, messages=[{"role": "user", "content": "hello there " * 30}]
        )
        assert message.usage.output_tokens == 12
        with client.messages.stream(
            model=MODEL, max_tokens=10, messages=[{"role": "user", "content": "hello there " * 30 + "again"}]
        ) as stream:
            assert "".join(stream.text_stream)
        session = seen(coordinator, s)
        assert session.completed_calls == 2 and session.output_tokens_total == 22
        usage = [e for e in session.evidence]
        assert usage and usage[0].tokens == session.context_tokens


def test_tool_hints_arrive(coordinator):
    items = recorded(coordinator)
    with open_session(coordinator) as s:
        with s.tool("bash", command="cd repo && sleep 3 && timeout 60 make test", timeout=90):
            tool = seen(coordinator, s).tools[0]
            hints = tool.hints
            assert (tool.tool, hints.sleep_s, hints.timeout_s, hints.background) == ("bash", 3, 60, False)

        @s.tool("grep")
        def search():
            return seen(coordinator, s).tools[0].tool

        assert search() == "grep"
        call = s.tool_start("server", command="python -m http.server &")
        assert seen(coordinator, s).tools[0].hints.background is True
        s.tool_end(call)
        assert seen(coordinator, s).phase is Phase.READY
        starts = [(e.tool, e.program) for e, _ in items if isinstance(e, ToolStart)]
        assert starts == [("bash", "sleep"), ("grep", None), ("server", "python")]  # `cd` runs nothing; no command
        learned = coordinator.service.history.shared("*")
        assert learned is not None and len(learned) == 3


def test_async_clients(coordinator):
    async def agent():
        async with open_session(coordinator) as s:
            client = s.async_openai()
            reply = await client.chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": "async " * 30}], max_tokens=5
            )
            async with s.tool("bash", command="sleep 1"):
                await s.aflush()
                assert core_session(coordinator, s.id).tools[0].hints.sleep_s == 1
            async with s.tool("bash", command="cd x && pytest -q"):
                await s.aflush()
            anthropic = s.async_anthropic()
            message = await anthropic.messages.create(
                model=MODEL, max_tokens=5, messages=[{"role": "user", "content": "async " * 30}]
            )
            return s.id, reply, message

    items = recorded(coordinator)
    session_id, reply, message = asyncio.run(agent())
    assert reply.usage.completion_tokens == 5 and message.usage.output_tokens == 5
    assert [e.program for e, _ in items if isinstance(e, ToolStart)] == ["sleep", "pytest"]
    assert core_session(coordinator, session_id) is None


def test_wrapping_a_client_you_built(coordinator, fleet):
    import openai

    with openai.OpenAI(base_url=fleet.urls[0] + "/v1", api_key="x") as mine, open_session(coordinator) as s:
        routed = s.wrap(mine)
        routed.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "wrap " * 20}], max_tokens=3)
        assert seen(coordinator, s).completed_calls == 1


def test_with_the_coordinator_gone_every_call_still_completes_and_the_log_says_so_once(coordinator, fleet, caplog):
    caplog.set_level(logging.WARNING, logger="tao_sdk")
    with open_session(coordinator, fallback_nodes=fleet.urls, request_timeout_s=0.5, retry_interval_s=60) as s:
        client = s.openai(max_retries=0)
        prompt = "keep going " * 20
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": prompt}], max_tokens=3)
        coordinator.stop()
        started = time.monotonic()
        for turn in range(5):
            with s.tool("bash", command="true"):
                pass
            reply = client.chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": prompt + str(turn)}], max_tokens=3
            )
            assert reply.choices[0].message.content
        assert time.monotonic() - started < 10
        assert s.detached
    warnings = [r for r in caplog.records if "coordinator unavailable" in r.getMessage()]
    assert len(warnings) == 1


def test_a_session_is_closed_when_an_exception_leaves_the_block(coordinator):
    with pytest.raises(RuntimeError, match="agent crashed"), open_session(coordinator) as s:
        assert seen(coordinator, s) is not None
        raise RuntimeError("agent crashed")
    assert seen(coordinator, s) is None


def test_the_heartbeat_renews_the_lease_of_an_idle_session(coordinator_factory, fleet):
    coordinator = coordinator_factory(fleet.urls, core={"lease_ttl_s": 2.5})
    abandoned = tao_sdk.session(coordinator.url, coordinator.token).sync_router()
    abandoned.register()  # registered, then never heard from again
    abandoned.http.close()
    with open_session(coordinator) as s:
        time.sleep(6)  # more than two leases without a model call or a tool
        assert seen(coordinator, s) is not None
        assert core_session(coordinator, abandoned.state.session_id) is None


def test_a_detached_session_retries_in_the_background_and_is_scheduled_again(coordinator_factory, fleet, caplog):
    caplog.set_level(logging.INFO, logger="tao_sdk")
    first = coordinator_factory(fleet.urls, core={"lease_ttl_s": 6})
    with open_session(first, fallback_nodes=fleet.urls, retry_interval_s=0.2) as s:
        client = s.openai(max_retries=0)
        ask(client, "before")
        first.stop()
        for turn in range(3):
            ask(client, f"while it is away {turn}")
            time.sleep(0.25)
        assert s.detached
        second = coordinator_factory(fleet.urls, port=int(first.url.rsplit(":", 1)[1]), core={"lease_ttl_s": 6})
        deadline = time.monotonic() + 10
        # no call is made: the heartbeat's retry registers it again (the SDK reattaches once it reads the answer)
        while core_session(second, s.id) is None or s.detached:
            assert time.monotonic() < deadline, "the session never registered with the new coordinator"
            time.sleep(0.05)
        ask(client, "after")
        assert seen(second, s).completed_calls == 1
    assert seen(second, s) is None
    messages = [r.getMessage() for r in caplog.records]
    assert sum("coordinator unavailable" in m for m in messages) == 1
    assert sum("reachable again" in m for m in messages) == 1


def test_no_call_waits_for_a_coordinator_that_accepts_connections_but_never_answers(fleet):
    with socket.socket() as hung:  # listens (connections complete in the backlog) and never reads a byte
        hung.bind(("127.0.0.1", 0))
        hung.listen(64)
        url = f"http://127.0.0.1:{hung.getsockname()[1]}"
        with tao_sdk.session(url, "t", fallback_nodes=fleet.urls, request_timeout_s=0.5, retry_interval_s=0.1) as s:
            assert s.detached  # registering gave up after request_timeout_s
            client = s.openai(max_retries=0)
            for turn in range(5):
                time.sleep(0.15)  # a retry is due before every call
                started = time.monotonic()
                assert ask(client, f"hung {turn}").usage.completion_tokens == 3
                assert time.monotonic() - started < 0.4  # the retry runs beside the call, not before it


def test_without_any_coordinator_the_fallback_nodes_serve(fleet):
    with tao_sdk.session(None, fallback_nodes=fleet.urls) as s:
        reply = s.openai().chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "alone"}], max_tokens=2
        )
        assert reply.usage.completion_tokens == 2


def test_bad_configuration_is_named():
    with pytest.raises(tao_sdk.ConfigurationError, match="coordinator"):
        tao_sdk.session("localhost:8700")
    with pytest.raises(tao_sdk.ConfigurationError, match=r"^bogus: not an option"):
        tao_sdk.session("http://x", bogus=1)
    with tao_sdk.session(None) as s, pytest.raises(tao_sdk.NoNodeAvailable):
        s.openai(max_retries=0).chat.completions.create(model=MODEL, messages=[], max_tokens=1)
