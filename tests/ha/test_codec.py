"""The session record: every float field of `AgentSession` is declared a time or not, and a record read by another
process (another loop clock) holds the same wall-clock times."""

from __future__ import annotations

import dataclasses
import json
import math
import typing
from types import MappingProxyType, NoneType, UnionType
from typing import Any

import pytest

from tao_coordinator.core.model import (
    AgentProfile,
    AgentSession,
    CacheEvidence,
    DurationHints,
    EvidenceSource,
    Phase,
    ReadinessSchedule,
    RunningTool,
)
from tao_coordinator.ha.codec import (
    NON_TIME_FLOATS,
    TIME_FIELDS,
    SessionRecord,
    decode_record,
    encode_record,
    shift,
)


def float_fields(cls: type, seen: set[type] | None = None) -> set[str]:
    """`Class.field` of every field reachable from dataclass `cls` whose type holds a float."""
    seen = set() if seen is None else seen
    if cls in seen:
        return set()
    seen.add(cls)
    found = set()
    for name, hint in typing.get_type_hints(cls).items():
        for part in flatten(hint):
            if part is float:
                found.add(f"{cls.__name__}.{name}")
            elif isinstance(part, type) and dataclasses.is_dataclass(part):
                found |= float_fields(part, seen)
    return found


def flatten(hint: Any) -> list[Any]:
    """`hint` and every type among its arguments (`tuple[float, ...] | None` → tuple, float, None…)."""
    parts = [hint]
    for arg in typing.get_args(hint):
        if arg is not Ellipsis:
            parts += flatten(arg)
    return parts


def test_every_float_field_of_session_is_declared_a_time_or_not() -> None:
    fields = float_fields(AgentSession)
    undeclared = fields - TIME_FIELDS - NON_TIME_FLOATS
    assert not undeclared, f"declare these in ha/codec.py as TIME_FIELDS or NON_TIME_FLOATS: {sorted(undeclared)}"
    assert not TIME_FIELDS & NON_TIME_FLOATS
    assert fields == TIME_FIELDS | NON_TIME_FLOATS, "the codec declares fields AgentSession no longer has"


def test_time_fields_hold_floats_only() -> None:
    """`shift` moves a float, an optional float or a tuple of floats; nothing else may be declared a time."""
    for name in TIME_FIELDS:
        cls_name, field = name.split(".")
        cls = {c.__name__: c for c in (AgentSession, RunningTool, DurationHints, ReadinessSchedule, CacheEvidence)}[
            cls_name
        ]
        hint = typing.get_type_hints(cls)[field]
        allowed = {float, NoneType, tuple}
        assert {typing.get_origin(p) or p for p in flatten(hint)} <= allowed | {UnionType}, name


def sample(t0: float) -> AgentSession:
    """A session with every time set (from `t0`, in steps that floats add exactly) and every part present."""
    tool = RunningTool(
        call_id="call-1",
        tool="bash",
        started_at=t0 + 1.5,
        hints=DurationHints(timeout_s=30.0, sleep_s=2.0, background=True, deadline=t0 + 31.5),
        predicted_end=t0 + 4.25,
        predicted_at=t0 + 1.5,
        source="hint",
        program="pytest",
        readiness=ReadinessSchedule(horizon_s=8.0, initial=1, times=(t0 + 2.0, t0 + 3.5), levels=(2, 4)),
    )
    endless = dataclasses.replace(tool, call_id="call-2", predicted_end=math.inf, hints=DurationHints(deadline=None))
    return AgentSession(
        id="s-1",
        context=AgentProfile(
            harness="mini",
            workflow_id="w",
            parent_session_id="p",
            model="m",
            shared_prefix_tokens=512,
            expected_next_tools=("bash", "edit"),
            client_session_id="c",
            labels=MappingProxyType({"team": "a"}),
        ),
        registered_at=t0,
        lease_expires_at=t0 + 60.0,
        phase=Phase.IN_TOOL,
        node="node-1",
        version=7,
        acquire_pending=False,
        tools=(tool, endless),
        context_tokens=4096,
        expected_input_tokens=5000,
        completed_calls=3,
        output_tokens_total=900,
        evidence=(
            CacheEvidence("node-1", 4096, t0 + 1.25, EvidenceSource.USAGE),
            CacheEvidence("node-2", 1024, t0 + 0.5, EvidenceSource.KV_EVENTS, "CPU"),
        ),
        last_node="node-1",
        phase_since=t0 + 1.5,
        placed_at=t0 + 0.75,
        prompt_block_runs=((10, 4), (99, 2)),
        step_id="step-3",
    )


@pytest.mark.parametrize(("writer_offset", "reader_offset"), [(1.7e9 + 0.5, 1.7e9 - 1000.25), (4096.0, 4096.0)])
def test_a_record_keeps_wall_clock_times_across_loop_clocks(writer_offset: float, reader_offset: float) -> None:
    written = sample(t0=100.0)
    data = encode_record(SessionRecord(written, "lease-9", "token-9"), writer_offset)
    assert json.loads(data)["session"]["registered_at"] == 100.0 + writer_offset

    read = decode_record(data, reader_offset)

    assert (read.lease_id, read.token) == ("lease-9", "token-9")
    assert read.session == sample(t0=100.0 + writer_offset - reader_offset)
    assert read.session.tools[1].predicted_end == math.inf
    assert isinstance(read.session.context.labels, MappingProxyType)
    read.session.check()


def test_shift_leaves_durations_and_defaults_alone() -> None:
    session = AgentSession("s", AgentProfile(), registered_at=5.0, lease_expires_at=6.0)
    moved = shift(session, 10.0)
    assert (moved.registered_at, moved.lease_expires_at, moved.phase_since) == (15.0, 16.0, 10.0)
    assert moved.context is session.context
    assert shift(sample(0.0), 3.0).tools[0].hints.timeout_s == 30.0


def test_a_record_of_another_format_is_refused() -> None:
    data = json.loads(encode_record(SessionRecord(sample(0.0)), 0.0))
    data["format"] = 99
    with pytest.raises(ValueError, match="format 99"):
        decode_record(json.dumps(data), 0.0)
