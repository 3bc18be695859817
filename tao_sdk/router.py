"""The SDK's side of the protocol: one session's calls to the coordinator, failing open.

Fail-open rules (design §1): every call to the coordinator has a short bound (`connect_timeout_s`,
`request_timeout_s`). When the coordinator does not answer, or answers 5xx, the session is marked *detached*: model
calls go to the last node used, or to a node chosen by a stable hash of the session id over `fallback_nodes`;
reports are dropped; the log says so once. While detached, the coordinator is tried again at most every
`retry_interval_s`, in the background (a thread, or a task for the async router; started by a model call or by the
session's heartbeat), so no call waits on a coordinator that is still away; once it answers, the session registers
again (same id) and the next call is scheduled as before. An acquire never blocks longer than `max_wait_s`: past it
the call is routed as if detached; one the coordinator refuses (409: it still sees a tool running, say after a lost
tool_end) is routed so at once. Overlapping calls end under the session's newest lease.

`SyncRouter` and `AsyncRouter` share everything but their I/O (`_Calls` builds the requests and reads the
answers); the async one never blocks the event loop. Reports go out in order from a background worker, so only
`acquire` (which needs its answer) sits on the agent's critical path.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import queue
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import httpx2

from . import protocol
from .errors import NoNodeAvailable
from .tls import shared_ssl_context

log = logging.getLogger("tao_sdk")


@dataclass(frozen=True)
class SessionConfig:
    coordinator: str | None
    """Base URL of the coordinator (e.g. http://127.0.0.1:8700); None: always detached."""
    token: str | None = None
    """The coordinator's API token (needed to register unless it runs with --insecure-no-auth)."""
    context: protocol.AgentContext = field(default_factory=protocol.AgentContext)
    session_id: str | None = None
    fallback_nodes: tuple[str, ...] = ()
    """Root URLs of nodes to use when the coordinator is unreachable."""
    connect_timeout_s: float = 0.5
    request_timeout_s: float = 2.0
    max_wait_s: float = 300.0
    retry_interval_s: float = 5.0


@dataclass(frozen=True)
class Grant:
    node: str
    node_url: str
    lease_id: str | None
    detached: bool = False


@dataclass
class SessionState:
    session_id: str
    session_token: str | None = None
    registered: bool = False
    detached_at: float | None = None
    retry_at: float = 0.0
    """While detached: when the coordinator may be tried again."""
    warned: bool = False
    last: Grant | None = None
    heartbeat_due: float = 0.0
    lease_ttl_s: float = 60.0


class Unreachable(Exception):
    """The coordinator did not answer in time, or answered 5xx."""


def new_state(config: SessionConfig) -> SessionState:
    return SessionState(config.session_id or f"tao-{uuid.uuid4().hex}")


class _Calls:
    """Requests and their interpretation, shared by both routers (which may serve one session together)."""

    def __init__(self, config: SessionConfig, state: SessionState | None = None) -> None:
        self.config = config
        self.state = state or new_state(config)

    def timeout(self, read: float | None = None) -> httpx2.Timeout:
        total = self.config.request_timeout_s if read is None else read
        return httpx2.Timeout(total, connect=self.config.connect_timeout_s)

    def headers(self, api: bool = False) -> dict[str, str]:
        token = self.config.token if api else self.state.session_token
        return {"Authorization": f"Bearer {token}"} if token else {}

    def session_path(self, verb: str = "") -> str:
        return f"/v1/sessions/{self.state.session_id}" + (f"/{verb}" if verb else "")

    def register_body(self) -> dict[str, Any]:
        body = protocol.RegisterRequest(context=self.config.context, session_id=self.state.session_id)
        return body.model_dump(mode="json", exclude_none=True)

    def registered(self, status: int, body: Any) -> None:
        if status == 201:
            answer = protocol.RegisterResponse.model_validate(body)
            self.state.session_token = answer.session_token
            self.state.lease_ttl_s = answer.lease_ttl_s
        elif status != 409:  # 409: still registered from before the coordinator went away
            raise Unreachable(f"register answered {status}: {body}")
        self.state.registered = True
        if self.state.detached_at is not None:
            log.info("tao: coordinator reachable again; session %s is scheduled again", self.state.session_id)
        self.state.detached_at = None
        self.state.warned = False

    def retry_due(self, now: float) -> bool:
        """Detached and due for another try of the coordinator; claims it (the next is `retry_interval_s` away)."""
        if self.config.coordinator is None or self.state.detached_at is None or now < self.state.retry_at:
            return False
        self.state.retry_at = now + self.config.retry_interval_s
        return True

    def detach(self, reason: str, now: float) -> None:
        if self.state.detached_at is None:
            self.state.detached_at = now
        self.state.retry_at = max(self.state.retry_at, now + self.config.retry_interval_s)
        self.state.registered = False
        if not self.state.warned:
            self.state.warned = True
            log.warning(
                "tao: coordinator unavailable (%s); routing session %s on its own", reason, self.state.session_id
            )

    def fallback(self) -> Grant:
        if self.state.last is not None:
            return Grant(self.state.last.node, self.state.last.node_url, None, detached=True)
        nodes = sorted(self.config.fallback_nodes)
        if not nodes:
            raise NoNodeAvailable(
                "the coordinator is unreachable and no fallback node is configured (fallback_nodes or $TAO_NODES)"
            )
        digest = int.from_bytes(hashlib.sha256(self.state.session_id.encode()).digest()[:8], "big")
        url = nodes[digest % len(nodes)].rstrip("/")
        return Grant(url, url, None, detached=True)

    def refused(self, status: int, body: Any) -> Grant:
        """The coordinator refused the acquire (409: it still sees a tool running, e.g. a lost tool_end): this call
        is routed as if detached instead of asking again in a tight loop; the session stays registered."""
        log.warning(
            "tao: acquire for session %s answered %s (%s); routing this call on its own",
            self.state.session_id,
            status,
            body,
        )
        return self.fallback()

    def granted(self, body: Any) -> Grant:
        answer = protocol.AcquireResponse.model_validate(body)
        assert answer.node is not None and answer.node_url is not None
        grant = Grant(answer.node, answer.node_url, answer.lease_id)
        self.state.last = grant
        return grant

    def llm_end_body(self, grant: Grant, usage: Any, duration_s: float) -> dict[str, Any]:
        # Overlapping calls share the session's place, and the coordinator knows only the newest call's lease.
        last = self.state.last
        lease_id = last.lease_id if last is not None and last.node == grant.node and last.lease_id else grant.lease_id
        body = protocol.LlmEndRequest(
            lease_id=lease_id,
            node=grant.node,
            prompt_tokens=usage.prompt_tokens,
            cached_tokens=usage.cached_tokens,
            completion_tokens=usage.completion_tokens,
            ttft_s=usage.ttft_s,
            duration_s=duration_s,
            error=usage.error,
        )
        return body.model_dump(mode="json", exclude_none=True)


def check(response: httpx2.Response) -> Any:
    if response.status_code >= 500:
        raise Unreachable(f"{response.request.url.path} answered {response.status_code}")
    return response.json() if response.content else None


REPORT_ERRORS = (httpx2.HTTPError, Unreachable, ValueError)


def describe(error: BaseException) -> str:
    text = str(error)
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


class SyncRouter(_Calls):
    """Reports (`llm_end`, tool events, heartbeats) are sent by one background thread, in order, so they stay off
    the agent's critical path; `acquire` and `flush` wait until the ones queued before them have been sent."""

    def __init__(self, config: SessionConfig, state: SessionState | None = None) -> None:
        super().__init__(config, state)
        self.http = httpx2.Client(
            base_url=config.coordinator or "http://unused.invalid", timeout=self.timeout(), verify=shared_ssl_context()
        )
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

    def _post(self, path: str, body: Any = None, api: bool = False, read: float | None = None) -> tuple[int, Any]:
        response = self.http.request("POST", path, json=body, headers=self.headers(api), timeout=self.timeout(read))
        return response.status_code, check(response)

    def _ensure_registered(self) -> None:
        if not self.state.registered:
            self.registered(*self._post("/v1/sessions", self.register_body(), api=True))

    def register(self) -> None:
        if self.config.coordinator is None:
            return
        try:
            self._ensure_registered()
        except REPORT_ERRORS as error:
            self.detach(describe(error), time.monotonic())

    def wait_for_retry(self) -> None:
        """Let a retry of the coordinator that is under way finish (it is bounded by the request timeouts)."""
        if self._retry is not None:
            self._retry.join(timeout=self.config.connect_timeout_s + self.config.request_timeout_s + 1)

    def retry_in_background(self, now: float) -> None:
        running = self._retry is not None and self._retry.is_alive()
        if not running and self.retry_due(now):
            self._retry = threading.Thread(target=self.register, name=f"tao-retry-{self.state.session_id}", daemon=True)
            self._retry.start()

    def acquire(self, expected_tokens: int | None) -> Grant:
        self.flush()
        started = time.monotonic()
        if self.config.coordinator is None or self.state.detached_at is not None:
            self.retry_in_background(started)
            return self.fallback()
        try:
            self._ensure_registered()
            while (left := self.config.max_wait_s - (time.monotonic() - started)) > 0:
                wait = min(30.0, left)
                body = {"expected_input_tokens": expected_tokens, "wait_s": wait}
                status, answer = self._post(
                    self.session_path("acquire"), body, read=wait + self.config.request_timeout_s
                )
                if status == 404:
                    self.state.registered = False
                    self._ensure_registered()
                elif status == 200:
                    return self.granted(answer)
                elif status != 202:
                    return self.refused(status, answer)
        except REPORT_ERRORS as error:
            self.detach(describe(error), time.monotonic())
        return self.fallback()

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
            response = self.http.request(method, path, json=body, headers=self.headers())
            check(response)
            self.state.heartbeat_due = now + self.state.lease_ttl_s / 3
        except REPORT_ERRORS as error:
            self.detach(describe(error), now)

    def llm_end(self, grant: Grant, usage: Any, duration_s: float) -> None:
        if not grant.detached:
            self._report("POST", self.session_path("llm_end"), self.llm_end_body(grant, usage, duration_s))

    def tool_start(self, call_id: str, tool: str, hints: protocol.ToolHints, program: str | None = None) -> None:
        body = protocol.ToolStartRequest(call_id=call_id, tool=tool, hints=hints, program=program)
        self._report("POST", self.session_path("tool_start"), body.model_dump(mode="json", exclude_none=True))

    def tool_end(self, call_id: str, duration_s: float | None, status: str) -> None:
        body = {"call_id": call_id, "duration_s": duration_s, "status": status}
        self._report("POST", self.session_path("tool_end"), body)

    def heartbeat_if_due(self) -> None:
        now = time.monotonic()
        if self.state.detached_at is not None:
            self.retry_in_background(now)
        elif now >= self.state.heartbeat_due:
            self._report("POST", self.session_path("heartbeat"))


class AsyncRouter(_Calls):
    """As `SyncRouter`, with one background task instead of a thread; never blocks the event loop."""

    def __init__(self, config: SessionConfig, state: SessionState | None = None) -> None:
        super().__init__(config, state)
        self.http = httpx2.AsyncClient(
            base_url=config.coordinator or "http://unused.invalid", timeout=self.timeout(), verify=shared_ssl_context()
        )
        self._queue: asyncio.Queue[tuple[str, str, Any]] | None = None
        self._worker: asyncio.Task[None] | None = None
        self._retry: asyncio.Task[None] | None = None

    async def close(self) -> None:
        if self._retry is not None:
            await asyncio.wait([self._retry], timeout=self.config.request_timeout_s + 1)
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

    async def _post(self, path: str, body: Any = None, api: bool = False, read: float | None = None) -> tuple[int, Any]:
        response = await self.http.request(
            "POST", path, json=body, headers=self.headers(api), timeout=self.timeout(read)
        )
        return response.status_code, check(response)

    async def _ensure_registered(self) -> None:
        if not self.state.registered:
            self.registered(*await self._post("/v1/sessions", self.register_body(), api=True))

    async def register(self) -> None:
        if self.config.coordinator is None:
            return
        try:
            await self._ensure_registered()
        except REPORT_ERRORS as error:
            self.detach(describe(error), time.monotonic())

    def retry_in_background(self, now: float) -> None:
        running = self._retry is not None and not self._retry.done()
        if not running and self.retry_due(now):
            self._retry = asyncio.get_running_loop().create_task(self.register())

    async def acquire(self, expected_tokens: int | None) -> Grant:
        await self.flush()
        started = time.monotonic()
        if self.config.coordinator is None or self.state.detached_at is not None:
            self.retry_in_background(started)
            return self.fallback()
        try:
            await self._ensure_registered()
            while (left := self.config.max_wait_s - (time.monotonic() - started)) > 0:
                wait = min(30.0, left)
                body = {"expected_input_tokens": expected_tokens, "wait_s": wait}
                path = self.session_path("acquire")
                status, answer = await self._post(path, body, read=wait + self.config.request_timeout_s)
                if status == 404:
                    self.state.registered = False
                    await self._ensure_registered()
                elif status == 200:
                    return self.granted(answer)
                elif status != 202:
                    return self.refused(status, answer)
        except REPORT_ERRORS as error:
            self.detach(describe(error), time.monotonic())
        return self.fallback()

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
            response = await self.http.request(method, path, json=body, headers=self.headers())
            check(response)
            self.state.heartbeat_due = now + self.state.lease_ttl_s / 3
        except REPORT_ERRORS as error:
            self.detach(describe(error), now)

    async def llm_end(self, grant: Grant, usage: Any, duration_s: float) -> None:
        if not grant.detached:
            await self._report("POST", self.session_path("llm_end"), self.llm_end_body(grant, usage, duration_s))

    async def tool_start(self, call_id: str, tool: str, hints: protocol.ToolHints, program: str | None = None) -> None:
        body = protocol.ToolStartRequest(call_id=call_id, tool=tool, hints=hints, program=program)
        await self._report("POST", self.session_path("tool_start"), body.model_dump(mode="json", exclude_none=True))

    async def tool_end(self, call_id: str, duration_s: float | None, status: str) -> None:
        body = {"call_id": call_id, "duration_s": duration_s, "status": status}
        await self._report("POST", self.session_path("tool_end"), body)

    async def heartbeat_if_due(self) -> None:
        now = time.monotonic()
        if self.state.detached_at is not None:
            self.retry_in_background(now)
        elif now >= self.state.heartbeat_due:
            await self._report("POST", self.session_path("heartbeat"))
