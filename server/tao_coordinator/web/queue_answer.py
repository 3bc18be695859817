"""The answer to an acquire that still waits: where the session stands in the queue and how long it may wait, as
the core reckons them (`core/queue.py`). Both are left out when the core has none (no service seen yet, or the
session no longer waits), and a client that does not know them ignores them (`tao_sdk/protocol.py`)."""

from __future__ import annotations

from typing import Any

from tao_sdk import protocol

from ..core.coordinator import Coordinator


def waiting_answer(coordinator: Coordinator, session_id: str, now: float) -> protocol.AcquireResponse:
    standing = coordinator.queue_position(session_id, now)
    if standing is None:
        return protocol.AcquireResponse(status="waiting")
    wait = standing.estimated_wait_s
    return protocol.AcquireResponse(
        status="waiting",
        queue_position=standing.position,
        estimated_wait_s=None if wait is None else round(wait, 3),
    )


QUEUE_FIELDS = ("queue_position", "estimated_wait_s")


def acquire_body(answer: protocol.AcquireResponse) -> dict[str, Any]:
    """An acquire's answer as JSON: the queue's fields only when they say something, so an admitted answer reads as
    it did before they existed."""
    return answer.model_dump(mode="json", exclude={name for name in QUEUE_FIELDS if getattr(answer, name) is None})
