"""What the SDK and `tao proxy` say when the coordinator answers but cannot help: a refused API token, and a fleet
with no healthy node."""

import logging
import time

import openai
import pytest

import tao_sdk
from tao_coordinator.fakevllm import FakeNodeConfig, ThreadedFleet
from tao_sdk.proxy import ProxyConfig

from .test_proxy import ThreadedProxy

MODEL = "Qwen/Qwen3-32B"


def ask(client, text="x"):
    return client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": text}], max_tokens=2)


def noticed(coordinator):
    """Until the coordinator has marked its node unhealthy."""
    deadline = time.monotonic() + 5
    while (node := coordinator.service.coordinator.nodes.get("node-0")) is None or node.healthy:
        assert time.monotonic() < deadline, "the coordinator did not notice the node is down"
        time.sleep(0.05)


@pytest.mark.parametrize("token", ["wrong-token", None])
def test_a_refused_api_token_is_named_as_such(coordinator, fleet, token, monkeypatch, caplog):
    monkeypatch.delenv("TAO_TOKEN", raising=False)
    caplog.set_level(logging.WARNING, logger="tao_sdk")
    with tao_sdk.session(coordinator.url, token) as s, pytest.raises(tao_sdk.AuthenticationFailed, match="401"):
        ask(s.openai(max_retries=0))
    with tao_sdk.session(coordinator.url, token, fallback_nodes=fleet.urls) as s:
        client = s.openai(max_retries=0)
        for _ in range(3):
            assert ask(client).usage.completion_tokens == 2  # fails open: routed on its own
    errors = [r for r in caplog.records if r.levelno == logging.ERROR and "API token" in r.getMessage()]
    assert len(errors) == 2 and all("401" in r.getMessage() for r in errors)  # once per session
    assert not any("unavailable" in r.getMessage() or "unreachable" in r.getMessage() for r in caplog.records)


def test_the_proxy_names_a_refused_api_token(coordinator):
    with (
        ThreadedProxy(ProxyConfig(coordinator.url, "wrong-token")) as proxy,
        openai.OpenAI(base_url=proxy.url + "/v1", api_key="x", max_retries=0) as client,
        pytest.raises(openai.InternalServerError, match="refused the API token") as refused,
    ):
        ask(client)
    assert refused.value.status_code == 503 and "401" in str(refused.value)
    assert refused.value.body["type"] == "tao_coordinator_auth"


def test_with_every_node_down_a_call_is_not_held_and_the_log_says_so(coordinator_factory, caplog):
    caplog.set_level(logging.INFO, logger="tao_sdk")
    with ThreadedFleet(1, FakeNodeConfig(time_scale=50), kv_events=False) as fleet:
        coordinator = coordinator_factory(fleet.urls, fleet={"scrape_interval_s": 0.1, "scrape_timeout_s": 0.2})
        with tao_sdk.session(coordinator.url, coordinator.token, max_wait_s=20) as s:
            client = s.openai(max_retries=0)
            time.sleep(0.3)  # scraped once
            fleet.stop()
            noticed(coordinator)
            started = time.monotonic()
            with pytest.raises(tao_sdk.NoNodeAvailable, match="no healthy node"):
                ask(client)  # before: held for max_wait_s, then "the coordinator is unreachable"
            assert time.monotonic() - started < 1.0
    with ThreadedFleet(1, FakeNodeConfig(time_scale=50), kv_events=False) as fleet:
        coordinator = coordinator_factory(fleet.urls, fleet={"scrape_interval_s": 0.1, "scrape_timeout_s": 0.2})
        with tao_sdk.session(coordinator.url, coordinator.token, max_wait_s=20) as s:
            client = s.openai(max_retries=0)
            ask(client)  # the node this session last used
            fleet.stop()
            noticed(coordinator)
            for _ in range(3):
                started = time.monotonic()
                with pytest.raises(openai.APIConnectionError):
                    ask(client)  # routed on its own, to the last node, which is down: the client says so at once
                assert time.monotonic() - started < 1.0
            assert not s.detached  # still registered: scheduled again as soon as a node is healthy
    warnings = [r for r in caplog.records if "no healthy node" in r.getMessage()]
    assert len(warnings) == 2  # once per session
