"""The SDK with the real openai and anthropic packages, against fake vLLM nodes and a real coordinator."""

import asyncio
import logging
import time

import httpx2
import pytest
from prometheus_client.parser import text_string_to_metric_families

import tao_sdk
from tao_coordinator.core.model import Phase

MODEL = "Qwen/Qwen3-32B"


def core_session(coordinator, session_id):
    return coordinator.service.coordinator.state.sessions.get(session_id)


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


def test_streaming_calls_report_usage_and_time_to_first_token(coordinator):
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
        assert len(coordinator.service.coordinator.history.all_samples()) == 3


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
            anthropic = s.async_anthropic()
            message = await anthropic.messages.create(
                model=MODEL, max_tokens=5, messages=[{"role": "user", "content": "async " * 30}]
            )
            return s.id, reply, message

    session_id, reply, message = asyncio.run(agent())
    assert reply.usage.completion_tokens == 5 and message.usage.output_tokens == 5
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


def test_without_any_coordinator_the_fallback_nodes_serve(fleet):
    with tao_sdk.session(None, fallback_nodes=fleet.urls) as s:
        reply = s.openai().chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "alone"}], max_tokens=2
        )
        assert reply.usage.completion_tokens == 2


def test_bad_configuration_is_named():
    with pytest.raises(tao_sdk.ConfigurationError, match="coordinator"):
        tao_sdk.session("localhost:8700")
    with pytest.raises(tao_sdk.ConfigurationError, match="unexpected keyword"):
        tao_sdk.session("http://x", bogus=1)
    with tao_sdk.session(None) as s, pytest.raises(tao_sdk.NoNodeAvailable):
        s.openai(max_retries=0).chat.completions.create(model=MODEL, messages=[], max_tokens=1)
