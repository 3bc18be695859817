"""Following the leader among several coordinator URLs (docs/coordinator.md#several-coordinators-on-one-fleet-redis):
real coordinators on loopback, fake vLLM nodes.

Two coordinators started here do not share their sessions (that needs Redis and the standby, the server side of
docs/coordinator.md#several-coordinators-on-one-fleet-redis), so a session that moves to the second registers there
again: its acquire is answered 404 and registers, as after a restart. Where a test needs the same coordinator behind a
second address that can go away, a TCP relay on loopback (`Relay`) is that address.
"""

import asyncio
import contextlib
import logging
import socket
import threading
import time

import httpx2
import openai
import pytest
from aiohttp import web

import tao_sdk
from tao_coordinator.core.events import LlmEnd, Register, ToolEnd, ToolStart
from tao_integrations.relay import post_events
from tao_sdk.proxy import ProxyConfig, RoutingProxy
from tao_sdk.replicas import FAILOVER_PAUSE_S, NotLeader, Replicas, coordinator_urls, not_leader
from tests.conftest import listen_to_feed

MODEL = "Qwen/Qwen3-32B"
WRITES = (Register, LlmEnd, ToolStart, ToolEnd)


def dead_url() -> str:
    """A loopback URL nothing listens on (connections are refused at once)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{probe.getsockname()[1]}"


def writes(coordinator):
    """What the coordinator's core is fed from now on, as (kind, detail) per session id: the order it saw."""
    seen: dict[str, list[tuple[str, str]]] = {}

    def listen(event, actions, error):
        if isinstance(event, WRITES) and error is None:
            detail = getattr(event, "call_id", "") or getattr(event, "node_id", "")
            seen.setdefault(event.session_id, []).append((type(event).__name__, detail))

    listen_to_feed(coordinator.service, listen)
    return seen


def ask(client, text):
    reply = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": text}], max_tokens=3)
    assert reply.usage.completion_tokens == 3
    return reply


def unavailable(caplog):
    return [r.getMessage() for r in caplog.records if "coordinator unavailable" in r.getMessage()]


class Relay:
    """A TCP relay from a loopback port of its own to `port`: a second address of one coordinator. `close()` makes
    the address refuse connections and cuts the ones open, as a replica that died would."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.sockets: list[socket.socket] = []
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.port))
            with self.lock:
                self.sockets += [client, upstream]
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(source, sink), daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                sink.sendall(data)
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)
        self.listener.close()
        self.thread.join(5)
        with self.lock:
            for sock in self.sockets:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()


class ServedProxy:
    """`tao proxy` on a loopback port, from an event loop of its own thread."""

    def __init__(self, config: ProxyConfig) -> None:
        self.proxy = RoutingProxy(config)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.runner = web.AppRunner(self.proxy.app(), access_log=None)

    def __enter__(self) -> "ServedProxy":
        self.thread.start()

        async def start() -> None:
            await self.runner.setup()
            await web.TCPSite(self.runner, "127.0.0.1", 0).start()

        asyncio.run_coroutine_threadsafe(start(), self.loop).result(10)
        self.url = f"http://127.0.0.1:{self.runner.addresses[0][1]}"
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


@pytest.fixture
def relay(coordinator):
    opened = Relay(int(coordinator.url.rsplit(":", 1)[1]))
    yield opened
    opened.close()


# -- the pieces, as values -----------------------------------------------------------------------------------------


def test_several_urls_are_read_from_a_string_or_a_sequence():
    assert coordinator_urls("http://a:1/, http://b:2,,http://a:1") == ("http://a:1", "http://b:2")
    assert coordinator_urls(["http://a:1", "https://b:2/"]) == ("http://a:1", "https://b:2")
    assert coordinator_urls(None) == ()
    with pytest.raises(tao_sdk.ConfigurationError, match="'b:2'"):
        coordinator_urls("http://a:1,b:2")
    with pytest.raises(tao_sdk.ConfigurationError, match="coordinator"):
        tao_sdk.session(["http://a:1", "localhost:8700"])


def answer(status, body=None, headers=None):
    request = httpx2.Request("POST", "http://standby:8700/v1/sessions")
    return httpx2.Response(status, json=body, headers=headers, request=request)


@pytest.mark.parametrize(
    ("response", "refusal"),
    [
        (answer(421, {"error": {"type": "not_leader", "message": "m", "leader": "http://l:1/"}}), NotLeader(421, "http://l:1")),
        (answer(421, {"error": {"type": "not_leader", "leader": None}}, {"X-TAO-Leader": "http://h:2"}), NotLeader(421, "http://h:2")),
        (answer(421, {"error": {"type": "not_leader", "leader": None}}), NotLeader(421, None)),
        (answer(421, {"error": {"type": "not_leader", "leader": "not a url"}}), NotLeader(421, None)),
        (answer(503, {"error": {"type": "stepping_down", "leader": None}}), NotLeader(503, None)),
        (answer(503, {"error": "not serving writes", "code": "not_leader"}), NotLeader(503, None)),
        (answer(503, {"error": "no node is healthy", "code": "no_healthy_node"}), None),
        (answer(503, {"error": "overloaded"}), None),
        (answer(201, {"session_id": "s"}), None),
    ],
)  # fmt: skip
def test_a_replica_that_does_not_serve_writes_is_told_apart(response, refusal):
    assert not_leader(response) == refusal


def test_the_leader_moves_to_the_named_replica_else_the_next_once_per_failure():
    replicas = Replicas(("http://a", "http://b", "http://c"))
    assert replicas.leader == "http://a"
    assert replicas.moved("http://a", None) == "http://b"
    assert replicas.moved("http://a", None) == "http://b"  # another request failed on a too: moved once
    assert replicas.moved("http://b", "http://x") == "http://x"  # named by a 421, though not given
    assert replicas.moved("http://x", None) == "http://a"  # then back to the URLs given, in order
    assert replicas.moved("http://c", None) == "http://a"


# -- against real coordinators -------------------------------------------------------------------------------------


@pytest.mark.parametrize("given", ["string", "list", "environment"])
def test_with_the_first_url_dead_every_call_goes_to_the_second_in_order(coordinator, given, monkeypatch, caplog):
    caplog.set_level(logging.INFO, logger="tao_sdk")
    urls = [dead_url(), coordinator.url]
    seen = writes(coordinator)
    where = {"string": ",".join(urls), "list": urls, "environment": None}[given]
    if given == "environment":
        monkeypatch.setenv("TAO_COORDINATOR", " , ".join(urls))
    expected = [("Register", "")]
    with tao_sdk.session(where, coordinator.token) as s:  # no fallback node: a detached call would raise
        client = s.openai(max_retries=0)
        for turn in range(3):
            reply = ask(client, f"turn {turn} " * 20)
            expected.append(("LlmEnd", s.state.last.node))
            for _ in range(4):  # queued together, sent by the report worker
                with s.tool("bash", command="true") as call:
                    pass
                expected += [("ToolStart", call.call_id), ("ToolEnd", call.call_id)]
        assert reply.choices[0].message.content
        s.flush()
        assert not s.detached and s.state.replicas.leader == coordinator.url
        assert seen[s.id] == expected
    assert not unavailable(caplog)
    assert coordinator.service.coordinator.sessions == {}  # closed, on the second URL


def test_async_sessions_follow_the_leader_too(coordinator, caplog):
    caplog.set_level(logging.WARNING, logger="tao_sdk")
    seen = writes(coordinator)

    async def agent():
        async with tao_sdk.session([dead_url(), dead_url(), coordinator.url], coordinator.token) as s:
            client = s.async_openai(max_retries=0)
            calls = []
            for turn in range(3):
                reply = await client.chat.completions.create(
                    model=MODEL, messages=[{"role": "user", "content": f"async {turn} " * 20}], max_tokens=3
                )
                assert reply.usage.completion_tokens == 3
                async with s.tool("bash", command="true") as call:
                    calls.append(call.call_id)
            await s.aflush()
            assert not s.detached
            return s.id, calls

    session_id, calls = asyncio.run(agent())
    tools = [detail for kind, detail in seen[session_id] if kind == "ToolStart"]
    assert tools == calls and [kind for kind, _ in seen[session_id]].count("LlmEnd") == 3
    assert not unavailable(caplog)


def test_a_coordinator_stopped_mid_session_hands_the_session_to_the_next(coordinator_factory, fleet, caplog):
    caplog.set_level(logging.INFO, logger="tao_sdk")
    first, second = coordinator_factory(fleet.urls), coordinator_factory(fleet.urls)
    seen = writes(second)
    with tao_sdk.session(f"{first.url},{second.url}", first.token) as s:
        client = s.openai(max_retries=0)
        ask(client, "before " * 20)
        with s.tool("bash", command="true"):
            pass
        s.flush()
        first.stop()
        started = time.monotonic()
        for turn in range(3):
            ask(client, f"after {turn} " * 20)  # the acquire moves on, is answered 404, registers, is granted
            with s.tool("bash", command="true") as call:
                pass
        s.flush()
        assert time.monotonic() - started < 5
        assert not s.detached and s.state.replicas.leader == second.url
        assert second.service.coordinator.sessions[s.id].completed_calls == 3
        assert seen[s.id][-2:] == [("ToolStart", call.call_id), ("ToolEnd", call.call_id)]
    assert second.service.coordinator.sessions == {}
    assert not unavailable(caplog)
    assert any("follows the coordinator's leader" in r.getMessage() for r in caplog.records)


def test_reports_queued_while_their_replica_dies_arrive_in_order_at_the_next(coordinator, relay, caplog):
    caplog.set_level(logging.WARNING, logger="tao_sdk")
    seen = writes(coordinator)
    with tao_sdk.session([relay.url, coordinator.url], coordinator.token) as s:
        client = s.openai(max_retries=0)
        ask(client, "through the relay " * 20)
        s.flush()
        assert s.state.replicas.leader == relay.url
        relay.close()
        expected = []
        for _ in range(10):  # queued faster than sent: the worker meets the dead address with a backlog
            call = s.tool("bash", command="true")
            call.start()
            call.end("ok")
            expected += [("ToolStart", call.call_id), ("ToolEnd", call.call_id)]
        ask(client, "directly " * 20)
        expected.append(("LlmEnd", s.state.last.node))
        s.flush()
        assert s.state.replicas.leader == coordinator.url and not s.detached
        assert seen[s.id][2:] == expected  # after the registration and the first call's end
    assert not unavailable(caplog)


def test_the_proxy_follows_the_leader_for_model_calls_and_relayed_hook_events(coordinator, fleet, caplog):
    caplog.set_level(logging.WARNING, logger="tao_sdk")
    seen = writes(coordinator)
    session = "cc-failover-1"
    with ServedProxy(ProxyConfig(f"{dead_url()},{coordinator.url}", coordinator.token)) as proxy:
        headers = {"X-Claude-Code-Session-Id": session}
        with openai.OpenAI(base_url=proxy.url + "/v1", api_key="x", default_headers=headers, max_retries=0) as client:
            for turn in range(2):
                ask(client, f"through the proxy {turn} " * 20)
                start = {"call_id": f"toolu_{turn}", "tool": "Bash", "hints": {"timeout_s": 120}}
                events = [
                    {"kind": "tool_start", "session_id": session, "tool_start": start},
                    {"kind": "tool_end", "session_id": session, "tool_end": {"call_id": f"toolu_{turn}"}},
                ]
                assert post_events(proxy.url, events, timeout_s=5)  # as the Claude Code hook posts them
        deadline = time.monotonic() + 5
        while proxy.proxy.learned_nodes != tuple(sorted(fleet.urls)):  # listed by the second URL
            assert time.monotonic() < deadline, "the proxy never learned the nodes"
            time.sleep(0.05)
        assert proxy.proxy.sessions[session].router.state.detached_at is None
    kinds = ["Register"] + ["LlmEnd", "ToolStart", "ToolEnd"] * 2
    assert [kind for kind, _ in seen[session]] == kinds
    assert not unavailable(caplog)


def test_with_every_url_dead_a_session_fails_open_within_the_wait(fleet, caplog):
    caplog.set_level(logging.WARNING, logger="tao_sdk")
    urls = [dead_url(), dead_url()]
    started = time.monotonic()
    with tao_sdk.session(urls, "t", fallback_nodes=fleet.urls, failover_wait_s=1, retry_interval_s=0.1) as s:
        entered = time.monotonic() - started
        assert s.detached
        assert 1 <= entered < 1 + FAILOVER_PAUSE_S + 0.5
        client = s.openai(max_retries=0)
        for turn in range(5):
            time.sleep(0.15)  # a retry (one round of the replicas) is due before every call
            began = time.monotonic()
            ask(client, f"alone {turn}")
            assert time.monotonic() - began < 0.5  # the retry runs beside the call
    (warning,) = unavailable(caplog)
    assert "no coordinator replica answered as leader for 1 s" in warning


def test_when_every_replica_dies_mid_session_the_call_fails_open_after_the_wait(coordinator_factory, fleet, caplog):
    caplog.set_level(logging.WARNING, logger="tao_sdk")
    first = coordinator_factory(fleet.urls)
    with tao_sdk.session([first.url, dead_url()], first.token, failover_wait_s=1, retry_interval_s=60) as s:
        client = s.openai(max_retries=0)
        ask(client, "while it lives " * 20)
        first.stop()
        started = time.monotonic()
        ask(client, "after it died " * 20)  # on the last node used
        took = time.monotonic() - started
        assert s.detached
        assert 1 <= took < 1 + FAILOVER_PAUSE_S + 1
    assert len(unavailable(caplog)) == 1


def test_a_single_url_still_detaches_at_its_first_failure(fleet):
    started = time.monotonic()
    with tao_sdk.session(dead_url(), "t", fallback_nodes=fleet.urls, failover_wait_s=30) as s:
        assert s.detached
        assert time.monotonic() - started < 1


def test_a_standby_sends_the_client_to_the_leader_and_no_call_fails(coordinator_factory, fleet, caplog):
    from tao_coordinator.ha import LocalRedis

    caplog.set_level(logging.INFO, logger="tao_sdk")
    with LocalRedis() as redis:
        ports = [int(dead_url().rsplit(":", 1)[1]) for _ in range(2)]
        # `server.redis` and `server.advertise_url`: the TOML keys of `tao coordinator --redis` (rename to match)
        replicas = [
            coordinator_factory(
                fleet.urls, port=port, server={"redis": redis.url, "advertise_url": f"http://127.0.0.1:{port}"}
            )
            for port in ports
        ]
        deadline = time.monotonic() + 10
        while True:
            roles = [httpx2.get(r.url + "/v1/leader").json()["role"] for r in replicas]
            if sorted(roles) == ["leader", "standby"]:
                break
            assert time.monotonic() < deadline, f"no leader elected: {roles}"
            time.sleep(0.05)
        leader, standby = (replicas[0], replicas[1]) if roles[0] == "leader" else (replicas[1], replicas[0])
        refused = httpx2.post(
            standby.url + "/v1/sessions", json={}, headers={"Authorization": f"Bearer {leader.token}"}
        )
        assert not_leader(refused) == NotLeader(421, leader.url)  # the answer the client follows, as the spec has it
        on_leader, on_standby = writes(leader), writes(standby)
        with tao_sdk.session([standby.url, leader.url], leader.token) as s:  # the standby first; no fallback node
            client = s.openai(max_retries=0)
            expected = [("Register", "")]
            for turn in range(3):
                ask(client, f"via the standby {turn} " * 20)
                expected.append(("LlmEnd", s.state.last.node))
                with s.tool("bash", command="true") as call:
                    pass
                expected += [("ToolStart", call.call_id), ("ToolEnd", call.call_id)]
            s.flush()
            assert not s.detached and s.state.replicas.leader == leader.url
            assert on_leader[s.id] == expected
            assert s.id not in on_standby  # a standby never serves a write
        assert leader.service.coordinator.sessions == {}  # closed on the leader
    assert not unavailable(caplog)
    assert any(f"follows the coordinator's leader at {leader.url}" in r.getMessage() for r in caplog.records)
