"""The fault runs of `tao bench coordinator`, at a small scale: real coordinator processes, real fake nodes."""

from tao_coordinator.bench import faults


def test_a_killed_node_is_noticed_and_its_sessions_move():
    killed = faults.node_kill(sessions=6)
    assert killed.on_killed_node > 0 and killed.moved == killed.on_killed_node
    assert killed.notice_s < 15 and killed.last_moved_s is not None


def test_a_coordinator_killed_under_load_leaves_a_sound_store_that_restarts():
    crashed = faults.coordinator_kill(load_s=1.0, clients=4)
    assert crashed.acknowledged > 0 and crashed.rows_after_kill > 0
    assert crashed.integrity == "ok" and crashed.restarted


def test_after_a_stall_every_session_is_scheduled_again_within_the_target():
    run = faults.stall(1.5, sessions=2, before_s=1.0, after_s=8.0)
    assert run.calls_during_stall > 0
    assert run.within_target, run
