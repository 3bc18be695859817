"""The SDK's side of the protocol: one session's calls to the coordinator, failing open and converging.

Fail-open rules (design §1): every call to the coordinator has a short bound (`connect_timeout_s`,
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

`SyncRouter` and `AsyncRouter` share everything but their I/O (`calls.Calls` builds the requests and reads the
answers); the async one never blocks the event loop. Reports go out in order from a background worker, so only
`acquire` (which needs its answer) sits on the agent's critical path. Overlapping calls end under the session's
newest lease.
"""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from typing import Any

import httpx2

from . import protocol
from .calls import (
    CONVERGE,
    REGISTER,
    REPORT_ERRORS,
    Attempt,
    Calls,
    Grant,
    SessionState,
    Step,
    Unreachable,
    check,
    new_state,
)
from .replicas import Failover, NotLeader, not_leader
from .session_config import SessionConfig
from .tls import shared_ssl_context

__all__ = ["AsyncRouter", "Grant", "SessionConfig", "SessionState", "Step", "SyncRouter", "Unreachable", "new_state"]


class SyncRouter(Calls):
    """Reports (`llm_end`, tool events, heartbeats) are sent by one background thread, in order, so they stay off
    the agent's critical path; `acquire` and `flush` wait until the ones queued before them have been sent."""

    def __init__(self, config: SessionConfig, state: SessionState | None = None) -> None:
        super().__init__(config, state)
        self.http = httpx2.Client(timeout=self.timeout(), verify=shared_ssl_context())
        self._queue: queue.Queue[tuple[str, str, Any] | None] = queue.Queue()
        self._worker: threading.Thread | None = None
        self._retry: threading.Thread | None = None

    def close(self) -> None:
        self.wait_for_retry()
        self.flush()
        if self.state.registered:
            self._send("DELETE", self.session_path())
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
                self._send(*item)
            finally:
                self._queue.task_done()
        self._queue.task_done()

    def _request(self, method: str, path: str, body: Any = None, api: bool = False) -> httpx2.Response:
        """The answer of the replica that answers as leader, following the leader (`Calls.failover`)."""
        trial = Failover()
        while True:
            url = self.state.replicas.leader
            failure: BaseException | NotLeader
            try:
                response = self.http.request(method, url + path, json=body, headers=self.headers(api))
            except httpx2.TransportError as error:
                failure = error
            else:
                if (refusal := not_leader(response)) is None:
                    self.reached(url)
                    return response
                failure = refusal
            if pause := self.failover(trial, url, failure):
                time.sleep(pause)

    def _post(self, path: str, body: Any = None, api: bool = False) -> tuple[int, Any]:
        response = self._request("POST", path, body, api)
        return response.status_code, check(response)

    def _ensure_registered(self) -> None:
        if not self.state.registered:
            self.registered(*self._post("/v1/sessions", self.register_body(), api=True))

    def register(self) -> None:
        if not self.has_coordinator:
            return
        try:
            self._ensure_registered()
        except REPORT_ERRORS as error:
            self.detach(error, time.monotonic())

    def wait_for_retry(self) -> None:
        """Let a retry of the coordinator that is under way finish (it is bounded by the request timeouts)."""
        if self._retry is not None:
            self._retry.join(timeout=self.retry_bound_s())

    def retry_in_background(self, now: float) -> None:
        running = self._retry is not None and self._retry.is_alive()
        if not running and self.retry_due(now):
            self._retry = threading.Thread(target=self.register, name=f"tao-retry-{self.state.session_id}", daemon=True)
            self._retry.start()

    def acquire(self, expected_tokens: int | None, agent_step: Step | None = None) -> Grant:
        """A node for the next model call; `agent_step` (else the session's, `SessionState.step`) goes with it."""
        self.flush()
        attempt = Attempt(time.monotonic())
        if not self.has_coordinator or self.state.detached_at is not None:
            self.retry_in_background(attempt.started)
            return self.fallback()
        try:
            self._ensure_registered()
            while (body := self.acquire_body(expected_tokens, attempt, agent_step)) is not None:
                step = self.answered(*self._post(self.session_path("acquire"), body), attempt)
                if isinstance(step, Grant):
                    return step
                if step == REGISTER:
                    self._ensure_registered()
                elif step == CONVERGE:
                    for verb, report in attempt.closing:
                        self._post(self.session_path(verb), report)
        except REPORT_ERRORS as error:
            self.detach(error, time.monotonic())
            return self.fallback()
        return self.fallback("no place was free within max_wait_s")

    def reroute(self, refused: Grant, how: str, expected_tokens: int | None) -> Grant | None:
        """Where a call `refused`'s node refused goes instead (None: nowhere, the caller gets the refusal)."""
        self.refusal_noted(refused, how)
        if refused.detached or not self.has_coordinator or self.state.detached_at is not None:
            return self.fallback_after(refused)
        self.flush()  # the refusal's report goes first: the refused call ends before its retry is placed
        try:
            self._ensure_registered()
            body = self.acquire_body(expected_tokens, Attempt(time.monotonic()), avoid=refused.node)
            return self.rerouted(*self._post(self.session_path("acquire"), body), refused)
        except REPORT_ERRORS as error:
            self.detach(error, time.monotonic())
            return self.fallback_after(refused)

    def _report(self, method: str, path: str, body: Any = None) -> None:
        if self._worker is None:
            self._worker = threading.Thread(target=self._work, name=f"tao-report-{self.state.session_id}", daemon=True)
            self._worker.start()
        self._queue.put((method, path, body))

    def _send(self, method: str, path: str, body: Any = None) -> None:
        now = time.monotonic()
        if not self.state.registered:
            return
        try:
            response = self._request(method, path, body)
            answer = check(response)
            self.state.heartbeat_due = now + self.state.lease_ttl_s / 3
            if closing := self.resend_after(path, response.status_code, answer):
                for verb, report in closing:
                    self._post(self.session_path(verb), report)
                check(self._request(method, path, body))
        except REPORT_ERRORS as error:
            self.detach(error, now)

    def llm_end(self, grant: Grant, usage: Any, duration_s: float) -> None:
        if not grant.detached:
            self._report("POST", self.session_path("llm_end"), self.llm_end_body(grant, usage, duration_s))

    def tool_start(self, call_id: str, tool: str, hints: protocol.ToolHints, program: str | None = None) -> None:
        self._report("POST", self.session_path("tool_start"), self.tool_start_body(call_id, tool, hints, program))

    def tool_end(self, call_id: str, duration_s: float | None, status: str) -> None:
        self._report("POST", self.session_path("tool_end"), self.tool_end_body(call_id, duration_s, status))

    def heartbeat_if_due(self) -> None:
        now = time.monotonic()
        if self.state.detached_at is not None:
            self.retry_in_background(now)
        elif now >= self.state.heartbeat_due:
            self._report("POST", self.session_path("heartbeat"))


class AsyncRouter(Calls):
    """As `SyncRouter`, with one background task instead of a thread; never blocks the event loop."""

    def __init__(self, config: SessionConfig, state: SessionState | None = None) -> None:
        super().__init__(config, state)
        self.http = httpx2.AsyncClient(timeout=self.timeout(), verify=shared_ssl_context())
        self._queue: asyncio.Queue[tuple[str, str, Any]] | None = None
        self._worker: asyncio.Task[None] | None = None
        self._retry: asyncio.Task[None] | None = None

    async def close(self) -> None:
        if self._retry is not None:
            await asyncio.wait([self._retry], timeout=self.retry_bound_s())
        await self.flush()
        if self.state.registered:
            await self._send("DELETE", self.session_path())
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
                await self._send(*item)
            finally:
                self._queue.task_done()

    async def _request(self, method: str, path: str, body: Any = None, api: bool = False) -> httpx2.Response:
        trial = Failover()
        while True:
            url = self.state.replicas.leader
            failure: BaseException | NotLeader
            try:
                response = await self.http.request(method, url + path, json=body, headers=self.headers(api))
            except httpx2.TransportError as error:
                failure = error
            else:
                if (refusal := not_leader(response)) is None:
                    self.reached(url)
                    return response
                failure = refusal
            if pause := self.failover(trial, url, failure):
                await asyncio.sleep(pause)

    async def _post(self, path: str, body: Any = None, api: bool = False) -> tuple[int, Any]:
        response = await self._request("POST", path, body, api)
        return response.status_code, check(response)

    async def _ensure_registered(self) -> None:
        if not self.state.registered:
            self.registered(*await self._post("/v1/sessions", self.register_body(), api=True))

    async def register(self) -> None:
        if not self.has_coordinator:
            return
        try:
            await self._ensure_registered()
        except REPORT_ERRORS as error:
            self.detach(error, time.monotonic())

    def retry_in_background(self, now: float) -> None:
        running = self._retry is not None and not self._retry.done()
        if not running and self.retry_due(now):
            self._retry = asyncio.get_running_loop().create_task(self.register())

    async def acquire(self, expected_tokens: int | None, agent_step: Step | None = None) -> Grant:
        await self.flush()
        attempt = Attempt(time.monotonic())
        if not self.has_coordinator or self.state.detached_at is not None:
            self.retry_in_background(attempt.started)
            return self.fallback()
        try:
            await self._ensure_registered()
            while (body := self.acquire_body(expected_tokens, attempt, agent_step)) is not None:
                step = self.answered(*await self._post(self.session_path("acquire"), body), attempt)
                if isinstance(step, Grant):
                    return step
                if step == REGISTER:
                    await self._ensure_registered()
                elif step == CONVERGE:
                    for verb, report in attempt.closing:
                        await self._post(self.session_path(verb), report)
        except REPORT_ERRORS as error:
            self.detach(error, time.monotonic())
            return self.fallback()
        return self.fallback("no place was free within max_wait_s")

    async def reroute(self, refused: Grant, how: str, expected_tokens: int | None) -> Grant | None:
        """As `SyncRouter.reroute`."""
        self.refusal_noted(refused, how)
        if refused.detached or not self.has_coordinator or self.state.detached_at is not None:
            return self.fallback_after(refused)
        await self.flush()
        try:
            await self._ensure_registered()
            body = self.acquire_body(expected_tokens, Attempt(time.monotonic()), avoid=refused.node)
            return self.rerouted(*await self._post(self.session_path("acquire"), body), refused)
        except REPORT_ERRORS as error:
            self.detach(error, time.monotonic())
            return self.fallback_after(refused)

    async def _report(self, method: str, path: str, body: Any = None) -> None:
        if self._queue is None:
            self._queue = asyncio.Queue()
            self._worker = asyncio.create_task(self._work())
        self._queue.put_nowait((method, path, body))

    async def _send(self, method: str, path: str, body: Any = None) -> None:
        now = time.monotonic()
        if not self.state.registered:
            return
        try:
            response = await self._request(method, path, body)
            answer = check(response)
            self.state.heartbeat_due = now + self.state.lease_ttl_s / 3
            if closing := self.resend_after(path, response.status_code, answer):
                for verb, report in closing:
                    await self._post(self.session_path(verb), report)
                check(await self._request(method, path, body))
        except REPORT_ERRORS as error:
            self.detach(error, now)

    async def llm_end(self, grant: Grant, usage: Any, duration_s: float) -> None:
        if not grant.detached:
            await self._report("POST", self.session_path("llm_end"), self.llm_end_body(grant, usage, duration_s))

    async def tool_start(self, call_id: str, tool: str, hints: protocol.ToolHints, program: str | None = None) -> None:
        body = self.tool_start_body(call_id, tool, hints, program)
        await self._report("POST", self.session_path("tool_start"), body)

    async def tool_end(self, call_id: str, duration_s: float | None, status: str) -> None:
        await self._report("POST", self.session_path("tool_end"), self.tool_end_body(call_id, duration_s, status))

    async def heartbeat_if_due(self) -> None:
        now = time.monotonic()
        if self.state.detached_at is not None:
            self.retry_in_background(now)
        elif now >= self.state.heartbeat_due:
            await self._report("POST", self.session_path("heartbeat"))
