"""Tool history survives the process, bounded like the history: the newest `window` rows of the `max_keys` keys
used last come back on the next load, and a prune leaves exactly those in the database."""

import sqlite3

import pytest
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from tao_coordinator.core.forecast import ToolHistory, ToolKey
from tao_coordinator.store import HistoryStore, StoreUnavailable


def table(store: HistoryStore) -> list[tuple[ToolKey, float]]:
    with sqlite3.connect(store.path) as db:
        rows = db.execute("SELECT tool, program, duration_s FROM tool_calls ORDER BY id").fetchall()
    return [(ToolKey(tool, program), duration) for tool, program, duration in rows]


def test_recorded_calls_come_back_normalised_after_a_restart(tmp_path):
    store = HistoryStore(tmp_path / "state", window=3)
    for k in range(5):
        store.record_all([("Bash", "Cargo", float(k), 1000.0 + k)])
    store.record_all([("run_shell_command", None, 0.1, 1000.0)])
    store.record_all([("pytest", None, 7.0, 1000.0)])
    store.close()
    reopened = HistoryStore(tmp_path / "state", window=3)
    assert list(reopened.load()) == [
        (ToolKey("bash", "cargo"), 2.0),
        (ToolKey("bash", "cargo"), 3.0),
        (ToolKey("bash", "cargo"), 4.0),
        (ToolKey("bash"), 0.1),
        (ToolKey("pytest"), 7.0),
    ]
    reopened.close()


def test_an_old_tool_durations_table_is_moved_once(tmp_path):
    with sqlite3.connect(tmp_path / "tao.sqlite3") as db:
        db.executescript(
            "CREATE TABLE tool_durations (id INTEGER PRIMARY KEY AUTOINCREMENT, tool TEXT NOT NULL,"
            " duration_s REAL NOT NULL, recorded_at REAL NOT NULL);"
            "CREATE INDEX tool_durations_by_tool ON tool_durations (tool, id);"
        )
        db.executemany(
            "INSERT INTO tool_durations (tool, duration_s, recorded_at) VALUES (?, ?, ?)",
            [("Bash", 1.0, 10.0), ("pytest", 2.0, 11.0), ("run_shell_command", 3.0, 12.0)],
        )
    for _ in range(2):
        store = HistoryStore(tmp_path)
        store.close()
    assert list(store.load()) == [(ToolKey("bash"), 1.0), (ToolKey("pytest"), 2.0), (ToolKey("bash"), 3.0)]
    with sqlite3.connect(store.path) as db:
        assert db.execute("SELECT name FROM sqlite_master WHERE name LIKE 'tool_durations%'").fetchall() == []
        assert db.execute("SELECT recorded_at FROM tool_calls ORDER BY id").fetchall() == [(10.0,), (11.0,), (12.0,)]


def test_load_keeps_the_newest_window_of_the_keys_used_last_and_prune_keeps_exactly_that(tmp_path):
    store = HistoryStore(tmp_path, window=2, max_keys=2)
    for tool, duration in [("a", 1), ("b", 2), ("a", 3), ("c", 4), ("a", 5), ("c", 6), ("c", 7), ("b", 8)]:
        store.record_all([(tool, None, float(duration), 0.0)])
    store.prune()
    store.close()
    # b and c were used last; a goes, and each keeps its newest two
    assert list(store.load()) == [(ToolKey("b"), 2.0), (ToolKey("c"), 6.0), (ToolKey("c"), 7.0), (ToolKey("b"), 8.0)]
    assert table(store) == list(store.load())
    assert store.prunes == 1


def test_the_writer_prunes_every_so_many_rows(tmp_path):
    store = HistoryStore(tmp_path, window=1, max_keys=4, batch=10, prune_every=10)
    for k in range(1000):
        store.record_all([(f"tool-{k}", None, 1.0, 0.0)])
    store.close()
    assert store.prunes >= 50
    assert store.rows() <= 4 + 10 + 10 - 1


keys = st.builds(ToolKey, st.sampled_from(["a", "b", "c", "d", "e"]), st.sampled_from([None, "x", "y"]))


@hypothesis_settings(max_examples=40)
@given(
    calls=st.lists(keys, max_size=80),
    window=st.integers(1, 4),
    max_levels=st.integers(2, 6),
    batch=st.integers(1, 8),
    prune_every=st.integers(1, 30),
)
def test_a_restart_rebuilds_the_levels_the_live_history_kept(
    tmp_path_factory, calls, window, max_levels, batch, prune_every
):
    state = tmp_path_factory.mktemp("state")
    live = ToolHistory(window, max_levels)
    store = HistoryStore(state, window, max_levels, batch=batch, prune_every=prune_every)
    for k, key in enumerate(calls):
        live.add(key, float(k))
        store.record_all([(key.tool, key.program, float(k), 0.0)])
    store.prune()
    store.close()
    assert table(store) == list(store.load())
    restarted = ToolHistory(window, max_levels)
    for key, duration in store.load():
        restarted.add(key, duration)
    assert restarted.export().keys() == live.export().keys()


def test_the_database_is_in_wal_mode(tmp_path):
    store = HistoryStore(tmp_path)
    store.close()
    with sqlite3.connect(store.path) as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_rows_recorded_together_are_one_transaction_and_rows_past_max_queued_are_refused_at_once(tmp_path):
    store = HistoryStore(tmp_path / "state", max_queued=3)
    with pytest.raises(StoreUnavailable, match="3 tool ends already wait"):
        store.record_all([("bash", None, 1.0, 0.0)] * 4)
    store.record_all([("bash", None, float(k), 0.0) for k in range(3)]).result(timeout=10)
    assert (store.rows(), store.commits, store.not_written) == (3, 1, 4)
    store.close()
