"""The aiohttp application: routes, middleware, and the service's life cycle (started with the app, stopped — and
its learned state persisted — on shutdown)."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import AsyncIterator

from aiohttp import web

from ..config import CoordinatorConfig
from . import handlers
from .batch import post_events
from .errors import error_middleware
from .keys import SERVICE
from .node_sources import Reload
from .openapi import build_spec
from .service import CoordinatorService
from .standby import replica_middleware


def create_app(config: CoordinatorConfig, reload: Reload | None = None) -> web.Application:
    """The app; with `reload` (how the command line read the configuration), SIGHUP applies the file's node list
    again (`node_sources.py`)."""
    middlewares = [error_middleware, replica_middleware(lambda request: request.app[SERVICE])]
    app = web.Application(client_max_size=config.server.max_body_bytes, middlewares=middlewares)
    spec = build_spec()

    async def openapi(request: web.Request) -> web.Response:
        return web.json_response(spec)

    async def lifecycle(app: web.Application) -> AsyncIterator[None]:
        service = CoordinatorService(config, reload)
        app[SERVICE] = service
        await service.start()
        loop = asyncio.get_running_loop()
        if reload is not None:
            loop.add_signal_handler(signal.SIGHUP, service.node_sources.sighup)
        yield
        if reload is not None:
            loop.remove_signal_handler(signal.SIGHUP)
        await service.stop()

    app.cleanup_ctx.append(lifecycle)
    router = app.router
    router.add_post("/v1/sessions", handlers.post_session)
    router.add_post("/v1/sessions/{session_id}/acquire", handlers.post_acquire)
    router.add_post("/v1/sessions/{session_id}/llm_end", handlers.post_llm_end)
    router.add_post("/v1/sessions/{session_id}/tool_start", handlers.post_tool_start)
    router.add_post("/v1/sessions/{session_id}/tool_end", handlers.post_tool_end)
    router.add_post("/v1/sessions/{session_id}/heartbeat", handlers.post_heartbeat)
    router.add_delete("/v1/sessions/{session_id}", handlers.delete_session)
    router.add_post("/v1/events", post_events)
    router.add_get("/v1/nodes", handlers.get_nodes)
    router.add_post("/v1/nodes", handlers.post_node)
    router.add_delete("/v1/nodes/{name}", handlers.delete_node)
    router.add_post("/v1/nodes/{name}/drain", handlers.post_drain)
    router.add_get("/v1/sessions", handlers.get_sessions)
    router.add_get("/v1/sessions/{session_id}", handlers.get_session)
    router.add_get("/metrics", handlers.get_metrics)
    router.add_get("/healthz", handlers.get_healthz)
    router.add_get("/v1/leader", handlers.get_leader)
    router.add_get("/openapi.json", openapi)
    return app
