"""`tao bench faults`' refusal rows, kept short: a real coordinator process, fake nodes (one killed with SIGKILL and
started again), SDK sessions in threads, and a stand-in coordinator that answers acquires out of protocol."""

from tao_coordinator.bench.fault_runs import RUNS, refusals


def test_refused_calls_are_served_elsewhere_the_node_demoted_at_its_third_refusal_and_restored():
    assert RUNS["node-refuses"] == "refusals:run"
    rows = {row.fault: row for row in refusals.run(refusals.Timing(warm_s=0.5, fault_s=1.5))}
    assert list(rows) == [
        "node answers 503 (/health 200)",
        "node killed (SIGKILL)",
        "coordinator answers malformed acquire",
    ]
    for row in rows.values():
        assert row.failed == 0 and row.calls > 0 and row.tracebacks == 0, row
    for fault in ("node answers 503 (/health 200)", "node killed (SIGKILL)"):
        row = rows[fault]
        assert row.added_p99_ms is not None and row.added_p99_ms <= 1000, row
        assert row.detect_s is not None and row.recover_s is not None, row
        assert "demoted: 3 calls refused in a row" in row.note, row
        assert "1 demotion line, 1 restoration line; 0 calls served by bad while demoted" in row.note, row
    assert "8 of 8 saying so once in their log" in rows["coordinator answers malformed acquire"].note
