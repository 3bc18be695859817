"""A fleet serving two models, end to end: four fake vLLM nodes (two serve a large model, two a small one, each
answering 404 for any other name), a real coordinator that learns what each serves from its `/v1/models`, and
sessions whose main calls use the large model and whose side calls (Claude Code's small fast model) use the small
one — through the SDK and through `tao proxy` with the Anthropic client. No call is answered 404, side calls run on
the small-model nodes, and each session's place stays on a large-model node."""

import time

import anthropic
import httpx2
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

import tao_sdk
from tao_coordinator.core.actions import Route
from tao_coordinator.core.events import Acquire
from tao_coordinator.fakevllm import FakeNodeConfig, ThreadedFleet
from tao_sdk.proxy import ProxyConfig
from tests.conftest import listen_to_feed
from tests.sdk.test_proxy import ThreadedProxy

LARGE, SMALL = "org/large-32b", "org/small-4b"
LARGE_NODES, SMALL_NODES = {"node-0", "node-1"}, {"node-2", "node-3"}


@pytest.fixture(scope="module")
def fleet():
    configs = [FakeNodeConfig(time_scale=50, served_model_name=model) for model in (LARGE, LARGE, SMALL, SMALL)]
    with ThreadedFleet(configs, kv_events=False) as running:
        yield running


@pytest.fixture
def coordinator(coordinator_factory, fleet):
    started = coordinator_factory(fleet.urls)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        nodes = started.service.coordinator.nodes
        if len(nodes) == 4 and all(node.models is not None for node in nodes.values()):
            break
        time.sleep(0.02)
    nodes = started.service.coordinator.nodes
    assert {name: node.models for name, node in nodes.items()} == {
        **dict.fromkeys(LARGE_NODES, frozenset({LARGE})),
        **dict.fromkeys(SMALL_NODES, frozenset({SMALL})),
    }
    return started


def node_requests(fleet) -> list[float]:
    """Finished requests per node, from each node's own /metrics."""
    counts = []
    for url in fleet.urls:
        text = httpx2.get(url + "/metrics").text
        samples = (s for f in text_string_to_metric_families(text) for s in f.samples)
        counts.append(sum(s.value for s in samples if s.name == "vllm:request_success_total"))
    return counts


def routes(coordinator) -> list[tuple[Acquire, Route]]:
    """(acquire, route) for every acquire the core answers from now on."""
    seen: list[tuple[Acquire, Route]] = []

    def listen(event, actions, error):
        if error is None and isinstance(event, Acquire):
            seen.extend((event, action) for action in actions or () if isinstance(action, Route))

    listen_to_feed(coordinator.service, listen)
    return seen


def test_sdk_sessions_main_calls_on_the_large_model_and_side_calls_on_the_small_one(coordinator, fleet):
    before = node_requests(fleet)
    answered = routes(coordinator)
    sessions = [
        tao_sdk.session(coordinator.url, coordinator.token, tao_sdk.AgentContext(harness="test", model=LARGE))
        for _ in range(4)
    ]
    rounds = 3
    for s in sessions:
        s.__enter__()
    try:
        for turn in range(rounds):
            for s in sessions:
                client = s.openai()
                messages = [{"role": "user", "content": f"fix the bug, step {turn} " * 30}]
                assert client.chat.completions.create(model=LARGE, messages=messages, max_tokens=4).choices
                title = [{"role": "user", "content": f"a title for step {turn}"}]
                assert client.chat.completions.create(model=SMALL, messages=title, max_tokens=2).choices
                s.flush()
                place = coordinator.service.coordinator.sessions[s.id].node
                assert place in LARGE_NODES, "the session's place stays on a large-model node"
    finally:
        for s in sessions:
            s.__exit__(None, None, None)
    after = node_requests(fleet)
    done = [a - b for a, b in zip(after, before, strict=True)]
    assert sum(done[:2]) == sum(done[2:]) == rounds * len(sessions), done  # every call answered, none 404
    side = [route for acquire, route in answered if acquire.model == SMALL]
    assert len(side) == rounds * len(sessions) and all(r.side and r.node in SMALL_NODES for r in side)
    main = [route for acquire, route in answered if acquire.model == LARGE]
    assert main and all(not r.side and r.node in LARGE_NODES for r in main)


def test_a_model_no_node_serves_is_refused_and_the_sdk_fails_open(coordinator, fleet):
    with tao_sdk.session(coordinator.url, coordinator.token, tao_sdk.AgentContext(model=LARGE)) as s:
        client = s.openai()
        client.chat.completions.create(model=LARGE, messages=[{"role": "user", "content": "hi"}], max_tokens=2)
        s.flush()
        with pytest.raises(openai.NotFoundError):  # routed on its own to its node, which answers 404 as vLLM does
            client.chat.completions.create(model="org/nobody", messages=[{"role": "user", "content": "x"}])
        assert coordinator.service.coordinator.sessions[s.id].node in LARGE_NODES


def test_claude_code_through_the_proxy_sends_its_small_fast_model_calls_to_small_model_nodes(coordinator, fleet):
    before = node_requests(fleet)
    answered = routes(coordinator)
    with ThreadedProxy(ProxyConfig(coordinator.url, coordinator.token)) as proxy:
        headers = {"X-Claude-Code-Session-Id": "cc-two-models", "x-agent-model": LARGE}
        with anthropic.Anthropic(base_url=proxy.url, api_key="x", default_headers=headers) as client:
            for turn in range(3):
                # Claude Code asks its small fast model first (a topic, a title), then the main one
                side = [{"role": "user", "content": f"is this a new topic? {turn}"}]
                assert client.messages.create(model=SMALL, max_tokens=2, messages=side).content
                main = [{"role": "user", "content": "a long shared context " * 50 + str(turn)}]
                with client.messages.stream(model=LARGE, max_tokens=4, messages=main) as stream:
                    assert stream.get_final_message().content
                deadline = time.monotonic() + 5
                while coordinator.service.coordinator.sessions["cc-two-models"].completed_calls < turn + 1:
                    assert time.monotonic() < deadline
                    time.sleep(0.01)
                assert coordinator.service.coordinator.sessions["cc-two-models"].node in LARGE_NODES
    done = [a - b for a, b in zip(node_requests(fleet), before, strict=True)]
    assert sum(done[:2]) == sum(done[2:]) == 3, done
    assert all(route.node in (SMALL_NODES if acquire.model == SMALL else LARGE_NODES) for acquire, route in answered)
    assert sum(1 for acquire, _ in answered if acquire.model == SMALL) == 3


def test_without_a_node_to_fall_back_to_a_model_no_node_serves_is_an_error_naming_it(coordinator):
    with tao_sdk.session(coordinator.url, coordinator.token, tao_sdk.AgentContext(model=LARGE)) as s:
        client = s.openai(max_retries=0)
        with pytest.raises(tao_sdk.NoNodeAvailable, match="no healthy node serves the model 'org/nobody'"):
            client.chat.completions.create(model="org/nobody", messages=[{"role": "user", "content": "x"}])
