"""Scraping a node that answers, but with something that is not vLLM's exposition: it counts as failing."""

import aiohttp
from aiohttp import web

from tao_coordinator.config import FleetConfig, NodeConfig
from tao_coordinator.fleet.poller import NodeObservation, NodePoller


async def test_a_node_answering_garbage_is_reported_unhealthy():
    async def health(request: web.Request) -> web.Response:
        return web.Response(text="")

    async def metrics(request: web.Request) -> web.Response:
        return web.Response(body=b"\xff\xfe not utf-8", content_type="text/plain")

    app = web.Application()
    app.router.add_get("/health", health)
    app.router.add_get("/metrics", metrics)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    seen: list[NodeObservation] = []
    node = NodeConfig(name="n", url=f"http://127.0.0.1:{runner.addresses[0][1]}", capacity_tokens=1000)
    try:
        async with aiohttp.ClientSession() as http:
            poller = NodePoller(node, FleetConfig(unhealthy_after=2), http, seen.append)
            for _ in range(3):
                await poller.scrape_once()
    finally:
        await runner.cleanup()
    assert [o.healthy for o in seen] == [False, False]
    assert poller.failures == 3
