"""`tao bench faults`' scrape rows at a quick scrape interval: real coordinator process, real fake nodes."""

from tao_coordinator.bench.fault_runs import RUNS, scrapes


def test_every_scrape_fault_is_detected_named_and_undone_without_a_traceback():
    assert RUNS["scrapes"] == "scrapes:run"
    rows = {row.fault: row for row in scrapes.run(scrape_interval_s=0.5)}
    assert list(rows) == [
        "metrics NaN/Inf",
        "absurd capacity (1.6e31, then 0)",
        "empty /metrics",
        "KV-event restart (numbers back to 0)",
    ]
    for row in rows.values():
        assert row.tracebacks == 0 and row.failed == 0, row
        assert row.detect_s is not None and row.recover_s is not None, row
    assert "vllm:kv_cache_usage_perc is NaN" in rows["metrics NaN/Inf"].note
    assert "0 calls placed on it while shown unusable" in rows["absurd capacity (1.6e31, then 0)"].note
    assert "capacity shown meanwhile [322256] (believed 322256)" in rows["absurd capacity (1.6e31, then 0)"].note
    assert rows["KV-event restart (numbers back to 0)"].recover_s <= scrapes.CREDIT_TARGET_S
