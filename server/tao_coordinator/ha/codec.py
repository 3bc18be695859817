"""A live session's record in Redis: the core `AgentSession`, the service's lease id and session token, as JSON.

The core's times are the writer's event-loop clock, which is monotonic and differs from process to process. A record
therefore holds every time as wall-clock (unix) time: `encode_record` adds the writer's `wall_offset()` to each time
field, `decode_record` subtracts the reader's, so a session read by a new leader has the same deadlines in wall time
as it had on the old one (to within the two hosts' clock difference).

Which float fields are times is declared here, by `Class.field`: `TIME_FIELDS` are shifted (a float, an optional float,
or a tuple of floats), `NON_TIME_FLOATS` (durations, shares) are not. Every float field reachable from `AgentSession`
must be in exactly one of the two sets; tests/ha/test_codec.py walks the dataclasses and fails otherwise, so a field
added to the core later forces a decision here. Infinite times stay infinite (JSON `Infinity`).
"""

from __future__ import annotations

import dataclasses
import json
import time
import typing
from asyncio import AbstractEventLoop, get_running_loop
from dataclasses import dataclass
from functools import cache
from types import MappingProxyType
from typing import Any

from pydantic import TypeAdapter

from ..core.model import AgentSession

FORMAT = 1
"""Version of the record layout; a reader refuses records of another version."""

TIME_FIELDS = frozenset(
    {
        "AgentSession.registered_at",
        "AgentSession.lease_expires_at",
        "AgentSession.phase_since",
        "AgentSession.placed_at",
        "RunningTool.started_at",
        "RunningTool.predicted_end",
        "RunningTool.predicted_at",
        "DurationHints.deadline",
        "ReadinessSchedule.times",
        "CacheEvidence.observed_at",
    }
)
"""Float fields holding a time of the core's clock, shifted between clocks."""

NON_TIME_FLOATS = frozenset(
    {
        "DurationHints.timeout_s",
        "DurationHints.sleep_s",
        "ReadinessSchedule.horizon_s",
    }
)
"""Float fields holding a duration or a plain number, stored as they are."""

_SESSION = TypeAdapter(AgentSession)


@dataclass(frozen=True, slots=True)
class SessionRecord:
    """What the leader keeps of one live session: the core's view, the service's lease id and the session's live
    token (a replica that takes over must accept the token the client holds)."""

    session: AgentSession
    lease_id: str | None = None
    token: str | None = None


def wall_offset(loop: AbstractEventLoop | None = None) -> float:
    """`wall − loop.time()` now: add it to a time of this loop's clock to get unix time."""
    return time.time() - (loop or get_running_loop()).time()


def encode_record(record: SessionRecord, offset: float) -> bytes:
    """The record as JSON, its times moved by `offset` (the writer's `wall_offset()`) into unix time."""
    moved = shift(record.session, offset)
    # pydantic serialises a Mapping field from a dict only (a MappingProxyType draws a warning)
    moved = dataclasses.replace(moved, context=dataclasses.replace(moved.context, labels=dict(moved.context.labels)))
    session = _SESSION.dump_python(moved)
    fields = {"format": FORMAT, "session": session, "lease_id": record.lease_id, "token": record.token}
    return json.dumps(fields).encode()


def decode_record(data: bytes | str, offset: float) -> SessionRecord:
    """A record written by `encode_record`, its times moved into the reader's clock (`offset`: its `wall_offset()`)."""
    raw = json.loads(data)
    if raw.get("format") != FORMAT:
        raise ValueError(f"session record of format {raw.get('format')!r}, expected {FORMAT}")
    session = _SESSION.validate_python(raw["session"])
    # pydantic rebuilds a Mapping as a dict; the core's labels are read-only
    context = dataclasses.replace(session.context, labels=MappingProxyType(dict(session.context.labels)))
    session = dataclasses.replace(session, context=context)
    return SessionRecord(shift(session, -offset), raw["lease_id"], raw.get("token"))


def shift(value: Any, delta: float) -> Any:
    """`value` (a core dataclass, or a tuple of them) with every field of `TIME_FIELDS` moved by `delta`."""
    if isinstance(value, tuple):
        return tuple(shift(item, delta) for item in value)
    if not dataclasses.is_dataclass(value) or isinstance(value, type):
        return value
    times, nested = _plan(type(value))
    changes: dict[str, Any] = {}
    for name in times:
        changes[name] = _move(getattr(value, name), delta)
    for name in nested:
        item = getattr(value, name)
        moved = shift(item, delta)
        if moved is not item:
            changes[name] = moved
    return dataclasses.replace(value, **changes) if changes else value


def _move(value: float | tuple[float, ...] | None, delta: float) -> float | tuple[float, ...] | None:
    if value is None:
        return None
    if isinstance(value, tuple):
        return tuple(t + delta for t in value)
    return value + delta


@cache
def _plan(cls: type) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The time fields of `cls`, and the fields whose type holds a dataclass (walked in turn)."""
    hints = typing.get_type_hints(cls)
    times = tuple(name for name in hints if f"{cls.__name__}.{name}" in TIME_FIELDS)
    nested = tuple(name for name, hint in hints.items() if name not in times and holds_dataclass(hint))
    return times, nested


def holds_dataclass(hint: Any) -> bool:
    """Whether a type hint is, or has among its arguments, a dataclass."""
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return True
    return any(holds_dataclass(arg) for arg in typing.get_args(hint))
