"""Learning a node's served models from `GET /v1/models` (`fleet/served_models.py`): against real fake vLLM nodes on
loopback (several names and a LoRA adapter; one name), and against nodes answering what no vLLM lists — each failure
named by its kind."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest
from aiohttp import web

from tao_coordinator.fakevllm import FakeFleet, FakeNodeConfig
from tao_coordinator.fakevllm.model_cards import LoraModule
from tao_coordinator.fleet.served_models import (
    LoraAdapter,
    ModelsUnknown,
    ServedModels,
    fetch_served_models,
    parse_models,
)
from tao_coordinator.local_coordinator import free_port
from tests.fleet.conftest import scripted_node

LARGE = FakeNodeConfig(
    time_scale=50,
    served_model_name="Qwen/Qwen3-32B",
    served_model_aliases=("qwen-large",),
    model="/models/Qwen3-32B",
    lora_modules=(LoraModule(name="team-sql", path="/adapters/sql"),),
)
SMALL = FakeNodeConfig(time_scale=50, served_model_name="Qwen/Qwen3-4B")


async def test_a_real_node_s_models_are_learned() -> None:
    async with FakeFleet([LARGE, SMALL], kv_events=False) as fleet, aiohttp.ClientSession() as http:
        large, small = [await fetch_served_models(http, url, timeout_s=5.0) for url in fleet.urls]
        limit = fleet.nodes[0].service.max_model_len
    assert large == ServedModels(("Qwen/Qwen3-32B", "qwen-large"), (LoraAdapter("team-sql", "Qwen/Qwen3-32B"),), limit)
    assert large.names == {"Qwen/Qwen3-32B", "qwen-large", "team-sql"}
    assert "team-sql" in large.names and "qwen-large" in large.names and "Qwen/Qwen3-4B" not in large.names
    assert small.base_names == ("Qwen/Qwen3-4B",) and small.adapters == () and "team-sql" not in small.names


async def test_an_adapter_loaded_at_run_time_is_learned_at_the_next_fetch() -> None:
    config = SMALL.model_copy(update={"allow_runtime_lora_updating": True})
    async with FakeFleet([config], kv_events=False) as fleet, aiohttp.ClientSession() as http:
        [url] = fleet.urls
        before = await fetch_served_models(http, url, timeout_s=5.0)
        load = {"lora_name": "team-go", "lora_path": "/adapters/go"}
        async with http.post(url + "/v1/load_lora_adapter", json=load) as reply:
            assert reply.status == 200
        after = await fetch_served_models(http, url, timeout_s=5.0)
    assert "team-go" not in before.names
    assert after.adapters == (LoraAdapter("team-go", "Qwen/Qwen3-4B"),) and "team-go" in after.names


def _list(*cards: object) -> str:
    return json.dumps({"object": "list", "data": list(cards)})


@pytest.mark.parametrize(
    ("body", "kind", "reason"),
    [
        ("<html>busy</html>", "malformed", "not JSON"),
        (b"\xff\xfe{", "malformed", "not JSON"),
        ('["Qwen"]', "malformed", "no `data` array"),
        ('{"object": "list"}', "malformed", "no `data` array"),
        ('{"data": {"id": "m"}}', "malformed", "no `data` array"),
        (_list(), "empty", "lists no model"),
        (_list("m"), "malformed", "card 0 is not an object"),
        (_list({"object": "model"}), "malformed", "card 0 has no model name"),
        (_list({"id": ""}), "malformed", "card 0 has no model name"),
        (_list({"id": "m"}, {"id": 7}), "malformed", "card 1 has no model name"),
        (_list({"id": "m", "parent": 3}), "malformed", "`parent` that is not a model name"),
        (_list({"id": "m", "max_model_len": "32k"}), "malformed", "`max_model_len` that is not a length"),
        (_list({"id": "m", "max_model_len": 0}), "malformed", "`max_model_len` that is not a length"),
        (_list({"id": "m", "max_model_len": True}), "malformed", "`max_model_len` that is not a length"),
        (_list({"id": "m"}, {"id": "m", "parent": "m"}), "malformed", "lists the model 'm' twice"),
        (_list({"id": "a", "parent": "m"}), "malformed", "adapters but no base model"),
    ],
)
def test_what_is_not_a_model_list_is_refused_by_kind(body: str | bytes, kind: str, reason: str) -> None:
    with pytest.raises(ModelsUnknown, match=reason) as caught:
        parse_models(body)
    assert caught.value.kind == kind


def test_another_server_s_shorter_cards_read_as_base_models() -> None:
    """SGLang-like cards (no `parent`, no `max_model_len`) are base models of unknown length; extra fields are
    ignored; several base models keep their order and the longest length."""
    assert parse_models(_list({"id": "m", "owned_by": "sglang"})) == ServedModels(("m",))
    several = parse_models(_list({"id": "a", "max_model_len": 10}, {"id": "b", "max_model_len": 20, "parent": None}))
    assert several == ServedModels(("a", "b"), (), 20)


async def test_a_node_that_answers_badly_is_named_by_kind() -> None:
    async def keyed(request: web.Request) -> web.Response:
        return web.json_response({"error": "Unauthorized"}, status=401)

    async def broken(request: web.Request) -> web.Response:
        return web.json_response({"error": "no"}, status=500)

    async def late(request: web.Request) -> web.Response:
        await asyncio.sleep(2)
        return web.json_response({"data": [{"id": "m"}]})

    async def garbage(request: web.Request) -> web.Response:
        return web.Response(text="not json", content_type="text/plain")

    routes = {
        "/keyed/v1/models": keyed,
        "/broken/v1/models": broken,
        "/late/v1/models": late,
        "/garbage/v1/models": garbage,
    }
    found: dict[str, str] = {}
    async with scripted_node(routes) as url, aiohttp.ClientSession() as http:
        for name in ("keyed", "broken", "late", "garbage"):
            with pytest.raises(ModelsUnknown) as caught:
                await fetch_served_models(http, f"{url}/{name}", timeout_s=0.3)
            found[name] = caught.value.kind
        with pytest.raises(ModelsUnknown) as closed:
            await fetch_served_models(http, f"http://127.0.0.1:{free_port()}", timeout_s=1.0)
    assert found == {"keyed": "unauthorized", "broken": "http", "late": "timeout", "garbage": "malformed"}
    assert closed.value.kind == "unreachable" and closed.value.reason.startswith("cannot connect")
