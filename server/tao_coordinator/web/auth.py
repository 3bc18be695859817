"""Who may call what. Registration and fleet-wide reads need an API bearer token (`server.token`, named
`default`, or one of `[[tokens]]`); everything about one session needs that session's own token, handed out at
registration — no other token, not even an API one, acts on it. With `insecure_no_auth` (allowed on loopback only)
nothing is checked.

Changing the fleet (`POST /v1/nodes`, `DELETE /v1/nodes/{name}`, `POST /v1/nodes/{name}/drain`) is the operator's:
it needs `server.token` itself (`require_operator`); a token of `[[tokens]]` is refused with 403.

Who registers is the API token's name (`require_api`): the caps of `caps.py` are counted per name. Without auth a
caller is `anonymous` — all of them together, since on loopback every client has the same address — unless it
sends a configured API token, which then counts as that token.

Invariants: without a session's token, a caller cannot tell whether a session id exists — an unknown id and
another session's id get the same answer (401 without a token, 403 with any other); only a token issued for that
id (`tokens.py`) learns that the session is gone (404). An `Authorization` header that is not one ASCII
`Bearer <token>` is a 401 naming the problem.
"""

from __future__ import annotations

import hmac

from aiohttp import hdrs, web

from ..config import DEFAULT_TOKEN_NAME
from .errors import RequestError
from .keys import SERVICE

FOREIGN = "this token may not act on this session (it is not the session's token, or no such session exists)"
ANONYMOUS = "anonymous"
"""Who registers without auth (`insecure_no_auth`) and without a configured API token."""


def bearer(request: web.Request) -> str | None:
    headers = request.headers.getall(hdrs.AUTHORIZATION, [])
    if not headers:
        return None
    if len(headers) > 1:
        raise RequestError(401, f"one Authorization header expected, got {len(headers)}", "Authorization")
    header = headers[0]
    if not header.isascii() or not header.isprintable():
        raise RequestError(401, "the Authorization header must be printable ASCII: 'Bearer <token>'", "Authorization")
    scheme, _, token = header.partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


def _matches(given: str | None, expected: str | None) -> bool:
    if given is None or expected is None or not given.isascii():
        return False
    return hmac.compare_digest(given.encode(), expected.encode())


def require_api(request: web.Request) -> str:
    """The name of the API token the request carries (`anonymous` without auth); 401 if it carries none that is
    valid and auth is on."""
    config = request.app[SERVICE].config
    insecure = config.server.insecure_no_auth
    try:
        given = bearer(request)
    except RequestError:
        if not insecure:
            raise
        given = None
    matched = ANONYMOUS
    for name, token in config.api_tokens().items():  # every one compared: the time taken tells nothing
        if _matches(given, token):
            matched = name
    if matched == ANONYMOUS and not insecure:
        raise RequestError(401, "a valid API bearer token is required", "Authorization")
    return matched


def require_operator(request: web.Request) -> None:
    """401 without a valid API token, 403 with one that is not the operator's (`server.token`); without auth
    nothing is checked."""
    name = require_api(request)
    if request.app[SERVICE].config.server.insecure_no_auth:
        return
    if name != DEFAULT_TOKEN_NAME:
        raise RequestError(403, "changing the fleet needs the operator's token (server.token)", "Authorization")


def require_session(request: web.Request, session_id: str, token: str | None = None) -> None:
    service = request.app[SERVICE]
    if service.config.server.insecure_no_auth:
        return
    given = token if token is not None else bearer(request)
    if given is None:
        raise RequestError(401, "this session's bearer token is required", "Authorization")
    live = service.session_tokens.get(session_id)
    if live is not None:
        if _matches(given, live):
            return
    elif given.isascii() and service.tokens.proves(session_id, given):
        raise RequestError(404, f"session {session_id!r} is closed or expired; register it again", "session_id")
    raise RequestError(403, FOREIGN, "Authorization")
