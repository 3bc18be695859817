"""httpx2 transports that route an OpenAI/Anthropic client's calls to the node the coordinator assigned.

For a model call (`POST …/chat/completions`, `…/completions`, `…/messages`, `…/responses`) the transport acquires a
node, rewrites the request's scheme, host and port to that node's (keeping the path, so the client's base URL only
needs the right path: `http://tao/v1` for OpenAI, `http://tao` for Anthropic), adds `X-Session-ID` (vLLM ≥ 0.30
copies it into its KV events), asks OpenAI streams for their usage chunk, and wraps the response stream so that
usage and time to first token are read as the bytes pass — nothing is buffered for the caller — and `llm_end` is
reported when the stream closes. The acquire names the model of the request body (`call_model.py`), so the call
goes to a node serving it. Other requests (`GET /v1/models`, `count_tokens`) go to the last node used,
without acquiring.

A call the node refused before answering any of it (connection refused or reset, 503, 429: `refusals.py`) is
reported as refused and sent once more to the node `reroute` names; the caller sees only the second answer. With no
other node, the refusal is the call's answer.

Invariant: every acquired call is reported exactly once (`llm_end`), also when the node fails or the caller stops
reading early; a refused and retried call is two calls, each reported once.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import httpx2

from .call_model import call_model
from .calls import describe
from .refusals import httpx_refusal, refused_status
from .router import AsyncRouter, Grant, SyncRouter
from .tls import shared_ssl_context
from .usage import Usage, UsageObserver, with_usage_requested

MODEL_PATHS = ("/chat/completions", "/completions", "/messages", "/responses")
CHARS_PER_TOKEN = 4


def is_model_call(request: httpx2.Request) -> bool:
    return request.method == "POST" and request.url.path.endswith(MODEL_PATHS)


def prepare(request: httpx2.Request, grant: Grant, session_id: str) -> tuple[bool, int]:
    """Point the request at the granted node; return (streaming, expected prompt tokens)."""
    node = httpx2.URL(grant.node_url)
    request.url = request.url.copy_with(scheme=node.scheme, host=node.host, port=node.port)
    request.headers["Host"] = node.netloc.decode()
    request.headers["X-Session-ID"] = session_id
    body = request.content
    content, streaming = with_usage_requested(body, request.url.path)
    if content is not body:
        request.stream = httpx2.ByteStream(content)
        request.headers["Content-Length"] = str(len(content))
    return streaming, len(body) // CHARS_PER_TOKEN


def expected_tokens(request: httpx2.Request) -> int:
    return len(request.content) // CHARS_PER_TOKEN


def failed(error: BaseException) -> Usage:
    """The report of a call that raised before any response: refused, or failed otherwise (a read timeout)."""
    return Usage(error=describe(error), refused=httpx_refusal(error) is not None)


def answered(usage: Usage, status: int) -> Usage:
    """The report of a call answered with `status`, from what was read of the answer."""
    if status >= 400 and usage.error is None:
        usage.error = f"HTTP {status}"
    usage.refused = refused_status(status) is not None
    return usage


class _ObservedStream(httpx2.SyncByteStream):
    def __init__(self, inner: Any, observer: UsageObserver, done: Callable[[Usage], None]) -> None:
        self.inner, self.observer, self.done = inner, observer, done
        self.reported = False

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self.inner:
            self.observer.feed(chunk)
            yield chunk

    def close(self) -> None:
        try:
            self.inner.close()
        finally:
            if not self.reported:
                self.reported = True
                self.done(self.observer.finish())


class _AsyncObservedStream(httpx2.AsyncByteStream):
    def __init__(self, inner: Any, observer: UsageObserver, done: Callable[[Usage], Awaitable[None]]) -> None:
        self.inner, self.observer, self.done = inner, observer, done
        self.reported = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self.inner:
            self.observer.feed(chunk)
            yield chunk

    async def aclose(self) -> None:
        try:
            await self.inner.aclose()
        finally:
            if not self.reported:
                self.reported = True
                await self.done(self.observer.finish())


class TaoTransport(httpx2.BaseTransport):
    def __init__(self, router: SyncRouter, inner: httpx2.BaseTransport | None = None) -> None:
        self.router = router
        self.inner = inner or httpx2.HTTPTransport(verify=shared_ssl_context())

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        request.read()
        if not is_model_call(request):
            grant = self.router.state.last or self.router.fallback()
            prepare(request, grant, self.router.state.session_id)
            return self.inner.handle_request(request)
        router, tokens, model = self.router, expected_tokens(request), call_model(request.content)
        grant, retry = router.acquire(tokens, model=model), True
        while True:
            streaming, _ = prepare(request, grant, router.state.session_id)
            started = time.monotonic()
            try:
                response = self.inner.handle_request(request)
            except Exception as error:
                router.llm_end(grant, failed(error), time.monotonic() - started)
                how = httpx_refusal(error)
                if how is None or not retry or (other := router.reroute(grant, how, tokens, model)) is None:
                    raise
                grant, retry = other, False
                continue
            if retry and (how := refused_status(response.status_code)) is not None:
                router.llm_end(grant, answered(Usage(), response.status_code), time.monotonic() - started)
                if (other := router.reroute(grant, how, tokens, model)) is None:
                    return response  # reported: nothing to observe
                response.close()
                grant, retry = other, False
                continue
            break
        if not retry and refused_status(response.status_code) is None:
            router.served_instead(grant)
        served = grant

        def done(usage: Usage) -> None:
            router.llm_end(served, answered(usage, response.status_code), time.monotonic() - started)

        response.stream = _ObservedStream(response.stream, UsageObserver(streaming, started), done)
        return response

    def close(self) -> None:
        self.inner.close()


class AsyncTaoTransport(httpx2.AsyncBaseTransport):
    def __init__(self, router: AsyncRouter, inner: httpx2.AsyncBaseTransport | None = None) -> None:
        self.router = router
        self.inner = inner or httpx2.AsyncHTTPTransport(verify=shared_ssl_context())

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        await request.aread()
        if not is_model_call(request):
            grant = self.router.state.last or self.router.fallback()
            prepare(request, grant, self.router.state.session_id)
            return await self.inner.handle_async_request(request)
        router, tokens, model = self.router, expected_tokens(request), call_model(request.content)
        grant, retry = await router.acquire(tokens, model=model), True
        while True:
            streaming, _ = prepare(request, grant, router.state.session_id)
            started = time.monotonic()
            try:
                response = await self.inner.handle_async_request(request)
            except Exception as error:
                await router.llm_end(grant, failed(error), time.monotonic() - started)
                how = httpx_refusal(error)
                if how is None or not retry or (other := await router.reroute(grant, how, tokens, model)) is None:
                    raise
                grant, retry = other, False
                continue
            if retry and (how := refused_status(response.status_code)) is not None:
                await router.llm_end(grant, answered(Usage(), response.status_code), time.monotonic() - started)
                if (other := await router.reroute(grant, how, tokens, model)) is None:
                    return response
                await response.aclose()
                grant, retry = other, False
                continue
            break
        if not retry and refused_status(response.status_code) is None:
            router.served_instead(grant)
        served = grant

        async def done(usage: Usage) -> None:
            await router.llm_end(served, answered(usage, response.status_code), time.monotonic() - started)

        response.stream = _AsyncObservedStream(response.stream, UsageObserver(streaming, started), done)
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()
