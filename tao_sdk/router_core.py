"""What a session's router decides, written once for the sync and the async router (`router.py`, which does the I/O).

Each exchange with the coordinator (registering, acquiring, rerouting a refused call, sending a report) is a *plan*:
a generator that yields what it needs done — `Send` a request (the answer is sent back in, a transport error thrown
in where the plan waits), `Pause`, or `FLUSH` the reports queued before it — and returns the exchange's result.
`SyncRouter` runs a plan with blocking calls, `AsyncRouter` with awaits: the decisions, their order and their
bounds (`router.py` states them) are the same because they are this code.

Reports (`llm_end`, tool events, heartbeats) are built here as `QueuedReport`s, for the router to queue; a router sends
them one at a time, in order, each with `report_plan`. A tool report given the moment its tool started or ended
(`happened`, on the monotonic clock: `tao proxy` gives the wire's moment, or a hook's) carries `age_s`, the time
since, computed when it is sent: the time it waited in the queue is not counted as the tool's.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeVar

import httpx2

from .calls import CONVERGE, REGISTER, REPORT_ERRORS, Attempt, Calls, Grant, Step, check
from .protocol import MAX_AGE_S, ToolHints
from .queue_state import GiveUp, LongQueue
from .replicas import Failover, NotLeader, not_leader

__all__ = ["FLUSH", "Flush", "Pause", "Plan", "QueuedReport", "RouterCore", "Send"]

Result = TypeVar("Result")
"""What a plan returns."""


@dataclass(frozen=True)
class Send:
    """Send this request; the plan gets the `httpx2.Response`, or the error the client raised."""

    method: str
    url: str
    body: Any
    headers: dict[str, str]


@dataclass(frozen=True)
class Pause:
    """Wait this long before going on (between two replicas, while the leader moves)."""

    seconds: float


@dataclass(frozen=True)
class Flush:
    """Wait until every report queued so far has been sent."""


FLUSH = Flush()

Plan = Generator[Send | Pause | Flush, Any, Result]


class QueuedReport(NamedTuple):
    """A report to send in the background."""

    method: str
    path: str
    body: Any = None
    happened: float | None = None
    """For a tool start or end: when it happened (`time.monotonic()`); None: when it is sent."""


def aged(body: Any, happened: float | None) -> Any:
    """`body` with its `age_s`, the time since `happened` (plus any age it carries), as of now."""
    if happened is None:
        return body
    age = max(0.0, time.monotonic() - happened) + body.get("age_s", 0.0)
    return {**body, "age_s": round(min(age, MAX_AGE_S), 4)}


class RouterCore(Calls, ABC):
    """The plans of a session's exchanges with the coordinator; subclasses run them and queue the reports."""

    @abstractmethod
    def retry_in_background(self, now: float) -> None:
        """While detached and due (`retry_due`): try the coordinator again without making the caller wait (a thread
        in the sync router, a task in the async one)."""

    # -- plans -----------------------------------------------------------------------------------------------------

    def register_plan(self) -> Plan[None]:
        if not self.has_coordinator:
            return
        try:
            yield from self._ensure_registered()
        except REPORT_ERRORS as error:
            self.detach(error, time.monotonic())

    def acquire_plan(
        self,
        expected_tokens: int | None,
        agent_step: Step | None = None,
        model: str | None = None,
        give_up: GiveUp | None = None,
    ) -> Plan[Grant]:
        """A node for the next model call; `agent_step` (else the session's, `SessionState.step`) and the `model` it
        names go with it. `give_up`, asked after each waiting answer, stops the wait with `LongQueue` when it says so
        (the coordinator keeps the session's place in its queue)."""
        yield FLUSH
        attempt = Attempt(time.monotonic())
        if not self.has_coordinator or self.state.detached_at is not None:
            self.retry_in_background(attempt.started)
            return self.fallback()
        try:
            yield from self._ensure_registered()
            while (body := self.acquire_body(expected_tokens, attempt, agent_step, model=model)) is not None:
                step = self.answered(*(yield from self._post(self.session_path("acquire"), body)), attempt)
                if isinstance(step, Grant):
                    return step
                if step == REGISTER:
                    yield from self._ensure_registered()
                elif step == CONVERGE:
                    for verb, report in attempt.closing:
                        yield from self._post(self.session_path(verb), report)
                elif give_up is not None and (queue := self.state.queue) is not None and give_up(queue):
                    raise LongQueue(queue)
        except REPORT_ERRORS as error:
            self.detach(error, time.monotonic())
            return self.fallback()
        finally:
            self.state.queue = None
        return self.fallback("no place was free within max_wait_s")

    def reroute_plan(
        self, refused: Grant, how: str, expected_tokens: int | None, model: str | None = None
    ) -> Plan[Grant | None]:
        """Where a call `refused`'s node refused goes instead (None: nowhere, the caller gets the refusal)."""
        self.refusal_noted(refused, how)
        if refused.detached or not self.has_coordinator or self.state.detached_at is not None:
            return self.fallback_after(refused)
        yield FLUSH  # the refusal's report goes first: the refused call ends before its retry is placed
        try:
            yield from self._ensure_registered()
            body = self.acquire_body(expected_tokens, Attempt(time.monotonic()), avoid=refused.node, model=model)
            return self.rerouted(*(yield from self._post(self.session_path("acquire"), body)), refused)
        except REPORT_ERRORS as error:
            self.detach(error, time.monotonic())
            return self.fallback_after(refused)

    def report_plan(self, method: str, path: str, body: Any = None, happened: float | None = None) -> Plan[None]:
        """Send one report; a refused tool_start is sent again after the reports that converge the session."""
        now = time.monotonic()
        if not self.state.registered:
            return
        try:
            response = yield from self._leader_request(method, path, aged(body, happened))
            answer = check(response)
            self.state.heartbeat_due = now + self.state.lease_ttl_s / 3
            if closing := self.resend_after(path, response.status_code, answer):
                for verb, report in closing:
                    yield from self._post(self.session_path(verb), report)
                check((yield from self._leader_request(method, path, aged(body, happened))))
        except REPORT_ERRORS as error:
            self.detach(error, now)

    def _leader_request(self, method: str, path: str, body: Any = None, api: bool = False) -> Plan[httpx2.Response]:
        """The answer of the replica that answers as leader, following the leader (`Calls.failover`)."""
        trial = Failover()
        while True:
            url = self.state.replicas.leader
            failure: BaseException | NotLeader
            try:
                response = yield Send(method, url + path, body, self.headers(api))
            except httpx2.TransportError as error:
                failure = error
            else:
                if (refusal := not_leader(response)) is None:
                    self.reached(url)
                    return response  # type: ignore[no-any-return]
                failure = refusal
            if pause := self.failover(trial, url, failure):
                yield Pause(pause)

    def _post(self, path: str, body: Any = None, api: bool = False) -> Plan[tuple[int, Any]]:
        response = yield from self._leader_request("POST", path, body, api)
        return response.status_code, check(response)

    def _ensure_registered(self) -> Plan[None]:
        if not self.state.registered:
            self.registered(*(yield from self._post("/v1/sessions", self.register_body(), api=True)))

    # -- reports ---------------------------------------------------------------------------------------------------

    def llm_end_report(self, grant: Grant, usage: Any, duration_s: float) -> QueuedReport | None:
        if grant.detached:
            return None
        return QueuedReport("POST", self.session_path("llm_end"), self.llm_end_body(grant, usage, duration_s))

    def tool_start_report(
        self, call_id: str, tool: str, hints: ToolHints, program: str | None, happened: float | None = None
    ) -> QueuedReport:
        body = self.tool_start_body(call_id, tool, hints, program)
        return QueuedReport("POST", self.session_path("tool_start"), body, happened)

    def tool_end_report(
        self, call_id: str, duration_s: float | None, status: str, happened: float | None = None
    ) -> QueuedReport:
        return QueuedReport(
            "POST", self.session_path("tool_end"), self.tool_end_body(call_id, duration_s, status), happened
        )

    def heartbeat_report(self) -> QueuedReport | None:
        """A heartbeat when one is due; while detached, a background retry of the coordinator instead."""
        now = time.monotonic()
        if self.state.detached_at is not None:
            self.retry_in_background(now)
        elif now >= self.state.heartbeat_due:
            return QueuedReport("POST", self.session_path("heartbeat"))
        return None
