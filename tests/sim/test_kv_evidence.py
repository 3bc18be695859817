"""`tao sim --kv-events`: the nodes' KV events become the coordinator's exact cache credit, through the live
coordinator's own per-session index (`fleet/kv_index.py`)."""

import json

from tao_coordinator.core.events import CacheResidency
from tao_coordinator.core.model import EvidenceSource
from tao_coordinator.sim.driver import FleetSimulation
from tao_coordinator.sim.kv_evidence import KvEvidenceFeed, wire_event
from tao_coordinator.sim.node import AllBlocksCleared, BlockRemoved, BlockStored, NodeProfile, profile_by_name
from tao_coordinator.sim.workloads import generate
from tao_sdk.cli import main as tao

TP1 = profile_by_name("h100-tp1")


def _stored(runs, session="s1"):
    return BlockStored(0.0, runs, None, 16, "r1", session, 0)


def test_block_events_become_the_wire_events_a_subscriber_decodes():
    stored = wire_event(_stored(((10, 3), (40, 1))))
    assert stored.hashes == (10, 11, 12, 40) and stored.session_id == "s1" and stored.block_size == 16
    assert wire_event(BlockRemoved(0.0, ((11, 2),))).hashes == (11, 12)
    assert type(wire_event(AllBlocksCleared(0.0))).__name__ == "Cleared"


def test_flush_reports_moved_residency_of_known_sessions_once_per_interval():
    feed = KvEvidenceFeed(["n1"], interval_s=0.5)
    feed.observe("n1", _stored(((10, 3),), "s1"))
    feed.observe("n1", _stored(((50, 2),), "gone"))
    assert feed.flush(1.0, {"s1"}) == [CacheResidency("n1", "s1", 48)]
    feed.observe("n1", BlockRemoved(1.1, ((10, 3),)))
    assert feed.flush(1.2, {"s1"}) == []  # the interval has not passed: the change waits
    assert feed.flush(1.5, {"s1"}) == [CacheResidency("n1", "s1", 0)]
    assert feed.residents("n1") == {"gone": 32}


def _tight_run(kv_evidence, snapshots=None):
    workload = generate("swe-agent", sessions=6, seed=1, max_context=40_000)
    peak = max(script.peak_context_tokens for script in workload.scripts)
    tight = NodeProfile("tight", TP1.step, num_gpu_blocks=2 * (peak // 16) + 2)
    seen = None if snapshots is None else snapshots.append
    simulation = FleetSimulation(workload, "tao", 4, tight, 1, kv_evidence=kv_evidence, on_snapshot=seen)
    return simulation, simulation.run(timing=False)


def test_the_coordinator_plans_on_exact_residency_that_matches_the_node_cache():
    snapshots = []
    simulation, metrics = _tight_run(True, snapshots)
    (engine,) = simulation.engines.values()
    cached = sum(count for _, count in engine.cached_block_runs())
    # every cached block was stored by some session, so the per-session index adds up to the node's cache
    assert sum(simulation.kv_evidence.residents("node-00").values()) == cached * 16
    sources = {e.source for snapshot in snapshots for session in snapshot.sessions for e in session.evidence}
    assert EvidenceSource.KV_EVENTS in sources
    # a tight node evicts, and the evidence says so: some live session's residency fell between two plans
    seen, fell = {}, 0
    for snapshot in snapshots:
        for s in snapshot.sessions:
            for e in (e for e in s.evidence if e.source is EvidenceSource.KV_EVENTS):
                fell += e.tokens < seen.get((s.id, e.node), 0)
                seen[s.id, e.node] = e.tokens
    assert fell > 0
    _, repeat = _tight_run(True)
    assert repeat == metrics  # deterministic
    _, without = _tight_run(False)
    assert without.requests == metrics.requests


def test_without_kv_events_the_credit_comes_from_call_ends_only():
    snapshots = []
    _tight_run(False, snapshots)
    sources = {e.source for snapshot in snapshots for session in snapshot.sessions for e in session.evidence}
    assert sources and EvidenceSource.KV_EVENTS not in sources


def test_sim_kv_events_says_where_credit_comes_from(tmp_path, capsys):
    out = tmp_path / "run.json"
    argv = ["sim", "--trace", "synthetic:swe-agent", "--sessions", "6", "--nodes", "1", "--node-profile", "h100-tp1",
            "--policy", "tao", "--concurrency", "4", "--no-timing", "--no-plots", "--json", str(out)]  # fmt: skip
    assert tao([*argv, "--kv-events"]) == 0
    assert "cache credit: the nodes' KV events (call-end usage only where" in capsys.readouterr().out
    assert json.loads(out.read_text())["credit"]["kv_events"] is True
    assert tao(argv) == 0
    assert "cache credit: the nodes' KV events" not in capsys.readouterr().out
    assert json.loads(out.read_text())["credit"]["kv_events"] is False
