"""What counts as a node refusing a model call, and the one retry a refused call gets.

A node refused a call when it answered none of it: the connection was refused (a killed node) or broke before the
response began, or the answer is HTTP 503 (vLLM's queue is full, its engine is down) or 429. Such a call never ran,
so it is safe to send again. It is reported (`llm_end` with `refused`: the coordinator counts it against the node,
and moves the session's place), then sent once more, to another node: the one the coordinator names when asked to
avoid the refuser (`AcquireRequest.avoid_nodes`), else — the coordinator away, or unable to say — another node of
the fail-open list (`Calls.fallback_after`). With no other node, the caller gets the refusal as it came. The second
node's answer, whatever it is, is the call's answer: a call is retried at most once.

A call whose answer has begun (a status other than 503/429 arrived) is never sent again: the client would see part
of it twice. This module is the rule; `transport.py` (httpx2, sync and async) and `proxy.py` (aiohttp) apply it to
their own I/O, and the routers (`router.py`) carry out the retry's acquire.
"""

from __future__ import annotations

import httpx2

from .calls import describe

REFUSAL_STATUSES = frozenset({429, 503})

_REFUSING_ERRORS = (
    httpx2.ConnectError,
    httpx2.ConnectTimeout,
    httpx2.RemoteProtocolError,
    httpx2.ReadError,
    httpx2.WriteError,
)
"""httpx2's errors of a request that got no response: a read timeout is not one of them (the node may be working)."""


def refused_status(status: int) -> str | None:
    """How an answer with `status` refused its call (`HTTP 503`), or None when it is an answer."""
    return f"HTTP {status}" if status in REFUSAL_STATUSES else None


def httpx_refusal(error: BaseException) -> str | None:
    """How an httpx2 error raised before any response refused the call, or None when it is not a refusal."""
    return describe(error) if isinstance(error, _REFUSING_ERRORS) else None
