"""The SDK's side of the protocol: one session's calls to the coordinator, failing open and converging.

Fail-open rules (docs/sdk.md#failing-open): every call to the coordinator has a short bound (`connect_timeout_s`,
`request_timeout_s`). When the coordinator does not answer, or answers 5xx, the session is marked *detached*: model
calls go to the last node used, or to a node chosen by a stable hash of the session id over `fallback_nodes`;
reports are dropped; the log says so once. While detached, the coordinator is tried again at most every
`retry_interval_s`, in the background (a thread, or a task for the async router; started by a model call or by the
session's heartbeat), so no call waits on a coordinator that is still away; once it answers, the session registers
again (same id) and the next call is scheduled as before.

Bounds on a model call: an acquire long-polls in steps of `request_timeout_s / 2` (the coordinator answers
`waiting` after each), each with a read timeout of `request_timeout_s`, so a coordinator that stops answering —
down, or stalled mid-call — holds a call at most `connect_timeout_s + request_timeout_s` before it is routed on its
own; waiting for a place lasts at most `max_wait_s`.

Convergence (`convergence.py`): the coordinator is the judge of a session's phase. A 409 carries its view of the
session; the client closes the work the view shows open and the client does not (a lost tool_end, a model call the
coordinator granted after the client had given up on it) and repeats the refused request once (an acquire, a
tool_start). 401/403/404 to an acquire register the session again (the coordinator expired it, restarted, or no
longer knows its token). A 401 to registration is a refused API token, logged as an error and raised as
`AuthenticationFailed` when no node is known; a 503 `no_healthy_node` to an acquire routes that call on its own at
once, saying so once in the log, while the session stays registered.

Several coordinator replicas (`replicas.py`): each request (registration, acquire polls, reports, close) goes to
the replica believed to be the leader, and again to the next one while none answers as leader (a connection error, a
timeout, a 421, a stepping-down 503), in place: the report worker sends the next report only once this one is
answered, so reports keep their order. A failover makes a call slower, never an error; the session detaches only
when no replica has answered as leader for `failover_wait_s` (which then adds to the bounds above), and a background
retry while detached tries each replica once.

A call a node refused (`refusals.py`) is sent again once: `reroute` reports nothing itself (the transport has
reported the refusal with `llm_end`), waits until that report is out, and asks the coordinator for a node other than
the refuser; routing on its own, or when the coordinator cannot say, it takes its own fail-open node among the others.

`SyncRouter` and `AsyncRouter` share everything but their I/O: `router_core.RouterCore` decides (its plans say what
to send, and what to do with each answer), `calls.Calls` builds the requests and reads the answers, and each router
only runs the plans, with blocking calls or with awaits; the async one never blocks the event loop. Reports go out
in order from a background worker, so only `acquire` (which needs its answer) sits on the agent's critical path.
Overlapping calls end under the session's newest lease.
"""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from typing import Any

import httpx2

from .calls import Grant, SessionState, Step, Unreachable, new_state
from .protocol import ToolHints
from .queue_state import GiveUp
from .router_core import Flush, Pause, Plan, QueuedReport, Result, RouterCore
from .session_config import SessionConfig
from .tls import shared_ssl_context

__all__ = ["AsyncRouter", "Grant", "SessionConfig", "SessionState", "Step", "SyncRouter", "Unreachable", "new_state"]


class SyncRouter(RouterCore):
    """Runs the plans with blocking calls. Reports (`llm_end`, tool events, heartbeats) are sent by one background
    thread, in order, so they stay off the agent's critical path; `acquire` and `flush` wait until the ones queued
    before them have been sent."""

    def __init__(
        self, config: SessionConfig, state: SessionState | None = None, transport: httpx2.BaseTransport | None = None
    ) -> None:
        """`transport` carries the requests to the coordinator (a real connection unless given: tests give a
        `httpx2.MockTransport`)."""
        super().__init__(config, state)
        self.http = httpx2.Client(timeout=self.timeout(), verify=shared_ssl_context(), transport=transport)
        self._queue: queue.Queue[QueuedReport | None] = queue.Queue()
        self._worker: threading.Thread | None = None
        self._retry: threading.Thread | None = None

    def _run(self, plan: Plan[Result]) -> Result:
        reply: Any = None
        failure: Exception | None = None
        while True:
            try:
                step = plan.send(reply) if failure is None else plan.throw(failure)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]
            reply, failure = None, None
            if isinstance(step, Pause):
                time.sleep(step.seconds)
            elif isinstance(step, Flush):
                self.flush()
            else:
                try:
                    reply = self.http.request(step.method, step.url, json=step.body, headers=step.headers)
                except Exception as error:
                    failure = error

    def close(self) -> None:
        self.wait_for_retry()
        self.flush()
        if self.state.registered:
            self._run(self.report_plan("DELETE", self.session_path()))
        if self._worker is not None:
            self._queue.put(None)
            self._worker.join(timeout=self.config.request_timeout_s + 1)
        self.http.close()

    def flush(self) -> None:
        """Wait until every report queued so far has been sent (or dropped because the coordinator is away)."""
        if self._worker is not None:
            self._queue.join()

    def _work(self) -> None:
        while (item := self._queue.get()) is not None:
            try:
                self._run(self.report_plan(*item))
            finally:
                self._queue.task_done()
        self._queue.task_done()

    def _report(self, report: QueuedReport | None) -> None:
        if report is None:
            return
        if self._worker is None:
            self._worker = threading.Thread(target=self._work, name=f"tao-report-{self.state.session_id}", daemon=True)
            self._worker.start()
        self._queue.put(report)

    def register(self) -> None:
        self._run(self.register_plan())

    def wait_for_retry(self) -> None:
        """Let a retry of the coordinator that is under way finish (it is bounded by the request timeouts)."""
        if self._retry is not None:
            self._retry.join(timeout=self.retry_bound_s())

    def retry_in_background(self, now: float) -> None:
        running = self._retry is not None and self._retry.is_alive()
        if not running and self.retry_due(now):
            self._retry = threading.Thread(target=self.register, name=f"tao-retry-{self.state.session_id}", daemon=True)
            self._retry.start()

    def acquire(
        self,
        expected_tokens: int | None,
        agent_step: Step | None = None,
        model: str | None = None,
        give_up: GiveUp | None = None,
    ) -> Grant:
        """As `RouterCore.acquire_plan`."""
        return self._run(self.acquire_plan(expected_tokens, agent_step, model, give_up))

    def reroute(self, refused: Grant, how: str, expected_tokens: int | None, model: str | None = None) -> Grant | None:
        """As `RouterCore.reroute_plan`."""
        return self._run(self.reroute_plan(refused, how, expected_tokens, model))

    def llm_end(self, grant: Grant, usage: Any, duration_s: float) -> None:
        self._report(self.llm_end_report(grant, usage, duration_s))

    def tool_start(
        self, call_id: str, tool: str, hints: ToolHints, program: str | None = None, happened: float | None = None
    ) -> None:
        """Report a tool's start; `happened`: when it started (`time.monotonic()`), if before now."""
        self._report(self.tool_start_report(call_id, tool, hints, program, happened))

    def tool_end(self, call_id: str, duration_s: float | None, status: str, happened: float | None = None) -> None:
        """Report a tool's end; `happened`: when it ended (`time.monotonic()`), if before now."""
        self._report(self.tool_end_report(call_id, duration_s, status, happened))

    def heartbeat_if_due(self) -> None:
        self._report(self.heartbeat_report())


class AsyncRouter(RouterCore):
    """As `SyncRouter`, running the plans with awaits and sending reports from one background task; never blocks
    the event loop."""

    def __init__(
        self,
        config: SessionConfig,
        state: SessionState | None = None,
        transport: httpx2.AsyncBaseTransport | None = None,
    ) -> None:
        super().__init__(config, state)
        self.http = httpx2.AsyncClient(timeout=self.timeout(), verify=shared_ssl_context(), transport=transport)
        self._queue: asyncio.Queue[QueuedReport] | None = None
        self._worker: asyncio.Task[None] | None = None
        self._retry: asyncio.Task[None] | None = None

    async def _run(self, plan: Plan[Result]) -> Result:
        reply: Any = None
        failure: Exception | None = None
        while True:
            try:
                step = plan.send(reply) if failure is None else plan.throw(failure)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]
            reply, failure = None, None
            if isinstance(step, Pause):
                await asyncio.sleep(step.seconds)
            elif isinstance(step, Flush):
                await self.flush()
            else:
                try:
                    reply = await self.http.request(step.method, step.url, json=step.body, headers=step.headers)
                except Exception as error:
                    failure = error

    async def close(self) -> None:
        if self._retry is not None:
            await asyncio.wait([self._retry], timeout=self.retry_bound_s())
        await self.flush()
        if self.state.registered:
            await self._run(self.report_plan("DELETE", self.session_path()))
        if self._worker is not None:
            self._worker.cancel()
        await self.http.aclose()

    async def flush(self) -> None:
        if self._queue is not None:
            await self._queue.join()

    async def _work(self) -> None:
        assert self._queue is not None
        while True:
            item = await self._queue.get()
            try:
                await self._run(self.report_plan(*item))
            finally:
                self._queue.task_done()

    def _report(self, report: QueuedReport | None) -> None:
        if report is None:
            return
        if self._queue is None:
            self._queue = asyncio.Queue()
            self._worker = asyncio.create_task(self._work())
        self._queue.put_nowait(report)

    async def register(self) -> None:
        await self._run(self.register_plan())

    def retry_in_background(self, now: float) -> None:
        running = self._retry is not None and not self._retry.done()
        if not running and self.retry_due(now):
            self._retry = asyncio.get_running_loop().create_task(self.register())

    async def acquire(
        self,
        expected_tokens: int | None,
        agent_step: Step | None = None,
        model: str | None = None,
        give_up: GiveUp | None = None,
    ) -> Grant:
        return await self._run(self.acquire_plan(expected_tokens, agent_step, model, give_up))

    async def reroute(
        self, refused: Grant, how: str, expected_tokens: int | None, model: str | None = None
    ) -> Grant | None:
        return await self._run(self.reroute_plan(refused, how, expected_tokens, model))

    async def llm_end(self, grant: Grant, usage: Any, duration_s: float) -> None:
        self._report(self.llm_end_report(grant, usage, duration_s))

    async def tool_start(
        self, call_id: str, tool: str, hints: ToolHints, program: str | None = None, happened: float | None = None
    ) -> None:
        """Report a tool's start; `happened`: when it started (`time.monotonic()`), if before now."""
        self._report(self.tool_start_report(call_id, tool, hints, program, happened))

    async def tool_end(
        self, call_id: str, duration_s: float | None, status: str, happened: float | None = None
    ) -> None:
        """Report a tool's end; `happened`: when it ended (`time.monotonic()`), if before now."""
        self._report(self.tool_end_report(call_id, duration_s, status, happened))

    async def heartbeat_if_due(self) -> None:
        self._report(self.heartbeat_report())
