"""`tao bench memory` at a small cap: a real coordinator process, real SQLite, a restart on the same state."""

import argparse
import json

from tao_coordinator.bench.memory import add_arguments, run


def test_a_small_run_stays_within_its_bound_and_restarts_with_only_the_kept_levels(tmp_path, capsys):
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    out = tmp_path / "memory.json"
    args = parser.parse_args(["--tools", "600", "--max-levels", "64", "--warmup", "100", "--batch", "100"])
    args.json = out
    assert run(args) == 0
    figures = json.loads(out.read_text())
    assert figures["within_bound"] and figures["growth_bytes"] <= figures["bound_bytes"]
    assert (figures["durations_loaded"], figures["levels_loaded"]) == (64, 64)
    assert figures["db_rows_before_restart"] == 700 and figures["db_rows_after_prune"] == 64
    assert [tools for tools, _ in figures["rss_samples"]][-1] == 600
    assert "loaded 64 durations into 64 levels" in capsys.readouterr().out
