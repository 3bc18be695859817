"""The probe of a demoted node (`fleet/probe.py`) against real fake vLLM nodes: a node whose `/health` answers 200
while it refuses every call is not serving; one that answers a one-token call is; a closed port is not."""

import asyncio

import aiohttp
from aiohttp import web

from tao_coordinator.fakevllm import FakeFleet, FakeNodeConfig
from tao_coordinator.fleet.probe import NodeProber, probe
from tao_coordinator.local_coordinator import free_port
from tests.fleet.conftest import scripted_node

FAST = FakeNodeConfig(time_scale=50)


async def test_only_a_node_that_answers_a_model_call_serves():
    async with FakeFleet([FAST, FAST.model_copy(update={"max_num_queued_reqs": 0})], kv_events=False) as fleet:
        serving, refusing = fleet.urls
        async with aiohttp.ClientSession() as http:
            async with http.get(refusing + "/health") as health:
                assert health.status == 200
            assert await probe(http, serving) is None
            assert await probe(http, refusing) == "a one-token completion answered 503"
            closed = await probe(http, f"http://127.0.0.1:{free_port()}", timeout_s=1.0)
            assert closed is not None and closed.startswith("ClientConnectorError")


async def test_a_node_that_wants_an_api_key_counts_as_serving_and_each_answer_is_reported_once():
    async def refused(request: web.Request) -> web.Response:
        return web.json_response({"error": "Unauthorized"}, status=401)

    reports = []
    async with scripted_node({"/v1/models": refused}) as keyed:
        prober = NodeProber({"keyed": keyed, "gone": f"http://127.0.0.1:{free_port()}"}, reports.append)
        try:
            prober.start("keyed")
            prober.start("keyed")  # one probe at a time per node
            prober.start("gone")
            prober.start("unknown")  # no URL: nothing is sent
            while prober.running:
                await asyncio.sleep(0.01)
        finally:
            await prober.stop()
    by_node = {report.node_id: report for report in reports}
    assert len(reports) == 2 and by_node["keyed"].serves and not by_node["gone"].serves
    assert by_node["gone"].detail


async def test_a_node_whose_model_list_names_no_model_is_not_serving():
    async def empty(request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": []})

    async with scripted_node({"/v1/models": empty}) as listless, aiohttp.ClientSession() as http:
        assert await probe(http, listless) == "/v1/models lists no model"
