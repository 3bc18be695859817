"""Caps per API token (fault 7): one token's holder floods registrations; another token's sessions are not crowded
out. A real coordinator on loopback beside real fake-vLLM nodes; the SDK against a real coordinator."""

from __future__ import annotations

import argparse
import logging

import openai
import pytest

import tao_sdk
from tao_coordinator.config import ConfigError, load_config
from tao_coordinator.fakevllm import FakeNodeConfig, ThreadedFleet
from tao_coordinator.web.cli import add_arguments
from tao_sdk.proxy import ProxyConfig
from tests.sdk.test_proxy import ThreadedProxy

from .conftest import API_TOKEN, eventually, running_coordinator

MODEL = "Qwen/Qwen3-32B"

FLOOD = "flood-token-0123456789abcdef"
OTHER = "other-token-0123456789abcdef"
TOKENS = [{"name": "flood", "token": FLOOD}, {"name": "other", "token": OTHER, "max_live_sessions": 10}]


def refusals(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "tao.coordinator.caps"]


async def test_a_token_at_its_live_session_cap_is_answered_429_and_other_tokens_are_not(tmp_path, fleet, caplog):
    caplog.set_level(logging.INFO, "tao.coordinator.caps")
    limits = {"max_live_sessions": 3}
    async with running_coordinator(tmp_path, fleet, limits=limits, tokens=TOKENS) as c:
        flood = [await c.register(token=FLOOD) for _ in range(3)]
        async with c.http.post(c.url + "/v1/sessions", json={}, headers={"Authorization": f"Bearer {FLOOD}"}) as r:
            assert r.status == 429
            assert r.headers["Retry-After"].isdigit() and int(r.headers["Retry-After"]) >= 1
            body = await r.json()
        assert body["code"] == "max_live_sessions"
        assert "'flood'" in body["error"] and "max_live_sessions 3" in body["error"]
        before = set(c.service.coordinator.sessions)
        for _ in range(5):
            assert (await c.call("POST", "/v1/sessions", {}, FLOOD))[0] == 429
        # the batch path is capped the same way, event by event
        batch = {"events": [{"kind": "register", "session_id": "flood-by-batch"}]}
        status, answer = await c.call("POST", "/v1/events", batch, FLOOD)
        assert status == 200 and answer["results"][0]["status"] == 429 and not answer["results"][0]["ok"]
        assert set(c.service.coordinator.sessions) == before  # a refusal changes nothing
        # other tokens keep registering: the default one under [limits], `other` under its own cap
        await c.register(token=API_TOKEN)
        others = [await c.register(token=OTHER) for _ in range(5)]
        assert len(others) == 5
        # one line when the refusals began, not one per refusal; every refusal counted
        assert len(refusals(caplog)) == 1 and "'flood'" in refusals(caplog)[0]
        assert await c.metric("tao_registrations_refused_total", token="flood", cap="max_live_sessions") == 7
        assert await c.metric("tao_token_live_sessions", token="flood") == 3
        assert await c.metric("tao_token_live_sessions", token="other") == 5
        # a closed session frees its place under the cap
        session, token = flood[0]
        assert (await c.call("DELETE", f"/v1/sessions/{session}", token=token))[0] == 204
        await c.register(token=FLOOD)
        assert (await c.call("POST", "/v1/sessions", {}, FLOOD))[0] == 429


async def test_a_token_registering_faster_than_its_rate_is_answered_429_with_when_to_retry(tmp_path, fleet):
    limits = {"registrations_per_s": 0.5, "registration_burst": 2}
    async with running_coordinator(tmp_path, fleet, limits=limits, tokens=TOKENS) as c:
        await c.register(token=FLOOD)
        await c.register(token=FLOOD)
        async with c.http.post(c.url + "/v1/sessions", json={}, headers={"Authorization": f"Bearer {FLOOD}"}) as r:
            assert r.status == 429 and (await r.json())["code"] == "registrations_per_s"
            assert 1 <= int(r.headers["Retry-After"]) <= 2
        await c.register(token=OTHER)  # its own bucket
        assert await c.metric("tao_registrations_refused_total", token="flood", cap="registrations_per_s") == 1


async def test_an_expired_session_frees_its_place_under_the_cap(tmp_path, fleet):
    limits = {"max_live_sessions": 1}
    async with running_coordinator(tmp_path, fleet, core={"lease_ttl_s": 0.3}, limits=limits, tokens=TOKENS) as c:
        await c.register(token=FLOOD)
        assert (await c.call("POST", "/v1/sessions", {}, FLOOD))[0] == 429
        await eventually(lambda: not c.service.coordinator.sessions)
        await c.register(token=FLOOD)


async def test_without_auth_every_client_shares_the_anonymous_caps_unless_it_sends_a_token(tmp_path, fleet):
    server = {"insecure_no_auth": True, "token": None}
    async with running_coordinator(tmp_path, fleet, server=server, limits={"max_live_sessions": 2}, tokens=TOKENS) as c:
        await c.register(token=None)
        await c.register(token="anything-at-all-0123456789")
        status, body = await c.call("POST", "/v1/sessions", {})
        assert status == 429 and "'anonymous'" in body["error"]
        await c.register(token=FLOOD)  # a configured token counts as itself
        assert await c.metric("tao_token_live_sessions", token="anonymous") == 2


def test_caps_and_tokens_are_validated_and_named_in_errors(monkeypatch):
    monkeypatch.delenv("TAO_TOKEN", raising=False)
    base = {"server.token": API_TOKEN}
    config = load_config(None, {**base, "limits.max_live_sessions": 7, "limits.registrations_per_s": 2.5})
    assert (config.limits.max_live_sessions, config.limits.registrations_per_s) == (7, 2.5)
    for overrides, named in [
        ({"limits.max_live_sessions": 0}, "limits.max_live_sessions"),
        ({"limits.registrations_per_s": -1}, "limits.registrations_per_s"),
        ({"limits.registration_burst": 0}, "limits.registration_burst"),
        ({"limits": {"max_sessions": 3}}, "limits.max_sessions"),
        ({"tokens": [{"name": "a b", "token": FLOOD}]}, "tokens.0.name"),
        ({"tokens": [{"name": "a", "token": "short"}]}, "tokens.0.token"),
        ({"tokens": [{"name": "default", "token": FLOOD}]}, "'default' is server.token's"),
        ({"tokens": [{"name": "a", "token": FLOOD}, {"name": "a", "token": OTHER}]}, "repeated: a"),
        ({"tokens": [{"name": "a", "token": API_TOKEN}]}, "must differ"),
    ]:
        with pytest.raises(ConfigError, match=named.replace(".", r"\.")):
            load_config(None, {**base, **overrides})
    # named tokens alone are enough to run with auth
    assert load_config(None, {"tokens": [{"name": "a", "token": FLOOD}]}).api_tokens() == {"a": FLOOD}


def test_cli_flags_set_the_caps():
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--max-live-sessions", "12", "--registrations-per-s", "3", "--registration-burst", "4"])
    assert (args.max_live_sessions, args.registrations_per_s, args.registration_burst) == (12, 3.0, 4)


@pytest.fixture
def threaded_fleet():
    with ThreadedFleet(2, FakeNodeConfig(time_scale=50)) as running:
        yield running


def test_the_sdk_treats_a_429_on_register_like_an_unreachable_coordinator(coordinator_factory, threaded_fleet, caplog):
    caplog.set_level(logging.INFO, "tao_sdk")
    coordinator = coordinator_factory(threaded_fleet.urls, limits={"max_live_sessions": 1})
    node = threaded_fleet.urls[0]
    with tao_sdk.session(coordinator.url, token=coordinator.token, fallback_nodes=[node]) as first:
        assert not first.detached
        with tao_sdk.session(coordinator.url, token=coordinator.token, fallback_nodes=[node]) as second:
            assert second.detached  # fails open: routes on its own, raises nothing
            client = second.openai(max_retries=0)
            for _ in range(3):
                reply = client.chat.completions.create(
                    model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=2
                )
                assert reply.usage.completion_tokens == 2
        said = [r.getMessage() for r in caplog.records if r.name == "tao_sdk" and second.id in r.getMessage()]
        assert len(said) == 1 and "429" in said[0] and "max_live_sessions" in said[0]


def test_tao_proxy_fails_open_on_a_429_too(coordinator_factory, threaded_fleet, caplog):
    caplog.set_level(logging.INFO, "tao_sdk")
    coordinator = coordinator_factory(threaded_fleet.urls, limits={"max_live_sessions": 1})
    config = ProxyConfig(coordinator.url, coordinator.token, fallback_nodes=tuple(threaded_fleet.urls))
    with (
        ThreadedProxy(config) as proxy,
        openai.OpenAI(base_url=proxy.url + "/v1", api_key="x", max_retries=0) as client,
    ):
        for session in ("proxy-first", "proxy-second", "proxy-second"):
            reply = client.chat.completions.create(
                model=MODEL,
                messages=[{"role": "user", "content": "hi"}],
                max_tokens=2,
                extra_headers={"x-session-affinity": session},
            )
            assert reply.usage.completion_tokens == 2
        assert set(coordinator.service.coordinator.sessions) == {"proxy-first"}
    said = [r.getMessage() for r in caplog.records if r.name == "tao_sdk" and "proxy-second" in r.getMessage()]
    assert len(said) == 1 and "429" in said[0]


def test_a_refusal_spell_is_logged_once_when_it_starts_and_once_when_it_ends(caplog):
    """The caps' own clock (`now` comes in): one line at the first refusal, one at the first registration `QUIET_S`
    after the last refusal, however many come between; each refusal counted by token and cap."""
    from tao_coordinator.web.caps import QUIET_S, CapReached, RegistrationCaps

    caplog.set_level(logging.INFO, "tao.coordinator.caps")
    counted: list[tuple[str, str]] = []
    config = load_config(None, {"server.token": API_TOKEN, "limits.max_live_sessions": 1})
    caps = RegistrationCaps(config, lambda token, cap: counted.append((token, cap)))
    caps.check("default", 0.0)
    caps.admitted("default", "s-1", 0.0)
    for k in range(50):
        with pytest.raises(CapReached):
            caps.check("default", 1.0 + k * 0.1)
    caps.release("s-1")
    caps.check("default", 7.0)
    caps.admitted("default", "s-2", 7.0)  # within QUIET_S of the last refusal: the spell goes on
    caps.release("s-2")
    caps.admitted("default", "s-3", 6.0 + QUIET_S)
    assert [r.levelname for r in caplog.records] == ["WARNING", "INFO"]
    assert "after 50 refusals (429) over 5 s (max_live_sessions 50)" in caplog.records[1].getMessage()
    assert counted == [("default", "max_live_sessions")] * 50 and caps.live() == {"default": 1}
