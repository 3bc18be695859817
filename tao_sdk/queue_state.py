"""Where a session's waiting model call stands in the coordinator's queue, as its latest `waiting` answer said.

A call that finds no free place long-polls its acquire (`router.py`); each `waiting` answer carries the session's
position among the waiting sessions and an estimate of the wait (the coordinator's `core/queue.py` says how both are
reckoned). The session keeps the latest as `Session.queue` while a call waits (None otherwise), calls
`SessionConfig.on_queue` with each one, and a granted call keeps the first it saw (`Grant.queued`), which `tao proxy`
passes on as response headers. Invariant: a callback that raises is logged and otherwise ignored, so watching the
queue never changes how a call is routed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from .protocol import AcquireResponse

log = logging.getLogger("tao_sdk")


@dataclass(frozen=True)
class QueueState:
    position: int | None
    """1 for the session that has waited longest; None when the coordinator did not say (an older one)."""
    estimated_wait_s: float | None
    """Seconds until a place, as estimated when the answer was given; None until the coordinator has measured how
    fast its queue is served."""
    updated_at: float
    """Unix time of the answer."""


class LongQueue(Exception):
    """An acquire stopped waiting because its caller's bound on the estimated wait was exceeded; the session keeps its
    place in the queue (the coordinator still holds the acquire), and the next acquire takes it up."""

    def __init__(self, queue: QueueState) -> None:
        super().__init__(f"estimated wait {queue.estimated_wait_s} s at position {queue.position}")
        self.queue = queue


QueueCallback = Callable[[QueueState], object]
GiveUp = Callable[[QueueState], bool]
"""Asked after each waiting answer: True stops waiting with `LongQueue`."""


def queue_state(answer: AcquireResponse) -> QueueState:
    return QueueState(answer.queue_position, answer.estimated_wait_s, time.time())


def tell(callback: QueueCallback | None, queue: QueueState) -> None:
    if callback is None:
        return
    try:
        callback(queue)
    except Exception:
        log.exception("tao: the on_queue callback raised; the call keeps waiting")
