"""The HTTP face of a replica (`replica.py`): writes are served by the leader only, once what they changed is stored.

Invariants: with `--redis`, a write under `/v1/` is handed to its handler only while this replica serves as leader,
and answered only once everything it changed is in Redis; otherwise the answer is 421 (`ErrorBody` with code
`not_leader` and the leader last seen, also in the `X-TAO-Leader` header), which clients follow. Reads are always
served. Without `--redis` this middleware passes everything through.
"""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from tao_sdk import protocol

from .errors import json_error
from .replica import NotServing, Replica
from .service import CoordinatorService

READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def not_leader(replica: Replica, reason: str = "this coordinator is a standby") -> web.Response:
    """421 with the leader this replica last saw, so the client sends the request there."""
    leader = replica.leader_url
    if leader == replica.advertise_url:
        leader = None  # we are deposed: whoever leads next is not known yet
    return json_error(421, f"{reason}; send writes to the leader", code=protocol.NOT_LEADER, leader=leader)


def replica_middleware(service_of: Callable[[web.Request], CoordinatorService]) -> Middleware:
    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        replica = service_of(request).replica
        if replica is None or request.method in READ_METHODS or not request.path.startswith("/v1/"):
            return await handler(request)
        if not replica.serving:
            return not_leader(replica)
        try:
            response = await handler(request)
            await replica.durable()
        except NotServing as error:
            return not_leader(replica, f"this coordinator stopped leading ({error})")
        return response

    return middleware
