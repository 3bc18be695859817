"""`tao bench faults`' flood row, with a smaller flood: a real coordinator process, a flood from a process of its
own, and another token's clients timed before and during it."""

from tao_coordinator.bench.fault_runs import RUNS, flood


def test_a_flood_from_one_token_is_capped_and_leaves_the_other_tokens_acquires_answered():
    assert RUNS["token-flood"] == "flood:run"
    [row] = flood.run(flood_size=1_500, cap=100, clients=4, baseline_s=1.0)
    assert row.fault == "one token floods registrations" and row.calls == 1_500
    assert row.failed == 0 and row.tracebacks == 0, row
    assert row.detect_s is not None and row.detect_s < 10, row
    assert "201 ×100, 429 ×1,400" in row.note, row.note
    assert row.added_p50_ms is not None and row.added_p99_ms is not None
