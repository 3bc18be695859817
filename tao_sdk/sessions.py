"""`tao_sdk.session(...)`: one agent session, as a sync or an async context manager.

    with tao_sdk.session(coordinator="http://127.0.0.1:8700", token=…, context=AgentContext(harness="mine")) as s:
        client = s.openai()                      # a real openai.OpenAI, routed by the coordinator
        reply = client.chat.completions.create(model=…, messages=…)
        with s.tool("bash", command="pytest -x", timeout=120):
            run_the_tool()

Entering registers the session (or, when the coordinator is unreachable, runs detached: see `router.py`); leaving
closes it, also on an exception. While open, a background heartbeat keeps the lease alive when nothing else is
sent. Settings not given fall back to `$TAO_COORDINATOR`, `$TAO_TOKEN` and `$TAO_NODES` (comma-separated node URLs
for fail-open routing). `coordinator=` (and `$TAO_COORDINATOR`) may name several replicas of the coordinator,
comma-separated or as a list: the session follows their leader (`replicas.py`).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Any, TypeVar

import httpx2

from .environment import coordinator as default_coordinator
from .environment import nodes as default_nodes
from .environment import token as default_token
from .errors import ConfigurationError
from .hints import command_hints, program_of
from .protocol import AcquireRequest, AgentContext, ToolHints
from .queue_state import QueueState
from .replicas import coordinator_urls
from .router import AsyncRouter, SessionState, Step, SyncRouter, new_state
from .session_config import SessionConfig, validated
from .transport import AsyncTaoTransport, TaoTransport

PLACEHOLDER_OPENAI = "http://tao.invalid/v1"
PLACEHOLDER_ANTHROPIC = "http://tao.invalid"
Client = TypeVar("Client")
F = TypeVar("F", bound=Callable[..., Any])


class Session:
    def __init__(
        self,
        coordinator: str | Sequence[str] | None = None,
        token: str | None = None,
        context: AgentContext | None = None,
        *,
        session_id: str | None = None,
        fallback_nodes: list[str] | tuple[str, ...] | None = None,
        workflow_id: str | None = None,
        parent_session_id: str | None = None,
        expected_next_tools: list[str] | tuple[str, ...] | None = None,
        **options: Any,
    ) -> None:
        coordinators = coordinator_urls(coordinator or default_coordinator())
        agent: dict[str, Any] = {"workflow_id": workflow_id, "parent_session_id": parent_session_id}
        if expected_next_tools is not None:
            agent["expected_next_tools"] = list(expected_next_tools)
        self.config = SessionConfig.of(
            coordinator=coordinators or None,
            token=token or default_token(),
            context=_with_agent(context or AgentContext(), agent),
            session_id=session_id,
            fallback_nodes=default_nodes() if fallback_nodes is None else tuple(fallback_nodes),
            **options,
        )
        self.state: SessionState = new_state(self.config)
        self._sync: SyncRouter | None = None
        self._async: AsyncRouter | None = None
        self._stop = threading.Event()
        self._heart: threading.Thread | None = None
        self._async_heart: asyncio.Task[None] | None = None
        self._clients: list[httpx2.Client] = []
        self._async_clients: list[httpx2.AsyncClient] = []

    @property
    def id(self) -> str:
        return self.state.session_id

    @property
    def queue(self) -> QueueState | None:
        """While a model call of this session waits for a place: where it stands, as the coordinator's latest waiting
        answer said (`queue_state.py`); None when no call waits."""
        return self.state.queue

    @property
    def detached(self) -> bool:
        """True while the coordinator is unreachable and calls are routed on their own."""
        return self.state.detached_at is not None or not self.state.replicas.urls

    def flush(self) -> None:
        """Wait until every report sent so far has reached the coordinator (reports leave in the background)."""
        if self._sync is not None:
            self._sync.flush()

    async def aflush(self) -> None:
        if self._async is not None:
            await self._async.flush()

    def sync_router(self) -> SyncRouter:
        if self._sync is None:
            self._sync = SyncRouter(self.config, self.state)
        return self._sync

    def async_router(self) -> AsyncRouter:
        if self._async is None:
            self._async = AsyncRouter(self.config, self.state)
        return self._async

    def step(
        self, step_id: str | int | None = None, *, expected_tools: list[str] | tuple[str, ...] | None = None
    ) -> None:
        """Say which step of the agent the next model calls belong to, and which tools it expects to call next: the
        next acquire carries them to the coordinator, and every later one until the next `step`. None leaves a
        field as the coordinator has it; `expected_tools=[]` says none are expected. Bad values raise
        `ConfigurationError` naming the field, and change nothing."""
        text = None if step_id is None else str(step_id)
        tools = None if expected_tools is None else list(expected_tools)
        validated(AcquireRequest, {"step_id": text, "expected_next_tools": tools})
        self.state.step = Step(text, None if tools is None else tuple(tools))

    # -- life cycle ------------------------------------------------------------------------------------------------

    def __enter__(self) -> Session:
        self.sync_router().register()
        self._heart = threading.Thread(target=self._beat, name=f"tao-heartbeat-{self.id}", daemon=True)
        self._heart.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self._stop.set()
        if self._heart is not None:
            self._heart.join(timeout=self.config.request_timeout_s + 1)
        self.sync_router().close()
        for client in self._clients:
            client.close()

    def _beat(self) -> None:
        while not self._stop.wait(timeout=max(1.0, self.state.lease_ttl_s / 6)):
            self.sync_router().heartbeat_if_due()

    async def __aenter__(self) -> Session:
        await self.async_router().register()
        self._async_heart = asyncio.create_task(self._async_beat())
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._async_heart is not None:
            self._async_heart.cancel()
        await self.async_router().close()
        for client in self._async_clients:
            await client.aclose()
        for sync_client in self._clients:
            sync_client.close()
        if self._sync is not None:
            self._sync.wait_for_retry()
            self._sync.http.close()

    async def _async_beat(self) -> None:
        while True:
            await asyncio.sleep(max(1.0, self.state.lease_ttl_s / 6))
            await self.async_router().heartbeat_if_due()

    # -- clients ---------------------------------------------------------------------------------------------------

    def http_client(self, **kwargs: Any) -> httpx2.Client:
        """An httpx2 client whose model calls are routed by this session (closed when the session closes)."""
        client = httpx2.Client(transport=TaoTransport(self.sync_router()), **kwargs)
        self._clients.append(client)
        return client

    def async_http_client(self, **kwargs: Any) -> httpx2.AsyncClient:
        client = httpx2.AsyncClient(transport=AsyncTaoTransport(self.async_router()), **kwargs)
        self._async_clients.append(client)
        return client

    def openai(self, **kwargs: Any) -> Any:
        import openai

        return _routed(openai.OpenAI, PLACEHOLDER_OPENAI, self.http_client(), kwargs)

    def async_openai(self, **kwargs: Any) -> Any:
        import openai

        return _routed(openai.AsyncOpenAI, PLACEHOLDER_OPENAI, self.async_http_client(), kwargs)

    def anthropic(self, **kwargs: Any) -> Any:
        import anthropic

        return _routed(anthropic.Anthropic, PLACEHOLDER_ANTHROPIC, self.http_client(), kwargs)

    def async_anthropic(self, **kwargs: Any) -> Any:
        import anthropic

        return _routed(anthropic.AsyncAnthropic, PLACEHOLDER_ANTHROPIC, self.async_http_client(), kwargs)

    def wrap(self, client: Client) -> Client:
        """A copy of an OpenAI/Anthropic client (sync or async) you built, routed through this session. Its base
        URL keeps its path; its host is replaced by the assigned node's."""
        copy = getattr(client, "with_options", None)
        if copy is None:
            raise ConfigurationError(f"wrap: {type(client).__name__} is not an OpenAI or Anthropic client")
        asynchronous = inspect.iscoroutinefunction(getattr(client, "close", None))
        http = self.async_http_client() if asynchronous else self.http_client()
        wrapped: Client = copy(http_client=http)
        return wrapped

    # -- tools -----------------------------------------------------------------------------------------------------

    def tool(
        self,
        name: str,
        *,
        command: str | None = None,
        timeout: float | None = None,
        sleep: float | None = None,
        background: bool | None = None,
        deadline: float | None = None,
    ) -> ToolCall:
        """Report a tool call: `with s.tool(…):`, `async with s.tool(…):`, or `@s.tool(…)` on a function.

        A shell `command` is read for hints (`tao_sdk.hints`) and for the program it runs; only those are sent,
        never the command."""
        parsed = command_hints(command) if command else None
        caps = [t for t in (timeout, parsed.timeout_s if parsed else None) if t is not None]
        hints = ToolHints(
            timeout_s=min(caps) if caps else None,
            sleep_s=sleep if sleep is not None else (parsed.sleep_s if parsed else None),
            background=background if background is not None else bool(parsed and parsed.background),
            deadline=deadline,
        )
        return ToolCall(self, name, hints, program_of(command) if command else None)

    def tool_start(self, name: str, **hints: Any) -> str:
        """Explicit form: returns the call id to give `tool_end`."""
        call = self.tool(name, **hints)
        call.start()
        self._open_calls[call.call_id] = call
        return call.call_id

    def tool_end(self, call_id: str, status: str = "ok") -> None:
        call = self._open_calls.pop(call_id, None)
        if call is None:
            raise ConfigurationError(f"tool_end: no open tool call {call_id!r}")
        call.end(status)

    @functools.cached_property
    def _open_calls(self) -> dict[str, ToolCall]:
        return {}


def _routed(make: Callable[..., Any], base_url: str, http: httpx2.Client | httpx2.AsyncClient, kwargs: Any) -> Any:
    """An OpenAI or Anthropic client built by `make` on the session's `http` client; its base URL's host is a
    placeholder the transport replaces, and its API key is "EMPTY" unless `kwargs` give one."""
    return make(base_url=base_url, http_client=http, **{"api_key": "EMPTY", **kwargs})


def _with_agent(context: AgentContext, agent: dict[str, Any]) -> AgentContext:
    """`context` with the session's keyword arguments (`workflow_id=`, …) in place of its fields, when given."""
    given = {name: value for name, value in agent.items() if value is not None}
    if not given:
        return context
    return validated(AgentContext, {**context.model_dump(), **given})


def _status(error: BaseException | None) -> str:
    if error is None:
        return "ok"
    return "timeout" if isinstance(error, TimeoutError) or "Timeout" in type(error).__name__ else "error"


class ToolCall:
    def __init__(self, session: Session, name: str, hints: ToolHints, program: str | None = None) -> None:
        self.session, self.name, self.hints, self.program = session, name, hints, program
        self.call_id = f"call-{uuid.uuid4().hex[:16]}"
        self.started = 0.0

    def start(self) -> None:
        self.started = time.monotonic()
        self.session.sync_router().tool_start(self.call_id, self.name, self.hints, self.program)

    def end(self, status: str) -> None:
        self.session.sync_router().tool_end(self.call_id, time.monotonic() - self.started, status)

    def __enter__(self) -> ToolCall:
        self.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self.end(_status(error))

    async def __aenter__(self) -> ToolCall:
        self.started = time.monotonic()
        await self.session.async_router().tool_start(self.call_id, self.name, self.hints, self.program)
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.session.async_router().tool_end(self.call_id, time.monotonic() - self.started, _status(error))

    def __call__(self, function: F) -> F:
        """As a decorator: every call of `function` is reported as one tool call (a fresh call id each time)."""
        session, name, hints, program = self.session, self.name, self.hints, self.program

        if inspect.iscoroutinefunction(function):

            @functools.wraps(function)
            async def run_async(*args: Any, **kwargs: Any) -> Any:
                async with ToolCall(session, name, hints, program):
                    return await function(*args, **kwargs)

            return run_async  # type: ignore[return-value]

        @functools.wraps(function)
        def run(*args: Any, **kwargs: Any) -> Any:
            with ToolCall(session, name, hints, program):
                return function(*args, **kwargs)

        return run  # type: ignore[return-value]


def session(
    coordinator: str | Sequence[str] | None = None,
    token: str | None = None,
    context: AgentContext | None = None,
    **options: Any,
) -> Session:
    """A session to use as `with …` or `async with …`; see `Session`."""
    return Session(coordinator, token, context, **options)
