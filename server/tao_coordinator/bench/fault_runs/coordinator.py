"""The coordinator's own faults as rows of the table: a node killed under idle sessions, the coordinator killed -9
under a flood of tool reports, and the coordinator stalled (SIGSTOP) under SDK sessions. The runs themselves are
`bench/faults.py`, shared with `tao bench coordinator`."""

from __future__ import annotations

import tempfile
from pathlib import Path

from ...local_coordinator import tracebacks_in
from .. import faults
from . import FaultRow
from .observe import added_ms

STALL_S = 10.0


def run() -> list[FaultRow]:
    with tempfile.TemporaryDirectory(prefix="tao-faults-") as scratch:
        logs = Path(scratch)
        killed = faults.node_kill(log_path=logs / "node-kill.log")
        crashed = faults.coordinator_kill(log_path=logs / "coordinator-kill.log")
        stalled = faults.stall(STALL_S, log_path=logs / "stall.log")
        tracebacks = [tracebacks_in(logs / name) for name in ("node-kill.log", "coordinator-kill.log", "stall.log")]
    added_p50_ms, added_p99_ms = added_ms(stalled.durations_outside_s, stalled.durations_during_s)
    return [
        FaultRow(
            "node killed (idle sessions on it)",
            calls=killed.on_killed_node,
            failed=killed.on_killed_node - killed.moved,
            detect_s=killed.notice_s,
            recover_s=killed.last_moved_s,
            tracebacks=tracebacks[0],
            note=f"{killed.moved} of {killed.on_killed_node} sessions it held placed on the other node",
        ),
        FaultRow(
            "coordinator killed -9 under tool reports",
            calls=crashed.acknowledged,
            failed=0,
            acked_lost=crashed.lost,
            recover_s=crashed.restart_s,
            tracebacks=tracebacks[1],
            note=f"SQLite integrity {crashed.integrity}; restart {'served' if crashed.restarted else 'FAILED'}",
        ),
        FaultRow(
            f"coordinator stalled {STALL_S:g} s (SIGSTOP)",
            calls=stalled.calls,
            failed=stalled.failed,
            added_p50_ms=added_p50_ms,
            added_p99_ms=added_p99_ms,
            recover_s=max(stalled.rescheduled_s, default=None),
            tracebacks=tracebacks[2],
            note=f"longest call during the stall {stalled.longest_call_during_stall_s:.2f} s "
            f"(bound {stalled.call_bound_s:g} s); {stalled.stuck_at_end} sessions left in a wrong phase",
        ),
    ]
