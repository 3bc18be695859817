"""`tao bench coordinator --ha` at a small scale, end to end: a real `redis-server`, real coordinator processes, the
fake fleet, raw and SDK sessions; the JSON has the rows and fields of
docs/benchmarks.md#high-availability-on-redis-tao-bench-coordinator---ha, with sane values."""

import argparse
import json

from tao_coordinator.bench import coordinator
from tests.ha.conftest import local_redis

FAILOVER_FIELDS = {
    "replicas",
    "failover_s",
    "acked_events_lost",
    "sessions_reregistered",
    "sdk_call_errors",
    "sdk_worst_added_ms",
}


def bench(*argv):
    parser = argparse.ArgumentParser()
    coordinator.add_arguments(parser)
    return coordinator.run(parser.parse_args(list(argv)))


def test_the_ha_bench_kills_pauses_and_restarts_and_loses_nothing_acknowledged(tmp_path, capsys):
    local_redis().close()  # skips (or fails under TAO_REQUIRE_HARNESSES) without redis-server
    out = tmp_path / "ha.json"
    argv = ["--ha", "--replicas", "2", "--ha-sessions", "12", "--ha-sdk-sessions", "2", "--ha-phase-s", "2"]
    assert bench(*argv, "--samples", "30", "--json", str(out)) == 0
    report = json.loads(out.read_text())
    [row] = report["failover"]
    assert set(row) >= FAILOVER_FIELDS and row["replicas"] == 2
    assert 0 < row["failover_s"] < 10 and row["acked_events"] > 0
    assert row["acked_events_lost"] == row["sessions_reregistered"] == row["sdk_call_errors"] == 0
    assert row["sdk_calls"] > 0 and 0 <= row["sdk_worst_added_ms"] < 15_000
    cut = report["partition"]
    assert cut["old_leader_role"] == "standby" and cut["new_leader_role"] == "leader"
    assert cut["fence_after_resume"] == cut["fence_at_takeover"] and cut["records_gone_back"] == 0
    assert cut["records_stored"] > 0 and cut["acked_events_lost"] == 0
    for figures in report["latency"]["sqlite_single"], report["latency"]["redis_leader_of_2"]:
        assert 0 < figures["acquire_p50_ms"] <= figures["acquire_p99_ms"]
    down = report["redis_restart"]
    assert down["acquires_served_while_down"] == 0 and down["acked_events_lost"] == 0
    assert down["acquires_served_again_after_restart_s"] is not None and down["acked_events"] > 0
    assert "leader killed -9, 2 replicas" in capsys.readouterr().out
