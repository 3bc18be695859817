"""Serving the coordinator's app on a listening socket, with the connection limits of `ServerConfig`.

Invariants, per open connection: it is closed once it has had no request in progress for `idle_timeout_s` — idle
between requests, or still sending its first request line and headers; a request has at most `MAX_HEADERS` header
lines of at most `MAX_FIELD_BYTES` bytes each (aiohttp answers 400 past them); its body is read within
`body_timeout_s` (`body.py`, 408 past it) and at most `max_body_bytes` long; the unread rest of a body is drained
for at most `LINGER_S` before the connection closes. At most `max_connections` connections are open (plus at most
one accept burst, the listen backlog); one past it is closed as soon as it is accepted, before anything is read.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from typing import Any

from aiohttp import web

from tao_sdk.listening import BACKLOG

from ..config import ServerConfig

MAX_HEADERS = 32
MAX_FIELD_BYTES = 4096
LINGER_S = 1.0


def runner(app: web.Application, config: ServerConfig, **options: Any) -> web.AppRunner:
    return web.AppRunner(
        app,
        keepalive_timeout=config.idle_timeout_s,
        max_headers=MAX_HEADERS,
        max_field_size=MAX_FIELD_BYTES,
        max_line_size=MAX_FIELD_BYTES,
        lingering_time=LINGER_S,
        **options,
    )


class _Refused(asyncio.Protocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport.close()


class LimitedSite(web.BaseSite):
    """A site on an already listening socket that refuses connections past `max_connections`."""

    __slots__ = ("_max_connections", "_sock", "refused")

    def __init__(self, runner: web.BaseRunner, sock: socket.socket, max_connections: int) -> None:
        super().__init__(runner, backlog=BACKLOG)
        self._sock = sock
        self._max_connections = max_connections
        self.refused = 0

    @property
    def name(self) -> str:
        host, port = self._sock.getsockname()[:2]
        return f"http://{host}:{port}"

    async def start(self) -> None:
        await super().start()
        server = self._runner.server
        assert server is not None

        def accept() -> asyncio.BaseProtocol:
            if len(server.connections) >= self._max_connections:
                self.refused += 1
                return _Refused()
            return server()

        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(accept, sock=self._sock, backlog=self._backlog)


def serve(app: web.Application, config: ServerConfig, sock: socket.socket) -> None:
    """Serve until SIGINT or SIGTERM, then shut down gracefully (the app's cleanup persists what it learned)."""

    async def main() -> None:
        running = runner(app, config, handle_signals=True)
        await running.setup()
        try:
            await LimitedSite(running, sock, config.max_connections).start()
            await asyncio.Event().wait()
        finally:
            await running.cleanup()

    with contextlib.suppress(web.GracefulExit, KeyboardInterrupt):
        asyncio.run(main())
