"""Scraping nodes: one that answers with something that is not vLLM's exposition counts as failing; a fake vLLM node
with a CPU tier hands its counters, through the real poller, to the coordinator as a `NodeUpdate`."""

import asyncio
import json
from dataclasses import asdict

import aiohttp
import pytest
from aiohttp import web

from tao_coordinator.config import CoordinatorConfig, FleetConfig, NodeConfig
from tao_coordinator.core.events import NodeUpdate
from tao_coordinator.fakevllm import FakeFleet, FakeNodeConfig
from tao_coordinator.fakevllm.model_cards import LoraModule
from tao_coordinator.fleet.poller import NodeObservation, NodePoller
from tao_coordinator.sim.node import NodeProfile, StepCoefficients
from tao_coordinator.web.service import CoordinatorService
from tests.conftest import listen_to_feed
from tests.fleet.conftest import scripted_node


async def test_a_node_answering_garbage_is_reported_unhealthy():
    async def health(request: web.Request) -> web.Response:
        return web.Response(text="")

    async def metrics(request: web.Request) -> web.Response:
        return web.Response(body=b"\xff\xfe not utf-8", content_type="text/plain")

    seen: list[NodeObservation] = []
    async with scripted_node({"/health": health, "/metrics": metrics}) as url, aiohttp.ClientSession() as http:
        node = NodeConfig(name="n", url=url, capacity_tokens=1000)
        poller = NodePoller(node, FleetConfig(unhealthy_after=2), http, seen.append)
        for _ in range(3):
            await poller.scrape_once()
    assert [o.healthy for o in seen] == [False, False]
    assert poller.failures == 3


async def test_a_cpu_tier_nodes_counters_reach_the_coordinator_as_a_node_update(tmp_path):
    """A real fake node with a CPU tier and TP 2, the real poller and coordinator service: the NodeUpdate it feeds."""
    step = StepCoefficients(tp=2, linear_floor_s=0.01, linear_per_token_s=0.0001)
    profile = NodeProfile(name="tp2-cpu", step=step, num_gpu_blocks=40)
    config = FakeNodeConfig(profile=profile, time_scale=50.0, cpu_kv_gib=0.16)
    async with FakeFleet([config], kv_events=False) as fleet:
        node = fleet.nodes[0]
        async with aiohttp.ClientSession() as http:
            texts = [f"[{tag}] " + " ".join(f"word{i % 97}" for i in range(120)) for tag in ("x1", "x2", "x3")]
            for text in [*texts, texts[0]]:  # the first prompt's blocks leave HBM, then come back from the CPU
                body = {
                    "model": config.served_model_name,
                    "max_tokens": 5,
                    "messages": [{"role": "user", "content": text}],
                }
                async with http.post(node.openai_base_url + "/chat/completions", json=body) as response:
                    assert response.status == 200
            await asyncio.sleep(0.05)
            truth = node.service.driver.engine.counters()
            coordinator = CoordinatorConfig.model_validate(
                {
                    "server": {"token": "t" * 32, "state_dir": str(tmp_path)},
                    "nodes": [{"name": "n", "url": node.url, "tensor_parallel_size": 2}],
                }
            )
            service = CoordinatorService(coordinator)
            fed: list[object] = []
            listen_to_feed(service, lambda event, actions, error: fed.append(event))
            poller = NodePoller(coordinator.nodes[0], coordinator.fleet, http, service.fleet.observe)
            await poller.scrape_once()
            await service.stop()
    update = fed[-1]
    assert isinstance(update, NodeUpdate) and update.counters is not None
    tier = node.service.profile.cpu_tier
    assert tier is not None and update.cpu_capacity_tokens == tier.num_blocks * 16 == 640
    loaded = truth.prompt_tokens_by_source["external_kv_transfer"]
    assert loaded > 0
    block_link_s = 16 * step.kv_bytes_per_token / 2 / tier.link_bytes_per_s  # one rank's slice on its own link
    assert asdict(update.counters) == dict(
        prefill_tokens_computed=truth.prompt_tokens_by_source["local_compute"],
        prefill_seconds=pytest.approx(truth.request_prefill_seconds),
        decode_tokens=truth.inter_tokens,
        decode_seconds=pytest.approx(truth.inter_token_seconds),
        generation_tokens=truth.generation_tokens,
        offload_load_tokens=loaded,
        offload_load_seconds=pytest.approx(loaded // 16 * block_link_s),
        kv_fetch_waiting=0,
    )
    assert service.coordinator.nodes["n"].cpu_capacity_tokens == 640


async def test_a_nodes_models_are_learned_at_its_first_scrape_kept_when_a_read_fails_and_read_again_on_restart():
    """A real fake node serving two names and an adapter; then its metrics from scripted nodes that restarted (a new
    `process_start_time_seconds`): one whose /v1/models fails (the last list stays), then one serving another model.
    Configured models replace what the node says."""
    config = FakeNodeConfig(
        time_scale=50,
        served_model_name="org/large",
        served_model_aliases=("large",),
        lora_modules=(LoraModule(name="team-sql", path="/adapters/sql"),),
    )
    served = frozenset({"org/large", "large", "team-sql"})
    seen: list[NodeObservation] = []
    fleet_config = FleetConfig(models_every_scrapes=100)  # only a restart asks again within this test
    async with FakeFleet([config], kv_events=False) as fleet, aiohttp.ClientSession() as http:
        poller = NodePoller(NodeConfig(name="n", url=fleet.urls[0]), fleet_config, http, seen.append)
        await poller.scrape_once()
        await poller.scrape_once()
        assert [o.models for o in seen] == [served, served]
        fenced: list[NodeObservation] = []
        node = NodeConfig(name="n", url=fleet.urls[0], models=["org/large"])
        await NodePoller(node, FleetConfig(), http, fenced.append).scrape_once()
        assert fenced[-1].models == frozenset({"org/large"})
        async with http.get(fleet.urls[0] + "/metrics") as reply:
            text = await reply.text()
    body = json.dumps({"object": "list", "data": [{"id": "org/other", "object": "model", "parent": None}]})
    for started, answer in ((1.0e9, web.Response(status=500)), (2.0e9, web.Response(text=body))):
        restarted = "\n".join(
            f"process_start_time_seconds {started}" if line.startswith("process_start_time_seconds") else line
            for line in text.splitlines()
        )
        if "process_start_time_seconds" not in restarted:
            restarted += f"\nprocess_start_time_seconds {started}\n"

        async def health(request: web.Request) -> web.Response:
            return web.Response(text="")

        async def metrics(request: web.Request, restarted: str = restarted) -> web.Response:
            return web.Response(text=restarted)

        async def models(request: web.Request, answer: web.Response = answer) -> web.Response:
            return answer

        routes = {"/health": health, "/metrics": metrics, "/v1/models": models}
        async with scripted_node(routes) as url, aiohttp.ClientSession() as http:
            poller.http, poller.node = http, NodeConfig(name="n", url=url)
            await poller.scrape_once()
    assert [o.healthy for o in seen] == [True] * 4
    assert [o.models for o in seen] == [served, served, served, frozenset({"org/other"})]
    assert poller.models_failure_counts == {"http": 1}
