"""AgentContext on the wire: workflow, parent, step and expected tools from the SDK and through `tao proxy` reach a
real coordinator and its session listing; bad values are refused naming the field and change nothing."""

import httpx2
import openai
import pytest
from aiohttp import web

import tao_sdk
from tao_sdk.proxy import ProxyConfig, context_from, step_from
from tao_sdk.router import Step

from .test_proxy import MODEL, ThreadedApp, ThreadedProxy, settled

PROMPT = [{"role": "user", "content": "hello"}]
TOOLS = [f"t{k}" for k in range(60)]


def listed(coordinator, session_id):
    answer = httpx2.get(coordinator.url + "/v1/sessions", headers={"Authorization": f"Bearer {coordinator.token}"})
    return next(s for s in answer.json()["sessions"] if s["session_id"] == session_id)


def agent_fields(row):
    return {k: row[k] for k in ("workflow_id", "parent_session_id", "step_id", "expected_next_tools")}


def test_the_proxy_reads_the_agent_headers_and_each_calls_step(coordinator):
    session_headers = {
        "X-Session-Id": "sub-1",
        "x-agent-workflow-id": "fix-bug-7",
        "x-agent-parent-session-id": "top-1",
    }
    with ThreadedProxy(ProxyConfig(coordinator.url, coordinator.token)) as proxy:
        client = openai.OpenAI(base_url=proxy.url + "/v1", api_key="x", default_headers=session_headers)
        step = {"x-agent-step-id": "1", "x-agent-expected-tools": "bash, read"}
        client.chat.completions.create(model=MODEL, messages=PROMPT, max_tokens=2, extra_headers=step)
        settled(coordinator, "sub-1", 1)
        assert agent_fields(listed(coordinator, "sub-1")) == {
            "workflow_id": "fix-bug-7",
            "parent_session_id": "top-1",
            "step_id": "1",
            "expected_next_tools": ["bash", "read"],
        }
        client.chat.completions.create(
            model=MODEL, messages=PROMPT, max_tokens=2, extra_headers={"x-agent-step-id": "2"}
        )
        settled(coordinator, "sub-1", 2)
        row = listed(coordinator, "sub-1")
        assert (row["step_id"], row["expected_next_tools"]) == ("2", ["bash", "read"])  # tools left unchanged
        client.close()


class RecordingNode(ThreadedApp):
    """A node that answers every chat call and keeps the headers it was sent."""

    def __init__(self) -> None:
        self.headers: list[dict[str, str]] = []
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self.answer)
        super().__init__(app)

    async def answer(self, request: web.Request) -> web.Response:
        self.headers.append({k.lower(): v for k, v in request.headers.items()})
        message = {"role": "assistant", "content": "ok"}
        usage = {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}
        choice = {"index": 0, "message": message, "finish_reason": "stop"}
        body = {"id": "c", "object": "chat.completion", "created": 0, "model": MODEL, "choices": [choice]}
        return web.json_response({**body, "usage": usage})


def test_the_step_headers_are_not_forwarded_to_the_node():
    with RecordingNode() as node, ThreadedProxy(ProxyConfig(None, fallback_nodes=(node.url,))) as proxy:
        headers = {"x-agent-workflow-id": "w", "x-agent-step-id": "4", "x-agent-expected-tools": "bash"}
        with openai.OpenAI(base_url=proxy.url + "/v1", api_key="x", default_headers=headers) as client:
            client.chat.completions.create(model=MODEL, messages=PROMPT, max_tokens=2)
    [sent] = node.headers
    assert "x-agent-step-id" not in sent and "x-agent-expected-tools" not in sent
    assert sent["x-agent-workflow-id"] == "w"  # forwarded before this change, and still


@pytest.mark.parametrize(
    ("headers", "step"),
    [
        ({}, None),
        ({"x-agent-step-id": " 7 "}, Step("7", None)),
        ({"x-agent-expected-tools": ""}, Step(None, ())),
        ({"x-agent-step-id": "x" * 201, "x-agent-expected-tools": "a,,b"}, Step(None, ("a", "b"))),
        ({"x-agent-expected-tools": ",".join(TOOLS[:60])}, Step(None, tuple(TOOLS[:50]))),
    ],
)
def test_step_headers_are_bounded_as_the_protocol_is(headers, step):
    assert step_from(headers) == step


def test_the_sdk_sends_the_workflow_at_registration_and_the_step_with_the_next_acquire(coordinator):
    context = tao_sdk.AgentContext(harness="test")
    options = {"workflow_id": "wf-9", "parent_session_id": "top", "expected_next_tools": ["edit"]}
    with tao_sdk.session(coordinator.url, coordinator.token, context, **options) as s:
        assert agent_fields(listed(coordinator, s.id)) == {
            "workflow_id": "wf-9",
            "parent_session_id": "top",
            "step_id": "",
            "expected_next_tools": ["edit"],
        }
        client = s.openai()
        s.step(3, expected_tools=["bash", "pytest"])
        client.chat.completions.create(model=MODEL, messages=PROMPT, max_tokens=2)
        s.flush()
        row = listed(coordinator, s.id)
        assert (row["step_id"], row["expected_next_tools"]) == ("3", ["bash", "pytest"])
        assert row["harness"] == "test"


@pytest.mark.parametrize(
    ("step_id", "tools", "field"),
    [("x" * 201, None, "step_id"), ("", None, "step_id"), (1, ["t"] * 51, "expected_next_tools")],
)
def test_a_bad_step_is_refused_naming_the_field_and_changes_nothing(coordinator, step_id, tools, field):
    with tao_sdk.session(coordinator.url, coordinator.token) as s:
        s.step("ok", expected_tools=["bash"])
        with pytest.raises(tao_sdk.ConfigurationError, match=rf"^{field}"):
            s.step(step_id, expected_tools=tools)
        assert s.state.step == Step("ok", ("bash",))


def test_a_bad_workflow_is_refused_naming_the_field():
    with pytest.raises(tao_sdk.ConfigurationError, match=r"^workflow_id"):
        tao_sdk.session("http://127.0.0.1:9", workflow_id="w" * 201)


async def test_an_oversized_register_context_is_refused_and_changes_nothing(coordinator):
    async with httpx2.AsyncClient(base_url=coordinator.url) as http:
        headers = {"Authorization": f"Bearer {coordinator.token}"}
        body = {"session_id": "too-long-parent", "context": {"parent_session_id": "p" * 201}}
        answer = await http.post("/v1/sessions", json=body, headers=headers)
        assert (answer.status_code, answer.json()["field"]) == (422, "context.parent_session_id")
        assert "too-long-parent" not in coordinator.service.coordinator.sessions


def test_label_headers_past_the_protocol_s_limits_are_cut_or_left_out_never_an_error():
    headers = {"x-agent-label-" + "k" * 70: "v" * 300, "x-agent-label-": "empty key", "X-Agent-Label-Team": "a"}
    assert context_from(headers).labels == {"k" * 64: "v" * 256, "team": "a"}
