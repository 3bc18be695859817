"""Waiting queues of the two vLLM scheduling policies (vLLM `sched/request_queue.py`).

fcfs: arrival (submit) order; a preempted request goes back to the very front.
priority: a heap on (priority, arrival time, submit order), lower first; a preempted request simply re-enters the heap.
Invariant: a request is in the queue at most once; `peek` is what `pop` would return.
"""

from __future__ import annotations

import heapq
from collections import deque
from typing import Literal, Protocol

from .request import LiveRequest

SchedulingPolicy = Literal["fcfs", "priority"]


class WaitingQueue(Protocol):
    def __len__(self) -> int: ...
    def add(self, request: LiveRequest) -> None: ...
    def requeue_preempted(self, request: LiveRequest) -> None: ...
    def return_skipped(self, requests: list[LiveRequest]) -> None: ...
    def peek(self) -> LiveRequest | None: ...
    def pop(self) -> LiveRequest: ...
    def remove(self, request: LiveRequest) -> None: ...


class FcfsQueue:
    def __init__(self) -> None:
        self._queue: deque[LiveRequest] = deque()

    def __len__(self) -> int:
        return len(self._queue)

    def add(self, request: LiveRequest) -> None:
        self._queue.append(request)

    def requeue_preempted(self, request: LiveRequest) -> None:
        self._queue.appendleft(request)

    def return_skipped(self, requests: list[LiveRequest]) -> None:
        """Put back requests popped and skipped by one scheduling pass, at the front, in their order."""
        self._queue.extendleft(reversed(requests))

    def peek(self) -> LiveRequest | None:
        return self._queue[0] if self._queue else None

    def pop(self) -> LiveRequest:
        return self._queue.popleft()

    def remove(self, request: LiveRequest) -> None:
        self._queue.remove(request)


class PriorityQueue:
    def __init__(self) -> None:
        self._heap: list[tuple[int, float, int, LiveRequest]] = []

    def __len__(self) -> int:
        return len(self._heap)

    def add(self, request: LiveRequest) -> None:
        heapq.heappush(self._heap, (request.spec.priority, request.arrival, request.submit_order, request))

    def requeue_preempted(self, request: LiveRequest) -> None:
        self.add(request)

    def return_skipped(self, requests: list[LiveRequest]) -> None:
        for request in requests:
            self.add(request)

    def peek(self) -> LiveRequest | None:
        return self._heap[0][3] if self._heap else None

    def pop(self) -> LiveRequest:
        return heapq.heappop(self._heap)[3]

    def remove(self, request: LiveRequest) -> None:
        self._heap = [entry for entry in self._heap if entry[3] is not request]
        heapq.heapify(self._heap)


def make_waiting_queue(policy: SchedulingPolicy) -> WaitingQueue:
    if policy == "fcfs":
        return FcfsQueue()
    if policy == "priority":
        return PriorityQueue()
    raise ValueError(f"scheduling policy: expected 'fcfs' or 'priority', got {policy!r}")
