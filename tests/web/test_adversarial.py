"""Adversarial probes of a real coordinator (loopback, auth on, served as `tao coordinator` serves it) for what a
schema fuzzer does not generate: hostile headers, slow and truncated bodies, numbers and strings at and past every
limit of the protocol, session ids at every length and character class, and the memory the coordinator can be made
to hold.

Every probe goes through `Probes.send`, which fails the test on any 5xx, on any answer later than `HANG_BOUND_S`,
and on any change of the live sessions (`GET /v1/sessions`, leases included: a refused request renews none) after a
refused request. Answers are counted by status over the module; `test_no_probe_got_a_server_error` prints the
counts and checks them (it runs last).
"""

import asyncio
import contextlib
import json
import re
import string
import time
import tracemalloc
import types
from collections import Counter
from typing import Any, get_args, get_origin

import pytest
from pydantic import BaseModel

from tao_coordinator.bench.session_memory import TOOL_NAMES, WIDE, largest_context
from tao_coordinator.core.settings import CoreSettings
from tao_coordinator.web import serve
from tao_coordinator.web.limits import CONNECTION_BYTES_BOUND, SESSION_BYTES_BOUND
from tao_coordinator.web.timeline import ENTRIES
from tao_sdk import protocol
from tao_sdk.ids import SESSION_ID_PATTERN

from .conftest import API_TOKEN, Running, http_request, raw_exchange, running_coordinator

MAX_RUNNING_TOOLS = CoreSettings().max_running_tools
SERVER = {"body_timeout_s": 0.5, "idle_timeout_s": 1.0, "acquire_wait_s": 0.2}
HANG_BOUND_S = SERVER["body_timeout_s"] + serve.LINGER_S + 1.5
"""Longest any probe may take to be answered or closed."""
ID_CHARACTERS = set(string.ascii_letters + string.digits + "._:@+-")
tally: Counter[int] = Counter()
started = time.monotonic()


class Probes:
    def __init__(self, c: Running) -> None:
        self.c = c

    async def sessions(self) -> dict[str, dict[str, Any]]:
        await self.c.settled()
        status, body = await self.c.call("GET", "/v1/sessions", token=API_TOKEN)
        assert status == 200
        return {s["session_id"]: s for s in body["sessions"]}

    async def send(self, request: bytes, *, half_close: bool = False) -> tuple[int | None, bytes]:
        before = await self.sessions()
        status, data, took = await raw_exchange(self.c.url, request, timeout=HANG_BOUND_S + 1, half_close=half_close)
        assert took <= HANG_BOUND_S, (took, request[:200])
        tally[status or 0] += 1
        assert status is None or status < 500, (request[:300], data[:500])
        if status is None or status >= 400 or _all_refused(data):
            after = await self.sessions()
            assert after.keys() == before.keys(), request[:300]
            for sid, state in after.items():
                renewed = state.pop("lease_expires_in_s") > before[sid].pop("lease_expires_in_s") + 0.05
                assert not renewed and state == before[sid], (request[:300], sid)
        return status, data

    async def send_json(self, method: str, path: str, body: Any, token: str | None) -> tuple[int | None, bytes]:
        headers = [("Authorization", f"Bearer {token}".encode())] if token else []
        raw = b"" if body is None else json.dumps(body).encode()
        return await self.send(http_request(method, path, raw, headers))


def _all_refused(data: bytes) -> bool:
    """A `/v1/events` answer (200) in which every event was refused."""
    try:
        results = json.loads(data.partition(b"\r\n\r\n")[2]).get("results")
    except (ValueError, AttributeError):
        return False
    return isinstance(results, list) and not any(r["ok"] for r in results)


def _error_field(data: bytes) -> str | None:
    body = data.partition(b"\r\n\r\n")[2]
    try:
        return json.loads(body).get("field")
    except ValueError:
        return None


# -- hostile headers ---------------------------------------------------------------------------------------------

HOSTILE_HEADERS: list[list[tuple[str, bytes]]] = [
    [("Authorization", b"Bearer \xff\xfe")],
    [("Authorization", b"\x80\x81\x82")],
    [("Authorization", b"Bearer " + "é".encode() * 10)],
    [("Authorization", b"Bearer " + b"a" * 4_000)],
    [("Authorization", b"Bearer " + b"a" * 9_000)],  # past the field limit
    [("Authorization", f"Bearer {API_TOKEN}".encode()), ("Authorization", b"Bearer wrong")],
    [("Authorization", b"Bearer wrong"), ("Authorization", f"Bearer {API_TOKEN}".encode())],
    [("Authorization", b"Basic dXNlcjpwYXNz")],
    [("Authorization", b"Bearer")],
    [("Authorization", b"")],
    [("X-Junk", b"x" * 4_000)],
    [("X-Junk", b"x" * 100_000)],
    [(f"X-H{k}", b"v") for k in range(40)],  # more headers than allowed
    [("Content-Type", b"\xff\xfe/json")],
    [("Content-Length", b"5"), ("Content-Length", b"7")],
    [("Content-Length", b"-1")],
    [("Content-Length", b"99999999999999999999999")],
    [("Content-Length", b"abc")],
    [("Transfer-Encoding", b"chunked"), ("Content-Length", b"0")],
    [("Transfer-Encoding", b"gzip, chunked")],
    [("Transfer-Encoding", b"chunked")],
    [("X-Session-Id", b"\xff/../x")],
]


async def test_hostile_headers(tmp_path, fleet):
    async with running_coordinator(tmp_path, fleet, server=SERVER) as c:
        probes = Probes(c)
        session, token = await c.register()
        targets = [
            ("POST", "/v1/sessions", b'{"session_id": "hostile"}'),
            ("POST", f"/v1/sessions/{session}/heartbeat", b""),
            ("POST", f"/v1/sessions/{session}/tool_start", b'{"call_id": "h", "tool": "x"}'),
            ("DELETE", f"/v1/sessions/{session}", b""),
            ("POST", "/v1/events", b'{"events": [{"kind": "register", "session_id": "hostile2"}]}'),
            ("GET", "/v1/sessions", b""),
        ]
        for method, path, body in targets:
            for headers in HOSTILE_HEADERS:
                status, data = await probes.send(http_request(method, path, body, headers))
                assert status is None or status >= 400 or _all_refused(data), (method, path, headers, data[:300])
        # non-UTF-8 bytes in the request line
        for line in (b"POST /v1/sessions/\xff\xfe/heartbeat", b"GET /v1/\x00sessions", b"GET " + b"/x" * 5_000):
            request = line + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
            status, _ = await probes.send(request)
            assert status is None or status >= 400
        assert (await c.call("POST", f"/v1/sessions/{session}/heartbeat", None, token))[0] == 204


# -- slow and truncated bodies -----------------------------------------------------------------------------------


async def test_slow_truncated_and_endless_bodies(tmp_path, fleet):
    async with running_coordinator(tmp_path, fleet, server=SERVER) as c:
        probes = Probes(c)
        session, token = await c.register()
        auth = [("Authorization", f"Bearer {token}".encode())]
        api = [("Authorization", f"Bearer {API_TOKEN}".encode())]
        paths = [("/v1/events", []), ("/v1/sessions", api), (f"/v1/sessions/{session}/tool_start", auth)]
        for path, headers in paths:
            never = http_request("POST", path, b"{", [*headers, ("Content-Length", b"1000")])
            assert (await probes.send(never))[0] == 408
            chunked = http_request("POST", path, b'5\r\n{"a":\r\n', [*headers, ("Transfer-Encoding", b"chunked")])
            assert (await probes.send(chunked))[0] == 408
            truncated = http_request("POST", path, b'{"ev', [*headers, ("Content-Length", b"100")])
            status, _ = await probes.send(truncated, half_close=True)
            assert status in (None, 400)
        # a body trickled in one byte at a time, slower than the body timeout allows
        host, port = "127.0.0.1", int(c.url.rpartition(":")[2])
        reader, writer = await asyncio.open_connection(host, port)
        body = b'{"events": [{"kind": "heartbeat", "session_id": "x"}]}'
        writer.write(http_request("POST", "/v1/events", b"", [("Content-Length", str(len(body)).encode())]))
        began = time.monotonic()
        first = asyncio.create_task(reader.read(4096))
        try:
            for byte in body:
                if first.done():
                    break
                writer.write(bytes([byte]))
                await writer.drain()
                await asyncio.sleep(0.05)
        except ConnectionError:
            pass  # the server closed the connection: what is expected
        answer = await asyncio.wait_for(first, HANG_BOUND_S)
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()
        assert answer.startswith(b"HTTP/1.1 408") and time.monotonic() - began <= HANG_BOUND_S + 1
        tally[408] += 1
        # headers that never end: closed after the idle timeout, with nothing answered
        status, _, took = await raw_exchange(c.url, b"POST /v1/events HTTP/1.1\r\nHost: x\r\n", timeout=5)
        assert status is None and SERVER["idle_timeout_s"] - 0.1 <= took <= HANG_BOUND_S
        tally[0] += 1


# -- numbers and strings at and past every limit -----------------------------------------------------------------


def _bounds(model: type[BaseModel], prefix: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], str, Any, Any]]:
    """(field path, kind, lowest, highest) of every bounded number and string of `model` and its parts."""
    found = []
    for name, field in model.model_fields.items():
        path = (*prefix, name)
        inner = field.annotation
        if get_origin(inner) is types.UnionType:  # `X | None`: the bounds are X's
            inner = next(arg for arg in get_args(inner) if arg is not type(None))
        if isinstance(inner, type) and issubclass(inner, BaseModel):
            found += _bounds(inner, path)
            continue
        limits = {type(m).__name__: m for m in field.metadata}
        if "Le" in limits or "Ge" in limits:
            kind = "int" if "int" in str(inner) else "float"
            lo = getattr(limits.get("Ge"), "ge", None)
            hi = getattr(limits.get("Le"), "le", None)
            found.append((path, kind, lo, hi))
        elif "MaxLen" in limits and get_origin(inner) in (list, dict):
            kind = "list" if get_origin(inner) is list else "dict"
            found.append((path, kind, getattr(limits.get("MinLen"), "min_length", 0), limits["MaxLen"].max_length))
        elif "MaxLen" in limits and "str" in str(inner) and "_PydanticGeneralMetadata" not in limits:
            found.append((path, "str", getattr(limits.get("MinLen"), "min_length", 0), limits["MaxLen"].max_length))
    return found


def _value(kind: str, n: Any, template: Any = None) -> Any:
    if kind == "str":
        return "x" * n
    if kind == "list":
        return [template or "t"] * n
    if kind == "dict":
        return {f"k{i}": "v" for i in range(n)}
    return int(n) if kind == "int" else float(n)


def _past(kind: str, n: Any, up: bool) -> Any:
    if kind in ("str", "list", "dict"):
        return _value(kind, n + 1 if up else n - 1)
    if kind == "int":
        return n + 1 if up else n - 1
    return n * (1 + 1e-9) + 1e-6 if up else n - 1e-6


def _with(base: dict[str, Any], path: tuple[str, ...], value: Any) -> dict[str, Any]:
    body = dict(base)
    if len(path) == 1:
        body[path[0]] = value
    else:
        body[path[0]] = _with(body.get(path[0], {}), path[1:], value)
    return body


async def test_every_number_and_string_at_and_past_its_limit(tmp_path, fleet):
    async with running_coordinator(tmp_path, fleet, server=SERVER) as c:
        probes = Probes(c)
        session, token = await c.register()
        calls = f"/v1/sessions/{session}"
        heartbeat = {"kind": "heartbeat", "session_id": session, "session_token": token}
        endpoints: list[tuple[str, type[BaseModel], dict[str, Any], str, Any]] = [
            ("/v1/sessions", protocol.RegisterRequest, {}, API_TOKEN, None),
            (f"{calls}/acquire", protocol.AcquireRequest, {"wait_s": 0}, token, None),
            (f"{calls}/llm_end", protocol.LlmEndRequest, {"node": "node-0"}, token, None),
            (f"{calls}/tool_start", protocol.ToolStartRequest, {"call_id": "c", "tool": "x"}, token, None),
            (f"{calls}/tool_end", protocol.ToolEndRequest, {"call_id": "nope"}, token, None),
            ("/v1/events", protocol.EventsRequest, {"events": [heartbeat]}, token, heartbeat),
        ]
        checked = 0
        for path, model, base, auth, item in endpoints:
            for field, kind, lo, hi in _bounds(model):
                if field == ("session_id",):
                    continue  # its pattern: test_session_ids_at_every_length_and_character_class
                dotted = ".".join(field)
                for limit, up in ((lo, False), (hi, True)):
                    if limit is None:
                        continue
                    body = _with(base, field, _value(kind, limit, item))
                    if path.endswith("tool_start"):
                        body = {**body, "call_id": f"c{checked}"} if field != ("call_id",) else body
                    status, data = await probes.send_json("POST", path, body, auth)
                    assert status not in (400, 422), (dotted, limit, data[-300:])
                    if kind in ("str", "list", "dict") and limit == 0 and not up:
                        continue
                    status, data = await probes.send_json(
                        "POST", path, _with(base, field, _past(kind, limit, up)), auth
                    )
                    assert (status, _error_field(data)) == (422, dotted), (path, dotted, data[-300:])
                    checked += 1
        # integers past any field's range, and numbers JSON cannot hold in a double
        for raw in ("1" + "0" * 19, "1" + "0" * 20, "-" + "9" * 25, "1e308", "1e309", "-1e309", "NaN", "Infinity"):
            body = f'{{"expected_input_tokens": {raw}, "wait_s": 0}}'.encode()
            headers = [("Authorization", f"Bearer {token}".encode())]
            status, data = await probes.send(http_request("POST", f"{calls}/acquire", body, headers))
            assert status in (400, 422), (raw, data[-300:])
        assert checked >= 30


# -- session ids -------------------------------------------------------------------------------------------------


def _allowed(session_id: str) -> bool:
    return (
        1 <= len(session_id) <= 200
        and set(session_id) <= ID_CHARACTERS
        and (session_id[0].isascii() and (session_id[0].isalnum() or session_id[0] == "_"))
    )


async def test_session_ids_at_every_length_and_character_class(tmp_path, fleet):
    candidates = ["", "a", "a" * 199, "a" * 200, "a" * 201, "a" * 10_000, ".", "..", "...", "_", "0"]
    candidates += [f"a{ch}" for ch in string.printable] + [f"{ch}a" for ch in string.printable]
    candidates += ["aé", "a😀", "a\u200b", "a\x00", "a\x7f", "Å", "a%2F", "a%00"]
    async with running_coordinator(tmp_path, fleet, server=SERVER) as c:
        probes = Probes(c)
        for k, session_id in enumerate(dict.fromkeys(candidates)):
            via_events = k % 3 == 0
            if via_events:
                body = {"events": [{"kind": "register", "session_id": session_id}]}
                status, data = await probes.send_json("POST", "/v1/events", body, API_TOKEN)
                answer = json.loads(data.partition(b"\r\n\r\n")[2])
                status = answer["results"][0]["status"] if status == 200 else status
            else:
                status, data = await probes.send_json("POST", "/v1/sessions", {"session_id": session_id}, API_TOKEN)
            assert _allowed(session_id) == bool(re.fullmatch(SESSION_ID_PATTERN, session_id)), session_id
            if _allowed(session_id):
                assert status == 201, (session_id, data[-300:])
                # reachable as itself, unescaped, in a path
                assert session_id in c.service.session_tokens
                token = c.service.session_tokens[session_id]
                answer = await probes.send(
                    http_request(
                        "POST",
                        f"/v1/sessions/{session_id}/heartbeat",
                        headers=[("Authorization", f"Bearer {token}".encode())],
                    )
                )
                assert answer[0] == 204, session_id
            else:
                assert status == 422, (session_id, data[-300:])


# -- memory bounds -----------------------------------------------------------------------------------------------


def _event(session: str, token: str, kind: str, call_id: str, tool: str | None = None) -> dict[str, Any]:
    part = {"call_id": call_id, "tool": tool} if kind == "tool_start" else {"call_id": call_id, "duration_s": 0.1}
    return {"kind": kind, "session_id": session, "session_token": token, kind: part}


async def test_what_a_session_can_make_the_coordinator_hold_is_bounded(tmp_path, fleet):
    """Its context at its budget; a full timeline (model calls with the longest error, tools with ids past what a
    timeline keeps); a learned level of its own for each of 64 tools; 64 tools running whose ids and names fill
    their budget: every string in 4-byte characters."""

    async def fill(sessions: int) -> None:
        for _ in range(sessions):
            session, token = await c.register(context=largest_context())
            for _ in range((ENTRIES - 2 * MAX_RUNNING_TOOLS) // 3):  # each call: in_llm, its end, admitted
                status, grant = await c.call("POST", f"/v1/sessions/{session}/acquire", {"wait_s": 5}, token)
                assert status == 200, grant
                end = {"node": grant["node"], "lease_id": grant["lease_id"], "error": WIDE * 2_000}
                assert (await c.call("POST", f"/v1/sessions/{session}/llm_end", end, token))[0] == 204
            for call_ids in (
                [f"L{k:02d}" + WIDE * 15 for k in range(MAX_RUNNING_TOOLS)],
                [f"{k:02d}" + WIDE * 17 for k in range(MAX_RUNNING_TOOLS)],  # 64 × (70 + 58) bytes: the budget
            ):
                starts = [_event(session, token, "tool_start", i, TOOL_NAMES[k]) for k, i in enumerate(call_ids)]
                starts.append(_event(session, token, "tool_start", "one-more", "x"))
                _, answer = await c.call("POST", "/v1/events", {"events": starts})
                assert [r["status"] for r in answer["results"]] == [204] * MAX_RUNNING_TOOLS + [409]
                if call_ids[0].startswith("L"):  # ended: each leaves a level of the session's own
                    ends = [_event(session, token, "tool_end", i) for i in call_ids]
                    _, answer = await c.call("POST", "/v1/events", {"events": ends})
                    assert all(r["ok"] for r in answer["results"]), answer["results"]
        await c.settled()

    async with running_coordinator(tmp_path, fleet, server=SERVER) as c:
        tracemalloc.start()
        try:
            await fill(2)  # every code path and cache warmed: what follows is the cost of more sessions
            before = tracemalloc.take_snapshot()
            await fill(4)
            after = tracemalloc.take_snapshot()
        finally:
            tracemalloc.stop()
        per_session = sum(stat.size_diff for stat in after.compare_to(before, "filename")) / 4
        print(f"\nper session, at every limit: {per_session / 1024:.0f} KiB (bound {SESSION_BYTES_BOUND / 1024:.0f})")
        assert per_session <= SESSION_BYTES_BOUND
        assert all(len(s.tools) == MAX_RUNNING_TOOLS for s in c.service.coordinator.sessions.values())
        assert all(len(t.entries) == ENTRIES for t in c.service.timelines.live.values())


async def test_distinct_tool_names_and_gone_sessions_leave_bounded_state(tmp_path, fleet):
    core = {"forecast_max_levels": 64}
    async with running_coordinator(tmp_path, fleet, server=SERVER, core=core) as c:
        session, token = await c.register()
        events = []
        for k in range(600):
            name = f"tool-{k}-" + "x" * 150
            events.append(
                {
                    "kind": "tool_start",
                    "session_id": session,
                    "session_token": token,
                    "tool_start": {"call_id": f"c{k}", "tool": name, "program": f"p{k}"},
                }
            )
            events.append(
                {
                    "kind": "tool_end",
                    "session_id": session,
                    "session_token": token,
                    "tool_end": {"call_id": f"c{k}", "duration_s": 1.0},
                }
            )
        status, answer = await c.call("POST", "/v1/events", {"events": events[:1000]})
        assert status == 200 and all(r["ok"] for r in answer["results"])
        status, answer = await c.call("POST", "/v1/events", {"events": events[1000:]})
        assert status == 200 and all(r["ok"] for r in answer["results"])
        assert c.service.history.levels <= core["forecast_max_levels"]
        # closed and expired sessions leave no token, lease or waiter behind
        for _ in range(50):
            sid, tok = await c.register()
            await c.call("POST", f"/v1/sessions/{sid}/acquire", {"wait_s": 0}, tok)
            assert (await c.call("DELETE", f"/v1/sessions/{sid}", token=tok))[0] == 204
        service = c.service
        leased, waiting, unclaimed = service.grants.holds()
        assert set(service.session_tokens) == {session} and leased <= {session}
        assert not waiting and unclaimed <= {session}


async def test_connections_hold_bounded_memory_and_count(tmp_path, fleet):
    server = {**SERVER, "max_connections": 60, "idle_timeout_s": 5.0}
    async with running_coordinator(tmp_path, fleet, server=server) as c:
        host, port = "127.0.0.1", int(c.url.rpartition(":")[2])
        tracemalloc.start()
        try:
            before = tracemalloc.take_snapshot()
            held = []
            for _ in range(50):
                reader, writer = await asyncio.open_connection(host, port)
                line = b"v" * (serve.MAX_FIELD_BYTES - 16)
                headers = b"".join(f"X-H{k}: ".encode() + line + b"\r\n" for k in range(serve.MAX_HEADERS - 2))
                writer.write(b"POST /v1/events HTTP/1.1\r\nHost: x\r\n" + headers)  # never finished
                held.append((reader, writer))
            await asyncio.sleep(0.5)
            after = tracemalloc.take_snapshot()
        finally:
            tracemalloc.stop()
        per_connection = sum(stat.size_diff for stat in after.compare_to(before, "filename")) / len(held)
        bound = CONNECTION_BYTES_BOUND
        print(f"\nper connection sending the most headers: {per_connection / 1024:.0f} KiB (bound {bound / 1024:.0f})")
        assert per_connection <= bound
        extra = [await asyncio.open_connection(host, port) for _ in range(20)]

        async def closed_at_once(reader: asyncio.StreamReader) -> bool:
            try:
                # a busy machine may take a while to accept; well inside the idle timeout (5 s), which would close
                # the accepted ones too
                return await asyncio.wait_for(reader.read(), 3.0) == b""
            except (TimeoutError, ConnectionError):
                return False

        closed = sum(await asyncio.gather(*(closed_at_once(reader) for reader, _ in extra)))
        assert closed == c.site.refused == 10  # 60 open at most: 50 held, 10 more accepted, the rest closed
        for _, writer in held + extra:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()


def test_no_probe_got_a_server_error():
    if not tally:
        pytest.skip("no probe of this module ran")
    total = sum(tally.values())
    by_status = ", ".join(f"{'closed' if s == 0 else s}: {n}" for s, n in sorted(tally.items()))
    print(f"\nadversarial probes: {total} in {time.monotonic() - started:.1f} s; by status {by_status}")
    assert not [status for status in tally if status >= 500]
