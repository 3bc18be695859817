"""`tao bench faults`: run every fault of `fault_runs.RUNS` (or those named with `--only`), print one table across
them, and write the rows as JSON (`--json`).

A run that cannot run here (say, no permission to mount a tmpfs) returns a row saying so in its note; a run that
raises is reported as a row with the error and the table goes on, so one broken run never hides the others. The
exit status is 1 when any run raised, else 0.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from .fault_runs import RUNS, FaultRow


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--only", help=f"comma-separated runs to make (all: {', '.join(RUNS)})")
    parser.add_argument("--json", type=Path, help="write the rows as JSON to this file")


def run(args: argparse.Namespace) -> int:
    chosen = list(RUNS) if not args.only else [name.strip() for name in args.only.split(",") if name.strip()]
    unknown = [name for name in chosen if name not in RUNS]
    if unknown or not chosen:
        print(f"tao bench faults: --only takes run names from: {', '.join(RUNS)} (got {args.only!r})", file=sys.stderr)
        return 2
    sdk_log = logging.getLogger("tao_sdk")
    level = sdk_log.level
    sdk_log.setLevel(logging.ERROR)  # sessions say when they detach or fail over: expected here, and noise
    rows: list[FaultRow] = []
    broken = False
    try:
        for name in chosen:
            started = time.monotonic()
            print(f"{name}: running", file=sys.stderr, flush=True)
            try:
                made = _function(RUNS[name])()
            except Exception as error:  # a broken run is a row of the table, and the others still run
                broken = True
                made = [FaultRow(name, 0, 0, note=f"the run failed: {type(error).__name__}: {error}")]
            print(f"{name}: done in {time.monotonic() - started:.1f} s", file=sys.stderr, flush=True)
            rows += made
    finally:
        sdk_log.setLevel(level)
    Console(width=160).print(table(rows))
    if args.json:
        args.json.write_text(json.dumps([asdict(row) for row in rows], indent=2) + "\n")
        print(f"wrote {args.json}")
    return 1 if broken else 0


def _function(path: str) -> Any:
    module, function = path.split(":")
    return getattr(importlib.import_module(f"{__package__}.fault_runs.{module}"), function)


def table(rows: list[FaultRow]) -> Table:
    view = Table(title="Faults, as clients saw them (each run: its own processes on loopback)")
    for column in ("fault", "calls", "failed", "added p50", "added p99", "acked lost", "detect", "recover", "tb"):
        view.add_column(column, justify="left" if column == "fault" else "right")
    view.add_column("note", overflow="fold")
    for row in rows:
        view.add_row(
            row.fault,
            f"{row.calls:,}",
            f"{row.failed:,}",
            _ms(row.added_p50_ms),
            _ms(row.added_p99_ms),
            "—" if row.acked_lost is None else f"{row.acked_lost:,}",
            _s(row.detect_s),
            _s(row.recover_s),
            str(row.tracebacks),
            row.note,
        )
    return view


def _ms(value: float | None) -> str:
    return "—" if value is None else f"{value:,.0f} ms"


def _s(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f} s"
