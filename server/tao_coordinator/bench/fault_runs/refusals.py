"""Model calls a node refuses, as rows of the table: a node that answers 503 to every call while its `/health` says
200, a node killed with SIGKILL, and a coordinator that answers acquires out of protocol
(docs/coordinator.md#every-fault-in-one-table-tao-bench-faults).

Each node row: one `tao coordinator` process with the default fleet and core settings (2 s scrapes, demotion after
3 refusals in a row, a probe every 2 s) over two fake vLLM nodes, `bad` and `good`; `SESSIONS` SDK sessions, each in
its own thread, loop on a model call (non-streamed) and a short tool. After `WARM_S` the fault is put on `bad`, kept
`FAULT_S`, then undone (`bad` serves again; the killed one is started again on its port).

- calls / failed: the model calls made and those that raised, as the agents saw them (the target: ≥ 99 % served);
- added p50/p99: over the calls the SDK sent again after a refusal, their duration less the median of the calls that
  were not (the target: p99 ≤ 1 s);
- detect_s: from the fault put on to `GET /v1/nodes` showing `bad` demoted; recover_s: from the fault undone to
  `bad` shown restored (a probe call answered);
- the note: how many refusals in a row demoted the node (the target: 3), the refusals in all, the demotion and
  restoration log lines (one each), and the calls placed on `bad` while it was demoted (0).

The malformed row: a stand-in coordinator registers sessions and answers every acquire 200 without `node_url`; the
sessions (fail-open list: `good`) must fail open as from an unreachable coordinator: no call fails.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx2
from aiohttp import web

import tao_sdk

from ...fakevllm import FakeNodeConfig, ThreadedFleet
from ...fakevllm.config import DEFAULT_MODEL
from ...local_coordinator import CoordinatorProcess, coordinator_process, free_port
from . import FaultRow
from .observe import TIMEOUT_S, added_ms, metric, nodes, reached

SESSIONS = 8
WARM_S = 1.0
FAULT_S = 5.0
"""Longer than two scrapes (4 s), so the scrapes' own view of a killed node shows in the row too."""
TOOL_S = 0.05
FAST = FakeNodeConfig(time_scale=50)


@dataclass
class CallLog:
    """What the agents saw: every call's (start, duration, retried, node that served it), and the failures."""

    made: list[tuple[float, float, bool, str]] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def added_ms(self) -> tuple[float | None, float | None]:
        plain = [duration for _, duration, retried, _ in self.made if not retried]
        return added_ms(plain, [duration for _, duration, again, _ in self.made if again])


class RefusalAgents:
    """`SESSIONS` SDK sessions, each in a thread: a model call, then a short tool, until stopped."""

    def __init__(self, coordinator: str | None, fallback: list[str]) -> None:
        self.coordinator, self.fallback = coordinator, fallback
        self.calls = CallLog()
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._agent, args=(k,), daemon=True) for k in range(SESSIONS)]

    def __enter__(self) -> RefusalAgents:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(TIMEOUT_S)

    def _agent(self, k: int) -> None:
        with tao_sdk.session(self.coordinator, fallback_nodes=self.fallback, retry_interval_s=60) as s:
            client = s.openai(max_retries=0)
            turn = 0
            while not self.stop.is_set():
                started, before = time.monotonic(), s.state.retried_calls
                try:
                    client.chat.completions.create(
                        model=DEFAULT_MODEL,
                        messages=[{"role": "user", "content": f"agent {k} turn {turn}"}],
                        max_tokens=4,
                    )
                except Exception as error:  # an agent's failed call, counted as such
                    with self.calls.lock:
                        self.calls.failures.append(f"{type(error).__name__}: {error}"[:200])
                else:
                    node = s.state.last.node if s.state.last else "?"
                    retried = s.state.retried_calls > before
                    with self.calls.lock:
                        self.calls.made.append((started, time.monotonic() - started, retried, node))
                turn += 1
                with s.tool("bash", command=f"sleep {TOOL_S}"):
                    time.sleep(TOOL_S)


@dataclass(frozen=True)
class Timing:
    warm_s: float = WARM_S
    fault_s: float = FAULT_S


def run(timing: Timing = Timing()) -> list[FaultRow]:
    """The three rows; a `timing` other than the default only to test this run quickly."""
    return [refusing_row(timing), killed_row(timing), malformed_row(timing)]


def refusing_row(timing: Timing) -> FaultRow:
    with ThreadedFleet([FAST, FAST], kv_events=False) as fleet:
        bad, good = fleet.nodes

        def refusing(on: bool) -> None:
            config = bad.service.config.model_copy(update={"max_num_queued_reqs": 0 if on else None})
            fleet.call(lambda: setattr(bad.service, "config", config))

        return _node_row("node answers 503 (/health 200)", bad.url, good.url, refusing, timing)


def killed_row(timing: Timing) -> FaultRow:
    port = free_port()
    with ThreadedFleet(1, FAST, kv_events=False) as fleet, _node_process(port) as bad:

        def killed(on: bool) -> None:
            if on:
                bad.kill()
            else:
                bad.start()

        return _node_row("node killed (SIGKILL)", f"http://127.0.0.1:{port}", fleet.urls[0], killed, timing)


def _node_row(fault: str, bad_url: str, good_url: str, put: Callable[[bool], None], timing: Timing) -> FaultRow:
    with tempfile.TemporaryDirectory(prefix="tao-refusals-") as scratch:
        log = Path(scratch) / "coordinator.log"
        with coordinator_process([f"bad={bad_url}", f"good={good_url}"], log_path=log) as coordinator:
            reached(lambda: all(node["healthy"] for node in nodes(coordinator.url).values()))
            with _sdk_warnings(), RefusalAgents(coordinator.url, [bad_url, good_url]) as agents:
                time.sleep(timing.warm_s)
                faulted = time.monotonic()
                put(True)
                demoted_at = reached(lambda: nodes(coordinator.url)["bad"]["demoted"])
                reason = nodes(coordinator.url)["bad"]["demoted_reason"]
                time.sleep(max(0.0, faulted + timing.fault_s - time.monotonic()))
                undone = time.monotonic()
                put(False)
                restored_at = reached(lambda: not nodes(coordinator.url)["bad"]["demoted"])
                time.sleep(timing.warm_s)
            calls = agents.calls
            on_bad = sum(demoted_at <= at and at + d <= restored_at and node == "bad" for at, d, _, node in calls.made)
            refused = metric(coordinator.url, "tao_node_refused_calls_total", node="bad") or 0.0
            lines = _lines(coordinator)
            p50, p99 = calls.added_ms()
            note = (
                f"demoted: {reason}; {refused:g} refusals in all, {sum(r for *_, r, _ in calls.made)} calls retried; "
                f"log: {sum('bad demoted' in line for line in lines)} demotion line, "
                f"{sum('bad serves again' in line for line in lines)} restoration line; "
                f"{on_bad} calls served by bad while demoted"
            )
            if calls.failures:
                note += f"; first failure: {calls.failures[0]}"
            return FaultRow(
                fault,
                calls=len(calls.made) + len(calls.failures),
                failed=len(calls.failures),
                added_p50_ms=p50,
                added_p99_ms=p99,
                detect_s=round(demoted_at - faulted, 2),
                recover_s=round(restored_at - undone, 2),
                tracebacks=coordinator.tracebacks(),
                note=note,
            )


def malformed_row(timing: Timing) -> FaultRow:
    with (
        ThreadedFleet(1, FAST, kv_events=False) as fleet,
        _malformed_coordinator() as url,
        _sdk_warnings() as warned,
    ):
        with RefusalAgents(url, fleet.urls) as agents:
            time.sleep(timing.warm_s + timing.fault_s / 2)
        calls = agents.calls
        named = sum("malformed acquire answer" in message for message in warned)
        note = (
            "every acquire answered 200 without node_url; the sessions failed open to their fail-open node, "
            f"{named} of {SESSIONS} saying so once in their log"
        )
        if calls.failures:
            note += f"; first failure: {calls.failures[0]}"
        return FaultRow(
            "coordinator answers malformed acquire",
            calls=len(calls.made) + len(calls.failures),
            failed=len(calls.failures),
            note=note,
        )


class _NodeProcess:
    """`tao fake-vllm` on a fixed port, killed with SIGKILL and started again on the same port."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        command = [sys.executable, "-m", "tao_sdk.cli", "fake-vllm", "--port", str(self.port), "--time-scale", "50"]
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        url = f"http://127.0.0.1:{self.port}/health"
        reached(lambda: _answers(url) or self._exited())

    def _exited(self) -> bool:
        if self.process is not None and self.process.poll() is not None:
            raise RuntimeError(f"tao fake-vllm on port {self.port} exited with {self.process.returncode}")
        return False

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)


@contextmanager
def _node_process(port: int) -> Iterator[_NodeProcess]:
    node = _NodeProcess(port)
    node.start()
    try:
        yield node
    finally:
        node.kill()


@contextmanager
def _malformed_coordinator() -> Iterator[str]:
    """A stand-in coordinator on loopback: registration as the protocol says, every acquire admitted without its
    node's URL, every report 204."""

    async def register(request: web.Request) -> web.Response:
        body = await request.json()
        answer = {"session_id": body.get("session_id", "s"), "session_token": "t", "lease_ttl_s": 60}
        return web.json_response(answer, status=201)

    async def acquire(request: web.Request) -> web.Response:
        return web.json_response({"status": "admitted", "node": "good", "lease_id": "l"})

    async def noted(request: web.Request) -> web.Response:
        return web.Response(status=204)

    app = web.Application()
    app.router.add_post("/v1/sessions", register)
    app.router.add_post("/v1/sessions/{session_id}/acquire", acquire)
    app.router.add_post("/v1/sessions/{session_id}/{verb}", noted)
    app.router.add_delete("/v1/sessions/{session_id}", noted)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    runner = web.AppRunner(app, access_log=None)
    port = free_port()
    thread.start()

    async def start() -> None:
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port).start()

    asyncio.run_coroutine_threadsafe(start(), loop).result(10)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


@contextmanager
def _sdk_warnings() -> Iterator[list[str]]:
    """The SDK's warnings while inside, kept here rather than printed."""
    messages: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            messages.append(record.getMessage())

    logger, handler = logging.getLogger("tao_sdk"), Keep(logging.WARNING)
    logger.addHandler(handler)
    level, propagate = logger.level, logger.propagate
    logger.setLevel(logging.WARNING)
    logger.propagate = False
    try:
        yield messages
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        logger.propagate = propagate


def _answers(url: str) -> bool:
    try:
        return httpx2.get(url, timeout=1).status_code == 200
    except httpx2.HTTPError:
        return False


def _lines(coordinator: CoordinatorProcess) -> list[str]:
    """The log's messages (it is one JSON object a line)."""
    messages = []
    for line in coordinator.log_lines():
        with contextlib.suppress(ValueError):
            messages.append(str(json.loads(line).get("message", "")))
    return messages
