"""`tao bench coordinator --ha`: check the options, run `ha.measure`, print each figure beside its target, and write
the JSON (`--json`): `failover` holds one row per replica count, then `partition`, `latency` and `redis_restart`."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from typing import Any

from ..ha import RedisNotInstalled
from . import ha
from .ha_cluster import Scale


def _counts(text: str) -> list[int] | None:
    try:
        counts = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        return None
    return counts if counts and all(2 <= c <= 9 for c in counts) else None


def run(args: argparse.Namespace) -> int:
    counts = _counts(args.replicas)
    sizes = args.ha_sessions >= 1 and args.ha_sdk_sessions >= 0
    if counts is None or not sizes or not 1 <= args.ha_phase_s <= 600 or not 0.1 <= args.ha_cycle_s <= 600:
        print(
            "tao bench coordinator --ha: --replicas takes counts from 2 to 9, comma-separated; --ha-sessions ≥ 1, "
            "--ha-sdk-sessions ≥ 0, --ha-phase-s in [1, 600], --ha-cycle-s in [0.1, 600]",
            file=sys.stderr,
        )
        return 2
    scale = Scale(args.ha_sessions, args.ha_sdk_sessions, args.ha_phase_s, args.samples, args.ha_cycle_s)
    sdk_log = logging.getLogger("tao_sdk")
    level = sdk_log.level
    sdk_log.setLevel(logging.ERROR)  # each failover is logged by every SDK session: expected here, and noise
    try:
        report = ha.measure(counts, scale)
    except RedisNotInstalled as error:
        print(f"tao bench coordinator --ha: {error}", file=sys.stderr)
        return 1
    finally:
        sdk_log.setLevel(level)
    show(report)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
        print(f"wrote {args.json}")
    return 0


def _target(ok: bool) -> str:
    return "within target" if ok else "TARGET MISSED"


def show(report: dict[str, Any]) -> None:
    for row in report["failover"]:
        failover = row["failover_s"]
        ok = failover is not None and failover <= 3 and row["acked_events_lost"] == 0
        ok = ok and row["sessions_reregistered"] == 0 and row["sdk_call_errors"] == 0
        print(
            f"leader killed -9, {row['replicas']} replicas, {row['sessions']} sessions + {row['sdk_sessions']} SDK: "
            f"acquires served again after {'never' if failover is None else f'{failover:.2f} s'} (target ≤ 3 s); "
            f"{row['acked_events_lost']} of {row['acked_events']:,} acknowledged events lost; "
            f"{row['sessions_reregistered']} sessions registered again; SDK: {row['sdk_call_errors']} of "
            f"{row['sdk_calls']} calls failed, worst added {row['sdk_worst_added_ms']:.0f} ms over a median "
            f"{row['sdk_median_before_ms']:.0f} ms — {_target(ok)}"
        )
        for line in row["reregistered_why"]:
            print(f"  registered again: {line}")
    cut = report["partition"]
    ok = cut["records_gone_back"] == 0 and cut["fence_after_resume"] == cut["fence_at_takeover"]
    ok = ok and cut["old_leader_role"] == "standby" and cut["acked_events_lost"] == 0
    print(
        f"partition (leader SIGSTOPped 3 leases): the other led after {cut['takeover_s']:.2f} s; after SIGCONT the old "
        f"one was standby within {cut['old_leader_stepped_down_s']:.2f} s; fence {cut['fence_at_takeover']} → "
        f"{cut['fence_after_resume']}; of {cut['records_stored']} stored records {cut['records_changed_after_resume']} "
        f"changed after the resume, {cut['records_gone_back']} to an older version; "
        f"{cut['acked_events_lost']} acknowledged events lost — {_target(ok)}"
    )
    for line in cut["old_leader_log"]:
        print(f"  old leader: {line}")
    lat = report["latency"]
    sqlite, redis = lat["sqlite_single"], lat["redis_leader_of_2"]
    print(
        f"acquire under the load of {lat['sessions']} sessions ({lat['samples']} round trips each): single process "
        f"+ SQLite p50 {sqlite['acquire_p50_ms']:.2f} ms, p99 {sqlite['acquire_p99_ms']:.2f} ms; leader of 2 on "
        f"Redis p50 {redis['acquire_p50_ms']:.2f} ms, p99 {redis['acquire_p99_ms']:.2f} ms; Redis costs "
        f"{redis['acquire_p50_ms'] - sqlite['acquire_p50_ms']:+.2f} ms at p50, "
        f"{redis['acquire_p99_ms'] - sqlite['acquire_p99_ms']:+.2f} ms at p99"
    )
    down = report["redis_restart"]
    ok = down["acked_events_lost"] == 0 and down["acquires_served_while_down"] == 0
    print(
        f"Redis stopped {down['down_s']:g} s under load and started again (appendfsync always): every replica "
        f"standby after {_seconds(down['all_standby_after_s'])}, {down['acquires_served_while_down']} acquires "
        f"served while it was down; a leader again {_seconds(down['leader_again_after_restart_s'])} after the "
        f"restart, acquires served {_seconds(down['acquires_served_again_after_restart_s'])} after it; "
        f"{down['acked_events_lost']} of {down['acked_events']:,} acknowledged events lost, "
        f"{down['sessions_reregistered']} sessions registered again, {down['sdk_call_errors']} SDK calls failed "
        f"— {_target(ok)}"
    )


def _seconds(value: float | None) -> str:
    return "never" if value is None else f"{value:.2f} s"
