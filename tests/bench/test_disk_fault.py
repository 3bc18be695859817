"""`tao bench faults`, the state-disk-full row: a real tmpfs filled under a flood of tool ends."""

import pytest

from tao_coordinator.bench.fault_runs import RUNS, disk


def test_the_disk_full_row_loses_no_acknowledged_write_and_recovers_within_a_scrape():
    assert RUNS["disk-full"] == "disk:run"
    [row] = disk.run()
    if row.note.startswith("skipped"):
        pytest.skip(row.note)
    assert row.fault == "state disk full"
    assert row.calls > row.failed > 0
    assert row.acked_lost == 0
    assert row.recover_s is not None and row.recover_s <= disk.SCRAPE_INTERVAL_S
    assert row.detect_s is not None and row.detect_s < 1.0
    assert row.tracebacks == 0
