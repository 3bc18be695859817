"""The transport between a real OpenAI client and the nodes, without a coordinator or a node: both are
`httpx2.MockTransport`s. What reaches the node (its address, `X-Session-ID`, the usage chunk asked of a stream), what
`llm_end` reports of the answer, and a call a node refused going once to another node."""

import json

import httpx2
import openai

from tao_sdk.router import SessionConfig, SyncRouter
from tao_sdk.sessions import PLACEHOLDER_OPENAI
from tao_sdk.transport import TaoTransport

COORDINATOR = "http://127.0.0.1:1"
NODES = {"n0": "http://127.0.0.1:8000", "n1": "http://127.0.0.1:8001"}
STREAM = (
    b'data: {"choices":[{"delta":{"content":"Hi"}}]}\n\n'
    b'data: {"choices":[],"usage":{"prompt_tokens":52,"completion_tokens":2,'
    b'"prompt_tokens_details":{"cached_tokens":48}}}\n\n'
    b"data: [DONE]\n\n"
)


def streamed(status: int, body: bytes, content_type: str = "application/json") -> httpx2.Response:
    """A node's answer whose body is read as it arrives, as from a socket (`content=` would be read at once)."""
    return httpx2.Response(status, headers={"content-type": content_type}, stream=httpx2.ByteStream(body))


class Fleet:
    """A coordinator that grants the nodes in turn, and nodes that answer with `answers` in turn."""

    def __init__(self, *answers: httpx2.Response) -> None:
        self.answers = list(answers)
        self.grants = iter(NODES.items())
        self.reports: list[dict[str, object]] = []
        self.acquires: list[dict[str, object]] = []
        self.node_requests: list[tuple[str, str, dict[str, object]]] = []
        """URL, `X-Session-ID` and JSON body of each request a node got."""

    def coordinator(self, request: httpx2.Request) -> httpx2.Response:
        verb = request.url.path.rsplit("/", 1)[-1]
        body = json.loads(request.content) if request.content else {}
        if verb == "sessions":
            return httpx2.Response(201, json={"session_id": "s", "session_token": "t", "lease_ttl_s": 30.0})
        if verb == "acquire":
            self.acquires.append(body)
            node, url = next(self.grants)
            return httpx2.Response(200, json={"status": "admitted", "node": node, "node_url": url, "lease_id": node})
        if verb == "llm_end":
            self.reports.append(body)
        return httpx2.Response(204)

    def node(self, request: httpx2.Request) -> httpx2.Response:
        sent = b"".join(request.stream)  # what goes on the wire (`request.content` keeps the caller's body)
        self.node_requests.append((str(request.url), request.headers["x-session-id"], json.loads(sent)))
        return self.answers.pop(0)

    def client(self) -> tuple[openai.OpenAI, SyncRouter]:
        config = SessionConfig(coordinator=COORDINATOR, session_id="s", fallback_nodes=tuple(NODES.values()))
        router = SyncRouter(config, transport=httpx2.MockTransport(self.coordinator))
        transport = TaoTransport(router, inner=httpx2.MockTransport(self.node))
        http = httpx2.Client(transport=transport)
        return openai.OpenAI(base_url=PLACEHOLDER_OPENAI, api_key="EMPTY", http_client=http, max_retries=0), router


def test_a_stream_goes_to_the_granted_node_asks_for_usage_and_reports_it():
    fleet = Fleet(streamed(200, STREAM, "text/event-stream"))
    client, router = fleet.client()
    stream = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], stream=True)
    assert "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices) == "Hi"
    router.flush()
    ((url, session_id, body),) = fleet.node_requests
    assert (url, session_id) == (NODES["n0"] + "/v1/chat/completions", "s")
    assert body["stream_options"] == {"include_usage": True}
    (report,) = fleet.reports
    assert {k: report[k] for k in ("node", "lease_id", "prompt_tokens", "cached_tokens", "completion_tokens")} == {
        "node": "n0",
        "lease_id": "n0",
        "prompt_tokens": 52,
        "cached_tokens": 48,
        "completion_tokens": 2,
    }
    assert report["ttft_s"] >= 0 and report["duration_s"] >= report["ttft_s"]


def test_a_refused_call_is_reported_refused_and_answered_by_another_node():
    answer = {"choices": [{"message": {"role": "assistant", "content": "ok"}, "index": 0, "finish_reason": "stop"}]}
    answer |= {"id": "x", "object": "chat.completion", "created": 0, "model": "m"}
    answer |= {"usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}}
    fleet = Fleet(streamed(503, b'{"error": "full"}'), streamed(200, json.dumps(answer).encode()))
    client, router = fleet.client()
    reply = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    router.flush()
    assert reply.choices[0].message.content == "ok"
    assert [url for url, _, _ in fleet.node_requests] == [
        NODES["n0"] + "/v1/chat/completions",
        NODES["n1"] + "/v1/chat/completions",
    ]
    assert fleet.acquires[1]["avoid_nodes"] == ["n0"]
    refused, served = fleet.reports
    assert (refused["node"], refused["refused"], refused["error"]) == ("n0", True, "HTTP 503")
    assert (served["node"], served.get("refused", False), served["completion_tokens"]) == ("n1", False, 1)
    assert router.state.retried_calls == 1
