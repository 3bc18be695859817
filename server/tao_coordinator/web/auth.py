"""Who may call what. Registration and fleet-wide reads need the API bearer token; everything about one session
needs that session's own token, handed out at registration — no other token, not even the API's, acts on it.
With `insecure_no_auth` (allowed on loopback only) nothing is checked."""

from __future__ import annotations

import hmac

from aiohttp import web

from .errors import RequestError
from .keys import SERVICE


def bearer(request: web.Request) -> str | None:
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


def _matches(given: str | None, expected: str | None) -> bool:
    return given is not None and expected is not None and hmac.compare_digest(given.encode(), expected.encode())


def require_api(request: web.Request) -> None:
    config = request.app[SERVICE].config.server
    if config.insecure_no_auth:
        return
    if not _matches(bearer(request), config.token):
        raise RequestError(401, "a valid API bearer token is required", "Authorization")


def require_session(request: web.Request, session_id: str, token: str | None = None) -> None:
    service = request.app[SERVICE]
    if service.config.server.insecure_no_auth:
        return
    if session_id not in service.session_tokens:
        raise RequestError(404, f"unknown session {session_id!r}", "session_id")
    given = token if token is not None else bearer(request)
    if not _matches(given, service.session_tokens[session_id]):
        raise RequestError(403, "this token may not act on this session", "Authorization")
