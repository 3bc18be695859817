"""A model call a node refuses moves to another node instead of failing
(docs/coordinator.md#every-fault-in-one-table-tao-bench-faults).

Real processes throughout: fake vLLM nodes (one refuses every call with vLLM's 503 while its `/health` answers 200:
`max_num_queued_reqs=0`; or one is stopped, its port closed), a real coordinator on loopback, the real openai and
anthropic clients, `tao proxy`, and for fault 10 a stand-in coordinator that answers acquires out of protocol.
"""

import asyncio
import contextlib
import hashlib
import logging
import subprocess
import sys
import threading
import time

import httpx2
import openai
import pytest
from aiohttp import web

import tao_sdk
from tao_coordinator.fakevllm import FakeNodeConfig, ThreadedFleet
from tao_coordinator.local_coordinator import free_port
from tao_sdk.proxy import ProxyConfig

from .test_proxy import ThreadedApp, ThreadedProxy

MODEL = "Qwen/Qwen3-32B"
FAST = FakeNodeConfig(time_scale=50)
REFUSING = FAST.model_copy(update={"max_num_queued_reqs": 0})


def ask(client, text="hi", **options):
    reply = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": text}], max_tokens=3, **options
    )
    if options.get("stream"):
        return "".join(chunk.choices[0].delta.content or "" for chunk in reply if chunk.choices)
    assert reply.usage.completion_tokens == 3
    return reply.choices[0].message.content


def nodes(coordinator):
    headers = {"Authorization": f"Bearer {coordinator.token}"}
    return {node["name"]: node for node in httpx2.get(coordinator.url + "/v1/nodes", headers=headers).json()["nodes"]}


def metric(coordinator, name, node):
    line = f'{name}{{node="{node}"}} '
    text = httpx2.get(coordinator.url + "/metrics").text
    return float(next(row for row in text.splitlines() if row.startswith(line)).split()[-1])


def ready(coordinator):
    """The coordinator once it has scraped every node healthy: placements do not depend on which answered first."""
    nodes = coordinator.service.coordinator.nodes
    until(lambda: len(nodes) == len(coordinator.config.nodes) and all(node.healthy for node in nodes.values()))
    return coordinator


def demotion(coordinator, node):
    return coordinator.service.coordinator.demotion(node)


def until(check, timeout=5.0):
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "not reached in time"
        time.sleep(0.02)


def serving(fleet, index, serves):
    """Make a fake node refuse every call with vLLM's 503 (its `/health` still 200), or serve again."""
    node = fleet.nodes[index]
    limit = None if serves else 0
    fleet.call(
        lambda: setattr(node.service, "config", node.service.config.model_copy(update={"max_num_queued_reqs": limit}))
    )


@contextlib.contextmanager
def node_process(time_scale):
    """`tao fake-vllm` in a process of its own, to be killed with SIGKILL; yields its URL and the process."""
    port = free_port()
    command = [sys.executable, "-m", "tao_sdk.cli", "fake-vllm", "--port", str(port), "--time-scale", str(time_scale)]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"

    def answers():
        try:
            return httpx2.get(url + "/health", timeout=1).status_code == 200
        except httpx2.HTTPError:
            return False

    try:
        until(answers, timeout=60)
        yield url, process
    finally:
        process.kill()
        process.wait(10)


def coordinator_lines(caplog, text):
    return [r for r in caplog.records if r.name.startswith("tao.") and text in r.getMessage()]


def no_traceback(caplog):
    assert not [r for r in caplog.records if r.name.startswith("tao.") and (r.exc_info or r.levelno >= logging.ERROR)]


@pytest.fixture(scope="module")
def refusing_fleet():
    """node-0 answers every call 503 (its /health 200), node-1 serves."""
    with ThreadedFleet([REFUSING, FAST], kv_events=False) as running:
        yield running


def test_a_node_answering_503_loses_its_calls_to_the_idle_node_and_is_demoted(
    coordinator_factory, refusing_fleet, caplog
):
    """Fault 4: before, 12 of 12 calls failed and node-1 was never used; now every call is served, at most once
    refused, and node-0 is demoted at its third refusal, once."""
    caplog.set_level(logging.INFO)
    coordinator = ready(coordinator_factory(refusing_fleet.urls))
    failures: list[BaseException] = []
    retried: list[int] = []

    def agent(k):
        try:
            with tao_sdk.session(coordinator.url, coordinator.token) as s:
                client = s.openai(max_retries=0)
                for turn in range(3):
                    ask(client, f"session {k} turn {turn}")
                retried.append(s.state.retried_calls)
        except BaseException as error:
            failures.append(error)

    threads = [threading.Thread(target=agent, args=(k,)) for k in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert failures == [] and len(retried) == 8
    assert 1 <= sum(retried) <= 8 and max(retried) == 1  # each session is refused once at most: its place moves
    node = nodes(coordinator)["node-0"]
    assert node["demoted"] and not node["healthy"]
    assert node["demoted_reason"] == "3 calls refused in a row (last: HTTP 503)"
    assert demotion(coordinator, "node-0").demoted_total == 1
    assert metric(coordinator, "tao_node_demotions_total", "node-0") == 1.0
    assert metric(coordinator, "tao_node_demoted", "node-0") == 1.0
    assert metric(coordinator, "tao_node_refused_calls_total", "node-0") == sum(retried)
    assert len(coordinator_lines(caplog, "node node-0 demoted")) == 1
    no_traceback(caplog)


def test_a_demoted_node_is_probed_by_a_model_call_and_restored_only_when_it_serves(coordinator_factory, caplog):
    caplog.set_level(logging.INFO)
    with ThreadedFleet([REFUSING, FAST], kv_events=False) as fleet:
        coordinator = ready(
            coordinator_factory(fleet.urls, core={"node_demote_after": 1, "node_probe_interval_s": 0.1})
        )
        with tao_sdk.session(coordinator.url, coordinator.token) as s:
            ask(s.openai(max_retries=0))
        assert nodes(coordinator)["node-0"]["demoted"]
        time.sleep(0.6)  # several probes, each refused with a 503, while /health answers 200 and scrapes succeed
        assert nodes(coordinator)["node-0"]["demoted"]
        serving(fleet, 0, serves=True)
        until(lambda: not nodes(coordinator)["node-0"]["demoted"])
        assert nodes(coordinator)["node-0"]["healthy"]
        assert metric(coordinator, "tao_node_restorations_total", "node-0") == 1.0
        assert metric(coordinator, "tao_node_demoted", "node-0") == 0.0
        assert len(coordinator_lines(caplog, "node node-0 serves again")) == 1
        assert len(coordinator_lines(caplog, "node node-0 demoted")) == 1
        with tao_sdk.session(coordinator.url, coordinator.token) as s:
            ask(s.openai(max_retries=0))
            assert s.state.retried_calls == 0 and s.state.last.node == "node-0"  # used again
    no_traceback(caplog)


def test_a_killed_node_costs_no_call(coordinator_factory, caplog):
    """Fault 5: before, 6 of 6 calls failed with ConnectError for ~4 s (until the scrapes noticed); now none fails,
    each retried call costs milliseconds, and the node is demoted within 3 refusals."""
    caplog.set_level(logging.INFO)
    with (
        ThreadedFleet(1, FAST, kv_events=False) as doomed,
        ThreadedFleet(1, FAST, kv_events=False) as survivor,
    ):
        urls = doomed.urls + survivor.urls
        coordinator = ready(coordinator_factory(urls, fleet={"scrape_interval_s": 2.0, "scrape_timeout_s": 1.0}))
        sessions = [tao_sdk.session(coordinator.url, coordinator.token).__enter__() for _ in range(8)]
        try:
            clients = [s.openai(max_retries=0) for s in sessions]
            for client in clients:
                ask(client)
            assert {s.state.last.node for s in sessions} == {"node-0", "node-1"}
            doomed.stop()
            failed, slowest = [], 0.0
            for turn in range(3):
                for client in clients:
                    started = time.monotonic()
                    try:
                        ask(client, f"turn {turn}")
                    except openai.APIError as error:
                        failed.append(error)
                    slowest = max(slowest, time.monotonic() - started)
            assert failed == [] and slowest < 1.0  # a retried call costs two round trips on loopback
            assert 0 < sum(s.state.retried_calls for s in sessions) <= 8
        finally:
            for s in sessions:
                s.__exit__(None, None, None)
        node = nodes(coordinator)["node-0"]
        assert node["demoted"] and node["demoted_reason"].startswith("3 calls refused in a row (last: ConnectError")
        assert demotion(coordinator, "node-0").demoted_total == 1
    no_traceback(caplog)


def anthropic_call(client, stream):
    if stream:
        with client.messages.stream(model=MODEL, max_tokens=3, messages=[{"role": "user", "content": "hi"}]) as reply:
            return reply.get_final_text()
    reply = client.messages.create(model=MODEL, max_tokens=3, messages=[{"role": "user", "content": "hi"}])
    return reply.content[0].text


async def async_call(session, kind, stream):
    if kind == "openai":
        client = session.async_openai(max_retries=0)
        reply = await client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=3, stream=stream
        )
        if stream:
            return "".join([chunk.choices[0].delta.content or "" async for chunk in reply if chunk.choices])
        return reply.choices[0].message.content
    client = session.async_anthropic(max_retries=0)
    if stream:
        async with client.messages.stream(
            model=MODEL, max_tokens=3, messages=[{"role": "user", "content": "hi"}]
        ) as reply:
            return await reply.get_final_text()
    reply = await client.messages.create(model=MODEL, max_tokens=3, messages=[{"role": "user", "content": "hi"}])
    return reply.content[0].text


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("kind", ["openai", "anthropic", "async-openai", "async-anthropic", "proxy"])
def test_every_client_retries_a_refused_call_once_on_the_node_the_coordinator_names(
    coordinator_factory, refusing_fleet, kind, stream
):
    coordinator = ready(coordinator_factory(refusing_fleet.urls))
    if kind.startswith("async-"):
        assert asyncio.run(_in_async_session(coordinator, kind.removeprefix("async-"), stream))
        return
    if kind == "proxy":
        with ThreadedProxy(ProxyConfig(coordinator.url, coordinator.token)) as proxy:
            headers = {"x-session-affinity": f"proxied-{stream}"}
            with openai.OpenAI(base_url=proxy.url + "/v1", api_key="x", default_headers=headers, max_retries=0) as c:
                assert ask(c, stream=stream)
            state = proxy.proxy.sessions[f"proxied-{stream}"].router.state
    else:
        with tao_sdk.session(coordinator.url, coordinator.token) as s:
            if kind == "openai":
                assert ask(s.openai(max_retries=0), stream=stream)
            else:
                assert anthropic_call(s.anthropic(max_retries=0), stream)
            state = s.state
    assert state.retried_calls == 1 and state.last.node == "node-1"
    until(lambda: demotion(coordinator, "node-0").refused_total == 1)


async def _in_async_session(coordinator, kind, stream):
    async with tao_sdk.session(coordinator.url, coordinator.token) as s:
        text = await async_call(s, kind, stream)
        assert s.state.retried_calls == 1 and s.state.last.node == "node-1"
    until(lambda: demotion(coordinator, "node-0").refused_total == 1)
    return text


def test_a_call_whose_answer_began_is_never_sent_again(coordinator_factory):
    with node_process(time_scale=1) as (first, one), node_process(time_scale=1) as (second, two):
        coordinator = ready(coordinator_factory([first, second]))
        with tao_sdk.session(coordinator.url, coordinator.token) as s:
            client = s.openai(max_retries=0)
            # a model no node serves is refused by the coordinator (model_not_served): the SDK routes the call on its
            # own, to the node of the session's last call, which answers it 404
            client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "x"}], max_tokens=1)
            with pytest.raises(openai.NotFoundError):  # an answer, not a refusal: not sent elsewhere
                client.chat.completions.create(model="no-such-model", messages=[{"role": "user", "content": "x"}])
            assert s.state.retried_calls == 0
            stream = client.chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=500, stream=True
            )
            chunks = iter(stream)
            next(chunks)  # the answer began
            serving = s.state.last.node
            (one if serving == "node-0" else two).kill()
            with pytest.raises((openai.APIError, httpx2.HTTPError)):
                for _ in chunks:
                    pass
            assert s.state.retried_calls == 0 and s.state.last.node == serving
            s.flush()
        assert demotion(coordinator, serving).refused_total == 0  # reported as failed, not refused


def test_with_no_other_node_the_client_gets_the_refusal_and_the_session_stays_scheduled(coordinator_factory):
    with ThreadedFleet([REFUSING], kv_events=False) as fleet:
        coordinator = ready(coordinator_factory(fleet.urls, core={"node_demote_after": 100}))
        with tao_sdk.session(coordinator.url, coordinator.token) as s:
            with pytest.raises(openai.InternalServerError, match="engine is currently busy"):
                ask(s.openai(max_retries=0))
            assert s.state.retried_calls == 0 and not s.detached
        until(lambda: demotion(coordinator, "node-0").refused_total == 1)


def refuser_first(urls):
    """A session id whose own fail-open node (`Calls.fallback`) is the refusing `urls[0]`."""
    nodes = sorted(urls)
    for k in range(100):
        session_id = f"detached-{k}"
        digest = int.from_bytes(hashlib.sha256(session_id.encode()).digest()[:8], "big")
        if nodes[digest % len(nodes)] == urls[0]:
            return session_id
    raise AssertionError("no such session id")


@pytest.mark.parametrize("coordinator", ["unreachable", "none"])
def test_routing_on_its_own_a_refused_call_goes_to_the_next_fail_open_node(refusing_fleet, coordinator):
    url = f"http://127.0.0.1:{free_port()}" if coordinator == "unreachable" else None
    session_id = refuser_first(refusing_fleet.urls)
    with tao_sdk.session(url, session_id=session_id, fallback_nodes=refusing_fleet.urls) as s:
        client = s.openai(max_retries=0)
        for _ in range(3):
            ask(client)
        assert s.state.retried_calls == 1  # then it sticks to the node that served
        assert s.state.last.node_url == refusing_fleet.urls[1]


class MalformedCoordinator(ThreadedApp):
    """Registers sessions as the protocol says, then answers every acquire with `status` and `body`."""

    def __init__(self, status, body):
        app = web.Application()
        app.router.add_post("/v1/sessions", self.register)
        app.router.add_post("/v1/sessions/{session_id}/acquire", self.acquire)
        app.router.add_post("/v1/sessions/{session_id}/{verb}", self.noted)
        app.router.add_delete("/v1/sessions/{session_id}", self.noted)
        self.status, self.body, self.acquires = status, body, 0
        super().__init__(app)

    async def register(self, request):
        body = await request.json()
        answer = {"session_id": body.get("session_id", "s"), "session_token": "token", "lease_ttl_s": 60}
        return web.json_response(answer, status=201)

    async def acquire(self, request):
        self.acquires += 1
        if isinstance(self.body, str):
            return web.Response(text=self.body, status=self.status, content_type="application/json")
        return web.json_response(self.body, status=self.status)

    async def noted(self, request):
        return web.Response(status=204)


MALFORMED = {
    "no node_url": (200, {"status": "admitted", "node": "node-0", "lease_id": "l"}),
    "no node": (200, {"status": "admitted", "node_url": "http://127.0.0.1:1"}),
    "node_url not a URL": (200, {"status": "admitted", "node": "node-0", "node_url": "node-0:8000"}),
    "200 waiting": (200, {"status": "waiting"}),
    "202 admitted": (202, {"status": "admitted", "node": "node-0", "node_url": "http://127.0.0.1:1"}),
    "a list": (200, ["admitted"]),
    "not JSON": (200, "<html>oops</html>"),
}


@pytest.mark.parametrize("answer", list(MALFORMED), ids=list(MALFORMED))
def test_a_malformed_acquire_answer_fails_open_like_an_unreachable_coordinator(refusing_fleet, answer, caplog):
    """Fault 10: before, an admitted answer without node_url raised AssertionError inside every model call."""
    caplog.set_level(logging.WARNING, logger="tao_sdk")
    serving_node = refusing_fleet.urls[1:]
    with (
        MalformedCoordinator(*MALFORMED[answer]) as stand_in,
        tao_sdk.session(stand_in.url, "api-token", fallback_nodes=serving_node, retry_interval_s=60) as s,
    ):
        client = s.openai(max_retries=0)
        for _ in range(3):
            ask(client)
        assert s.detached and stand_in.acquires == 1  # away: no call waits on it again before retry_interval_s
    warned = [r.getMessage() for r in caplog.records if "coordinator unavailable" in r.getMessage()]
    assert len(warned) == 1 and ("malformed acquire answer" in warned[0] or "JSONDecodeError" in warned[0])


def test_async_and_proxy_fail_open_on_a_malformed_acquire_answer(refusing_fleet):
    serving_node = refusing_fleet.urls[1:]
    with MalformedCoordinator(*MALFORMED["no node_url"]) as stand_in:

        async def run():
            async with tao_sdk.session(stand_in.url, "api-token", fallback_nodes=serving_node) as s:
                client = s.async_openai(max_retries=0)
                reply = await client.chat.completions.create(
                    model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=3
                )
                assert reply.usage.completion_tokens == 3 and s.detached

        asyncio.run(run())
        with (
            ThreadedProxy(ProxyConfig(stand_in.url, "api-token", fallback_nodes=tuple(serving_node))) as proxy,
            openai.OpenAI(base_url=proxy.url + "/v1", api_key="x", max_retries=0) as client,
        ):
            ask(client)


def test_refusal_reports_and_retries_are_checked_by_name(coordinator, fleet):
    headers = {"Authorization": f"Bearer {coordinator.token}"}
    registered = httpx2.post(coordinator.url + "/v1/sessions", json={}, headers=headers).json()
    path = f"{coordinator.url}/v1/sessions/{registered['session_id']}"
    session = {"Authorization": f"Bearer {registered['session_token']}"}
    answer = httpx2.post(path + "/llm_end", json={"node": "node-0", "refused": True}, headers=session)
    assert answer.status_code == 422 and "a refused call must say how it was refused in error" in answer.text
    answer = httpx2.post(path + "/acquire", json={"avoid_nodes": [f"n{k}" for k in range(9)]}, headers=session)
    assert answer.status_code == 422 and answer.json()["field"] == "avoid_nodes"
    sessions = coordinator.service.coordinator.sessions
    before = sessions[registered["session_id"]]
    answer = httpx2.post(path + "/acquire", json={"avoid_nodes": ["node-0", "node-1"]}, headers=session)
    assert answer.status_code == 503 and answer.json()["code"] == "no_other_node"
    assert sessions[registered["session_id"]] == before
    granted = httpx2.post(path + "/acquire", json={"avoid_nodes": ["node-0", "gone"]}, headers=session).json()
    assert granted["node"] == "node-1"
    done = {"node": "node-1", "error": "HTTP 429", "refused": True, "lease_id": granted["lease_id"]}
    assert httpx2.post(path + "/llm_end", json=done, headers=session).status_code == 204
    assert demotion(coordinator, "node-1").refused_total == 1
    again = httpx2.post(path + "/acquire", json={}, headers=session).json()  # a hook process reports through a batch
    done = {"node": again["node"], "error": "ConnectError: refused", "refused": True}
    event = {"kind": "llm_end", "session_id": registered["session_id"], "llm_end": done}
    event["session_token"] = registered["session_token"]
    batch = httpx2.post(coordinator.url + "/v1/events", json={"events": [event]}).json()
    assert batch["results"] == [{"ok": True, "status": 204}]
    assert demotion(coordinator, again["node"]).refused_total >= 1
