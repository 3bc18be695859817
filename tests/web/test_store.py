"""Tool history survives the process: what is recorded comes back on the next load, newest `window` per tool."""

from tao_coordinator.store import HistoryStore


def test_recorded_durations_come_back_after_a_restart(tmp_path):
    store = HistoryStore(tmp_path / "state")
    for k in range(5):
        store.record("pytest", float(k), 1000.0 + k)
    store.record("ls", 0.1, 1000.0)
    store.close()
    reopened = HistoryStore(tmp_path / "state")
    assert reopened.load(window=3) == {"pytest": [2.0, 3.0, 4.0], "ls": [0.1]}
    reopened.close()


def test_the_database_is_in_wal_mode(tmp_path):
    store = HistoryStore(tmp_path)
    store.close()
    import sqlite3

    with sqlite3.connect(store.path) as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
