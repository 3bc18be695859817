"""A scripted HTTP server on loopback standing in for a node whose answers a test chooses (a real aiohttp server,
not a mock: the poller and the prober reach it over TCP)."""

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

from aiohttp import web

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@asynccontextmanager
async def scripted_node(routes: dict[str, Handler]) -> AsyncIterator[str]:
    """Serve `routes` (path → handler, GET) on a free loopback port; yields the base URL."""
    app = web.Application()
    for path, handler in routes.items():
        app.router.add_get(path, handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()
