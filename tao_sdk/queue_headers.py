"""How `tao proxy` tells a harness about the coordinator's queue: headers on the answer of a call that waited for a
place, and, past a bound the operator sets, a 429 the harness retries.

Headers: `x-tao-queue-position` (the position of the call's first waiting answer, `queue_state.py`) and
`x-tao-estimated-wait` (that answer's estimate, in seconds; left out while the coordinator has none). A call that
did not wait carries neither.

429 (`tao proxy --max-queue-wait-s`, off by default): when a waiting answer estimates the wait above the bound, the
call is answered at once with 429, `Retry-After` and `x-should-retry: true`, and an error body both the OpenAI and
the Anthropic clients parse (`rate_limit_error`). The session keeps its place: the coordinator holds its acquire,
and the retry's acquire takes it up (or is granted at once if the place came meanwhile). `Retry-After` is the
estimate less the bound — the retry comes back when about the bound is left, and then waits for its place — rounded
up to whole seconds (Claude Code reads whole seconds), at least 1 and at most a third of the session's lease (the
proxy heartbeats when it answers 429, so the lease outlives the back-off) and 120 s. How harnesses retry a 429 (read
in their code): Claude Code 2.1.197 retries up to 10 times (`CLAUDE_CODE_MAX_RETRIES`), each after
max(Retry-After, its own back-off); the OpenAI Python SDK (3.63) retries twice by default and not at all when
Retry-After is above 120 s; the Anthropic Python SDK (2.17) retries twice by default, after Retry-After. A client
that runs out of retries shows the 429 to the agent, so the bound should leave the wait to a few retries.
"""

from __future__ import annotations

import math

from aiohttp import web

from .queue_state import QueueState

POSITION_HEADER = "x-tao-queue-position"
WAIT_HEADER = "x-tao-estimated-wait"
RETRY_AFTER_MAX_S = 120
"""The longest Retry-After the OpenAI SDKs still retry after."""


def queue_headers(queue: QueueState | None) -> dict[str, str]:
    if queue is None:
        return {}
    headers = {}
    if queue.position is not None:
        headers[POSITION_HEADER] = str(queue.position)
    if queue.estimated_wait_s is not None:
        headers[WAIT_HEADER] = f"{queue.estimated_wait_s:.1f}"
    return headers


def retry_after_s(queue: QueueState, bound_s: float, lease_ttl_s: float) -> int:
    """When the harness should come back: once about `bound_s` of the estimated wait is left."""
    left = (queue.estimated_wait_s or 0.0) - bound_s
    return max(1, min(math.ceil(left), RETRY_AFTER_MAX_S, math.floor(lease_ttl_s / 3)))


def queue_full(queue: QueueState, bound_s: float, lease_ttl_s: float) -> web.Response:
    message = (
        f"the fleet is full: position {queue.position} in the queue, about {queue.estimated_wait_s:.0f} s to wait "
        f"(more than {bound_s:g} s); the session keeps its place, retry after the Retry-After header"
    )
    headers = {
        **queue_headers(queue),
        "Retry-After": str(retry_after_s(queue, bound_s, lease_ttl_s)),
        "x-should-retry": "true",
    }
    body = {"type": "error", "error": {"type": "rate_limit_error", "message": message}}
    return web.json_response(body, status=429, headers=headers)
