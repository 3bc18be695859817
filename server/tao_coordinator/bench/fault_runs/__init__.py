"""`tao bench faults`: one run per fault a production fleet meets, each through real processes on loopback (fake
vLLM nodes with fault modes, a `tao coordinator` process, real Redis, a real tmpfs), measured as a client sees it.

Every run returns `FaultRow`s with the same columns, so the table reads across faults:

- calls made and calls failed, as the client saw them;
- latency the fault added to a call, p50 and p99, against the same calls without it (None where not meaningful);
- acknowledged writes lost (a 2xx answered, then not found where it was promised to be);
- seconds to detect the fault (the coordinator says so: a state, a log line, a counter) and to recover from it;
- tracebacks in the coordinator's log during the run (a handled fault logs one line, never a traceback).

A run is registered in `RUNS` by name and module path, imported only when chosen, so one run's dependencies never
slow or break another's.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class FaultRow:
    fault: str
    """What went wrong, in a few words (the table's first column)."""
    calls: int
    """Model calls or requests the clients made during the run."""
    failed: int
    """Of those, the ones that failed as the client saw them."""
    added_p50_ms: float | None = None
    added_p99_ms: float | None = None
    acked_lost: int | None = None
    """Writes answered 2xx and not found afterwards; None where the run makes no writes."""
    detect_s: float | None = None
    recover_s: float | None = None
    tracebacks: int = 0
    note: str = ""
    """One line on what was checked beyond the columns."""


RUNS: dict[str, str] = {
    "coordinator": "coordinator:run",
    "redis-lost": "redis:run",
    "disk-full": "disk:run",
    "token-flood": "flood:run",
    "scrapes": "scrapes:run",
    "node-refuses": "refusals:run",
}
"""Run name → `module:function` under this package; the function takes no argument and returns `list[FaultRow]`."""
