"""`tao bench faults` through its command: a bad `--only` is refused before anything runs, and the Redis run makes
its row (a real `redis-server` restarted empty under a coordinator process and SDK sessions)."""

import json
import shutil
import subprocess
import sys

import pytest

from tao_coordinator.bench.fault_runs import RUNS


def tao(*args, timeout=120):
    return subprocess.run([sys.executable, "-m", "tao_sdk.cli", *args], capture_output=True, text=True, timeout=timeout)


def test_an_unknown_run_is_named_and_nothing_runs():
    done = tao("bench", "faults", "--only", "redis-lost,flood-of-frogs", timeout=30)
    assert done.returncode == 2
    assert "--only takes run names from" in done.stderr and "redis-lost" in done.stderr
    assert "running" not in done.stderr


@pytest.mark.skipif(shutil.which("redis-server") is None, reason="redis-server is not installed (.ci/run installs it)")
def test_redis_lost_row_no_failed_call_the_fence_goes_on_and_no_traceback(tmp_path):
    assert "redis-lost" in RUNS
    done = tao("bench", "faults", "--only", "redis-lost", "--json", str(tmp_path / "faults.json"))
    assert done.returncode == 0, done.stderr
    (row,) = json.loads((tmp_path / "faults.json").read_text())
    assert row["calls"] > 0 and row["failed"] == 0 and row["tracebacks"] == 0
    assert row["detect_s"] is not None and row["recover_s"] is not None and row["recover_s"] < 5
    assert "fence 1 before, 2 after" in row["note"]
    assert "Redis restarted without persistence" in done.stdout
