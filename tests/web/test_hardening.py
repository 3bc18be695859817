"""The service under hostile input (docs/coordinator.md#under-hostile-input): each finding of the hardening probe,
reproduced against a real coordinator on a loopback port with auth on, and answered with a 4xx naming the problem (or a
closed connection) — never a 5xx."""

import asyncio
import contextlib
import json
import logging

import pytest

from tao_coordinator.core.settings import CoreSettings
from tao_coordinator.web import serve
from tao_coordinator.web.openapi import build_spec

from .conftest import API_TOKEN, http_request, raw_exchange, running_coordinator

HUGE = "9" * 5_000

MAX_RUNNING_TOOLS = CoreSettings().max_running_tools


def _json_endpoints(session: str) -> list[tuple[str, str]]:
    base = f"/v1/sessions/{session}"
    return [
        ("/v1/sessions", '{"expected_input_tokens": %s}'),
        (f"{base}/acquire", '{"expected_input_tokens": %s, "wait_s": 0}'),
        (f"{base}/llm_end", '{"node": "node-0", "prompt_tokens": %s}'),
        (f"{base}/tool_start", '{"call_id": "c", "tool": "bash", "hints": {"timeout_s": %s}}'),
        (f"{base}/tool_end", '{"call_id": "c", "duration_s": %s}'),
        ("/v1/events", '{"events": [{"kind": "heartbeat", "session_id": "x", "session_token": %s}]}'),
    ]


async def test_a_huge_integer_is_a_400_on_every_json_endpoint_and_logs_nothing(tmp_path, fleet, caplog):
    async with running_coordinator(tmp_path, fleet) as c:
        session, token = await c.register()
        for path, template in _json_endpoints(session):
            for number in (HUGE, "-" + HUGE, "1e999", "NaN"):
                auth = API_TOKEN if path == "/v1/sessions" else token
                headers = [("Authorization", f"Bearer {auth}".encode())]
                request = http_request("POST", path, (template % number).encode(), headers)
                status, data, _ = await raw_exchange(c.url, request)
                body = json.loads(data.partition(b"\r\n\r\n")[2])
                assert (status, body["field"]) == (400, "body"), (path, number, data[:300])
                assert "out of range" in body["error"] or "not a JSON number" in body["error"]
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


@pytest.mark.parametrize("value", [b"Bearer \xff\xfe\x80", b"\xc3\x28 token", b"Bearer caf\xc3\xa9"])
async def test_an_authorization_header_that_is_not_ascii_is_a_401(tmp_path, fleet, value, caplog):
    async with running_coordinator(tmp_path, fleet) as c:
        session, _ = await c.register()
        for method, path in [
            ("POST", "/v1/sessions"),
            ("POST", f"/v1/sessions/{session}/heartbeat"),
            ("DELETE", f"/v1/sessions/{session}"),
            ("GET", "/v1/sessions"),
            ("GET", "/v1/nodes"),
        ]:
            status, data, _ = await raw_exchange(c.url, http_request(method, path, headers=[("Authorization", value)]))
            assert status == 401, (path, data[:300])
            assert b"ASCII" in data
        assert session in c.service.session_tokens
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_every_route_of_the_app_is_in_the_openapi_description():
    from tao_coordinator.config import CoordinatorConfig
    from tao_coordinator.web.app import create_app

    app = create_app(CoordinatorConfig.model_validate({"server": {"insecure_no_auth": True}}))
    routes = {(r.method.lower(), r.resource.canonical) for r in app.router.routes() if r.resource is not None}
    spec = build_spec()
    described = {(method, path) for path, item in spec["paths"].items() for method in item}
    assert routes - {("head", r[1]) for r in routes} == described
    assert spec["paths"]["/v1/sessions"]["post"]["summary"] == "Register a session"


async def test_a_body_that_never_arrives_is_a_408_and_the_connection_closes(tmp_path, fleet):
    async with running_coordinator(tmp_path, fleet, server={"body_timeout_s": 0.5}) as c:
        request = http_request("POST", "/v1/events", b"{", [("Content-Length", b"1000")])
        status, data, took = await raw_exchange(c.url, request, timeout=10)
        assert status == 408 and b"0.5 s" in data
        assert took < 0.5 + serve.LINGER_S + 1.0  # answered, then closed by the server (read() saw EOF)


async def test_connections_past_the_cap_are_closed_and_idle_ones_time_out(tmp_path, fleet):
    server = {"max_connections": 4, "idle_timeout_s": 0.5}
    async with running_coordinator(tmp_path, fleet, server=server) as c:
        host, port = "127.0.0.1", int(c.url.rpartition(":")[2])
        held = [await asyncio.open_connection(host, port) for _ in range(4)]
        for _, writer in held:
            writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")  # headers never finished
        await asyncio.sleep(0.1)
        status, _, took = await raw_exchange(c.url, http_request("GET", "/healthz"), timeout=5)
        assert status is None and took < 1.0  # closed at once, nothing answered
        assert c.site.refused >= 1
        for reader, _ in held:  # the idle timeout closes the slow ones
            assert await asyncio.wait_for(reader.read(), 3) == b""
        for _, writer in held:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()
        status, _, _ = await raw_exchange(c.url, http_request("GET", "/healthz"))
        assert status == 200


async def test_unknown_and_foreign_sessions_answer_alike_without_the_sessions_token(tmp_path, fleet):
    async with running_coordinator(tmp_path, fleet) as c:
        mine, my_token = await c.register()
        _other, other_token = await c.register()
        for token in (None, "guess", other_token, API_TOKEN):
            for verb in ("heartbeat", "acquire"):
                existing = await c.call("POST", f"/v1/sessions/{mine}/{verb}", {}, token)
                unknown = await c.call("POST", f"/v1/sessions/no-such-session/{verb}", {}, token)
                assert existing == unknown and existing[0] in (401, 403), (token, existing, unknown)
            batch = [{"kind": "heartbeat", "session_id": sid, "session_token": token or ""} for sid in (mine, "nope")]
            _, answer = await c.call("POST", "/v1/events", {"events": batch})
            assert answer["results"][0] == answer["results"][1] and answer["results"][0]["status"] == 403
        assert (await c.call("DELETE", f"/v1/sessions/{mine}", token=my_token))[0] == 204
        # the owner of a closed session is told it is gone, so a client registers again
        status, body = await c.call("POST", f"/v1/sessions/{mine}/acquire", {}, my_token)
        assert (status, body["field"]) == (404, "session_id")
        assert (await c.call("POST", f"/v1/sessions/{mine}/acquire", {}, other_token))[0] == 403


async def test_session_tokens_prove_their_session_across_a_restart(tmp_path, fleet):
    async with running_coordinator(tmp_path, fleet) as c:
        session, token = await c.register()
    async with running_coordinator(tmp_path, fleet) as c:
        assert (await c.call("POST", f"/v1/sessions/{session}/heartbeat", None, token))[0] == 404
        assert (await c.call("POST", f"/v1/sessions/{session}/heartbeat", None, token[:-2] + "xx"))[0] == 403


@pytest.mark.parametrize(
    ("context", "field"),
    [
        ({"labels": {"k": "v" * 257}}, "context.labels.k"),
        ({"labels": {"k" * 65: "v"}}, "context.labels." + "k" * 40 + "…" + ".[key]"),
        ({"labels": {"": "v"}}, "context.labels..[key]"),
        ({"labels": {f"k{i}": "v" for i in range(51)}}, "context.labels"),
        ({"expected_next_tools": ["t" * 201]}, "context.expected_next_tools.0"),
        ({"model": "m" * 201}, "context.model"),
        ({"harness": "h" * 101}, "context.harness"),
    ],
)
async def test_oversized_strings_are_refused_naming_the_field(tmp_path, fleet, context, field):
    async with running_coordinator(tmp_path, fleet) as c:
        status, body = await c.call("POST", "/v1/sessions", {"context": context}, API_TOKEN)
        assert (status, body["field"]) == (422, field)
        assert c.service.coordinator.sessions == {}


@pytest.mark.parametrize("session_id", ["a/b", "a b", "a%2Fb", "ü", "x" * 201, "", "a?b", "a#b", ".", "..", "-a"])
async def test_a_session_id_outside_the_allowed_characters_is_refused_saying_which_are(tmp_path, fleet, session_id):
    async with running_coordinator(tmp_path, fleet) as c:
        status, body = await c.call("POST", "/v1/sessions", {"session_id": session_id}, API_TOKEN)
        assert (status, body["field"]) == (422, "session_id")
        assert "a letter, a digit or one of . _ : @ + - (no '/')" in body["error"]
        batch = {"events": [{"kind": "register", "session_id": session_id}]}
        assert (await c.call("POST", "/v1/events", batch, API_TOKEN))[0] == 422
        assert c.service.coordinator.sessions == {}


async def test_a_session_runs_a_bounded_number_of_tools(tmp_path, fleet):
    async with running_coordinator(tmp_path, fleet) as c:
        session, token = await c.register()
        for k in range(MAX_RUNNING_TOOLS):
            started = await c.call(
                "POST", f"/v1/sessions/{session}/tool_start", {"call_id": f"c{k}", "tool": "x"}, token
            )
            assert started[0] == 204
        status, body = await c.call(
            "POST", f"/v1/sessions/{session}/tool_start", {"call_id": "one-more", "tool": "x"}, token
        )
        assert (status, body["field"]) == (409, "call_id") and str(MAX_RUNNING_TOOLS) in body["error"]
        assert len(c.service.coordinator.sessions[session].tools) == MAX_RUNNING_TOOLS
