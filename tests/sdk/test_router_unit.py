"""The router's decisions, without a coordinator: each test scripts the coordinator's answers on an
`httpx2.MockTransport` and checks what the router sent and decided (registration, long polls, registering again,
failing open, replicas, rerouting a refused call), for the sync and the async router alike."""

import json
from collections.abc import Callable

import httpx2
import pytest

from tao_sdk import protocol
from tao_sdk.errors import AuthenticationFailed, NoNodeAvailable
from tao_sdk.router import AsyncRouter, Grant, SessionConfig, SyncRouter
from tao_sdk.usage import Usage

C1, C2 = "http://127.0.0.1:1", "http://127.0.0.2:1"
NODES = ("http://127.0.0.1:8000", "http://127.0.0.1:8001")
REGISTERED = (201, {"session_id": "s", "session_token": "session-token", "lease_ttl_s": 30.0})
Answer = tuple[int, object] | Exception


def admitted(node: str = "n0", url: str = NODES[0], lease: str = "lease-1") -> tuple[int, object]:
    return 200, {"status": "admitted", "node": node, "node_url": url, "lease_id": lease}


WAITING = (202, {"status": "waiting"})


class Coordinator:
    """Answers each request with the next scripted answer for its verb (the last path part: `sessions` for
    registration, `close` for the DELETE), the last one repeating, else 204; records what was sent."""

    def __init__(self, **script: list[Answer]) -> None:
        self.script = script
        self.sent: list[tuple[str, str, str, dict[str, object] | None]] = []

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        verb = request.url.path.rstrip("/").rsplit("/", 1)[-1]
        verb = "close" if request.method == "DELETE" else verb
        body = json.loads(request.content) if request.content else None
        self.sent.append(
            (
                f"{request.url.scheme}://{request.url.netloc.decode()}",
                verb,
                request.headers.get("authorization", ""),
                body,
            )
        )
        answers = self.script.get(verb) or [(204, None)]
        answer = answers.pop(0) if len(answers) > 1 else answers[0]
        if isinstance(answer, Exception):
            raise answer
        status, payload = answer
        return httpx2.Response(status, json=payload) if payload is not None else httpx2.Response(status)

    def verbs(self) -> list[str]:
        return [verb for _, verb, _, _ in self.sent]


def config(*coordinators: str, **options: object) -> SessionConfig:
    fields = {"token": "api-token", "session_id": "s", "fallback_nodes": NODES, "retry_interval_s": 60.0}
    return SessionConfig(coordinator=list(coordinators) or None, **{**fields, **options})


def sync_router(coordinator: Coordinator, *urls: str, **options: object) -> SyncRouter:
    return SyncRouter(config(*(urls or (C1,)), **options), transport=httpx2.MockTransport(coordinator))


def test_a_call_registers_then_acquires_with_the_session_token():
    coordinator = Coordinator(sessions=[REGISTERED], acquire=[admitted()])
    router = sync_router(coordinator, request_timeout_s=2.0)
    grant = router.acquire(100)
    assert grant == Grant("n0", NODES[0], "lease-1")
    (_, register, api_auth, registration), (_, acquire, session_auth, body) = coordinator.sent
    assert (register, api_auth, registration["session_id"]) == ("sessions", "Bearer api-token", "s")
    assert (acquire, session_auth) == ("acquire", "Bearer session-token")
    assert body == {"expected_input_tokens": 100, "wait_s": 1.0}  # long polls answered within request_timeout_s / 2


def test_a_waiting_answer_is_polled_again_until_admitted():
    coordinator = Coordinator(sessions=[REGISTERED], acquire=[WAITING, WAITING, admitted("n1", NODES[1])])
    assert sync_router(coordinator).acquire(None).node == "n1"
    assert coordinator.verbs() == ["sessions", "acquire", "acquire", "acquire"]


def test_an_unknown_session_registers_again_once():
    coordinator = Coordinator(sessions=[REGISTERED], acquire=[(404, {"error": "unknown session"}), admitted()])
    assert not sync_router(coordinator).acquire(None).detached
    assert coordinator.verbs() == ["sessions", "acquire", "sessions", "acquire"]


def test_an_unreachable_coordinator_routes_on_the_sessions_own_node_without_asking_again():
    coordinator = Coordinator(sessions=[httpx2.ConnectError("refused")])
    router = sync_router(coordinator)
    router.register()
    first, second = router.acquire(None), router.acquire(None)
    assert first == second and first.detached and first.node_url in NODES
    assert coordinator.verbs() == ["sessions"]  # the next try waits for retry_interval_s


def test_a_coordinator_answering_5xx_is_unreachable_too():
    coordinator = Coordinator(sessions=[(500, {"error": "boom"})])
    assert sync_router(coordinator).acquire(None).detached


def test_a_refused_api_token_without_a_node_to_fall_back_on_raises():
    coordinator = Coordinator(sessions=[(401, {"error": "bad token"})])
    with pytest.raises(AuthenticationFailed, match="401"):
        sync_router(coordinator, fallback_nodes=()).acquire(None)


def test_no_coordinator_and_no_node_is_an_error_naming_both():
    with pytest.raises(NoNodeAvailable, match="fallback"):
        SyncRouter(SessionConfig()).acquire(None)


def test_no_healthy_node_routes_the_call_on_its_own_and_the_session_stays_registered():
    no_healthy = (503, {"error": "no node is healthy", "code": protocol.NO_HEALTHY_NODE})
    coordinator = Coordinator(sessions=[REGISTERED], acquire=[no_healthy])
    router = sync_router(coordinator)
    assert router.acquire(None).detached
    assert router.state.registered and router.state.detached_at is None


def test_a_replica_that_is_not_the_leader_sends_the_request_to_the_one_it_names():
    coordinator = Coordinator(sessions=[(421, {"error": {"type": "not_leader", "leader": C2}}), REGISTERED])
    router = sync_router(coordinator, C1, C2)
    router.register()
    assert [url for url, _, _, _ in coordinator.sent] == [C1, C2]
    assert router.state.registered and router.state.replicas.leader == C2


def test_a_refused_call_is_placed_again_avoiding_the_refuser():
    coordinator = Coordinator(sessions=[REGISTERED], acquire=[admitted(), admitted("n1", NODES[1], "lease-2")])
    router = sync_router(coordinator)
    refused = router.acquire(None)
    assert router.reroute(refused, "HTTP 503", None) == Grant("n1", NODES[1], "lease-2")
    assert coordinator.sent[-1][3] == {"wait_s": 1.0, "expected_input_tokens": None, "avoid_nodes": ["n0"]}


def test_when_no_other_node_can_take_a_refused_call_the_caller_gets_the_refusal():
    no_other = (503, {"error": "only n0", "code": protocol.NO_OTHER_NODE})
    coordinator = Coordinator(sessions=[REGISTERED], acquire=[admitted(), no_other])
    router = sync_router(coordinator)
    assert router.reroute(router.acquire(None), "HTTP 503", None) is None


def test_reports_leave_in_order_after_the_call_they_follow():
    coordinator = Coordinator(sessions=[REGISTERED], acquire=[admitted()])
    router = sync_router(coordinator)
    grant = router.acquire(10)
    router.llm_end(grant, Usage(prompt_tokens=10, cached_tokens=4, completion_tokens=3, ttft_s=0.1), 0.5)
    router.tool_start("c1", "bash", protocol.ToolHints(timeout_s=30), "pytest")
    router.tool_end("c1", 1.5, "ok")
    router.close()
    assert coordinator.verbs() == ["sessions", "acquire", "llm_end", "tool_start", "tool_end", "close"]
    llm_end, tool_start, tool_end = (body for _, _, _, body in coordinator.sent[2:5])
    assert llm_end == {
        "lease_id": "lease-1",
        "node": "n0",
        "prompt_tokens": 10,
        "cached_tokens": 4,
        "completion_tokens": 3,
        "ttft_s": 0.1,
        "duration_s": 0.5,
    }
    assert tool_start == {
        "call_id": "c1",
        "tool": "bash",
        "hints": {"timeout_s": 30.0, "background": False},
        "program": "pytest",
    }
    assert tool_end == {"call_id": "c1", "duration_s": 1.5, "status": "ok"}


def test_a_call_routed_on_its_own_is_not_reported():
    router = SyncRouter(SessionConfig(fallback_nodes=NODES))
    router.llm_end(router.acquire(None), Usage(), 0.1)
    router.flush()
    assert router._worker is None


async def test_the_async_router_decides_as_the_sync_one():
    script: Callable[[], Coordinator] = lambda: Coordinator(  # noqa: E731
        sessions=[REGISTERED], acquire=[WAITING, (404, {"error": "gone"}), admitted("n1", NODES[1])]
    )
    sync_coordinator, async_coordinator = script(), script()
    sync_grant = sync_router(sync_coordinator).acquire(5)
    router = AsyncRouter(config(C1), transport=httpx2.MockTransport(async_coordinator))
    assert await router.acquire(5) == sync_grant
    await router.llm_end(sync_grant, Usage(completion_tokens=1), 0.2)
    await router.close()
    assert async_coordinator.verbs() == [*sync_coordinator.verbs(), "llm_end", "close"]
