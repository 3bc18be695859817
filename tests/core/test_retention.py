"""The credit half-life fitted per node from observed retention: the fit alone, then inside a real coordinator."""

import math
import random

import pytest

from tao_coordinator.core.actions import Interrupt, Route
from tao_coordinator.core.coordinator import Coordinator
from tao_coordinator.core.events import Acquire, LlmEnd, NodeRemoved, NodeUpdate, Register, ToolEnd, ToolStart
from tao_coordinator.core.model import AgentProfile, DurationHints, NodeLoad
from tao_coordinator.core.policies import make_policy
from tao_coordinator.core.settings import CoreSettings
from tao_coordinator.core.signals import CacheCredit, SignalContext
from tao_coordinator.core.signals.retention import HalfLifeFit

BLOCKS = 64


def synthetic(fit, node, half_life, n, rng):
    """`n` observations of a cache of 64 blocks whose blocks each survive Δt with probability 2^(−Δt/h)."""
    for _ in range(n):
        elapsed = half_life * math.exp(rng.uniform(math.log(0.1), math.log(5.0)))
        survive = 2.0 ** (-elapsed / half_life)
        kept = sum(rng.random() < survive for _ in range(BLOCKS))
        assert fit.observe(node, elapsed, BLOCKS * 16, kept * 16)


@pytest.mark.parametrize(("half_life", "seed"), ((2.0, 0), (10.0, 1), (45.0, 2), (300.0, 3), (2000.0, 4)))
def test_the_fit_recovers_a_known_half_life_from_synthetic_retention(half_life, seed):
    fit = HalfLifeFit()
    synthetic(fit, "a", half_life, 300, random.Random(seed))
    estimate = fit.estimate("a")
    assert estimate is not None and abs(math.log(estimate / half_life)) < math.log(1.2)  # within one grid step


def test_garbage_changes_nothing():
    fit = HalfLifeFit(min_observations=1)
    synthetic(fit, "a", 30.0, 50, random.Random(0))
    before = fit.estimate("a")
    for elapsed, asked, kept in ((5.0, 0, 0), (5.0, -16, 0), (-1.0, 1024, 0), (math.nan, 1024, 0), (5.0, 1024, -1)):
        assert not fit.observe("a", elapsed, asked, kept)
        assert not fit.observe("b", elapsed, asked, kept)
    assert fit.estimate("a") == before and fit.observations("a") == 50 and fit.observations("b") == 0


def test_the_configured_value_stays_until_enough_evidence():
    fit = HalfLifeFit(min_observations=20)
    rng = random.Random(1)
    synthetic(fit, "a", 100.0, 19, rng)
    assert fit.estimate("a") is None  # the caller keeps its configured h
    synthetic(fit, "a", 100.0, 1, rng)
    assert fit.estimate("a") is not None


def test_a_node_with_little_evidence_borrows_the_pooled_fit_until_it_has_its_own():
    fit = HalfLifeFit(min_observations=20)
    rng = random.Random(2)
    synthetic(fit, "a", 200.0, 100, rng)
    synthetic(fit, "b", 5.0, 5, rng)
    assert fit.estimate("b") == fit.estimate("unseen")  # the pool, dominated by a's evidence
    synthetic(fit, "b", 5.0, 45, rng)
    estimate = fit.estimate("b")
    assert estimate is not None and abs(math.log(estimate / 5.0)) < math.log(1.2)


def test_forgetting_a_node_removes_it_from_the_pool_too():
    fit = HalfLifeFit(min_observations=20)
    synthetic(fit, "a", 200.0, 30, random.Random(3))
    fit.forget("a")
    assert fit.estimate("a") is None and fit.estimate("b") is None and fit.observations("a") == 0


def test_old_evidence_is_forgotten_so_the_fit_follows_a_change():
    fit = HalfLifeFit(window=50)
    rng = random.Random(4)
    synthetic(fit, "a", 10.0, 500, rng)
    synthetic(fit, "a", 400.0, 200, rng)
    estimate = fit.estimate("a")
    assert estimate is not None and abs(math.log(estimate / 400.0)) < math.log(1.2)


# --- inside the coordinator ----------------------------------------------------------------------------------------

PROMPT = 30_000
ASKED = (PROMPT - 1) // 16 * 16  # what vLLM can hit of the previous call's 30,000 tokens


def evicted_and_back(c, session, at, elapsed, kept):
    """The session loses its place during a tool (its node fails for a moment), comes back to the node `elapsed`
    after its previous call ended and finds `kept` tokens cached. Returns when that call ended."""
    c.on_event(ToolStart(session, "t", "bash", DurationHints(sleep_s=600)), at)
    assert c.on_event(NodeUpdate("a", 70_000, healthy=False), at + 0.1) == [Interrupt(session, "a")]
    c.on_event(NodeUpdate("a", 70_000), at + 0.1)
    c.on_event(ToolEnd(session, "t", elapsed), at + elapsed)
    assert c.on_event(Acquire(session), at + elapsed) == [Route(session, "a")]
    c.on_event(LlmEnd(session, "a", PROMPT, kept, 0), at + elapsed + 1.0)
    return at + elapsed + 1.0


def coordinator(**settings):
    c = Coordinator(make_policy("tao"), CoreSettings(**({"lease_ttl_s": 1e6, "credit_half_life_fit": True} | settings)))
    c.on_event(NodeUpdate("a", 70_000), 0.0)
    c.on_event(Register("x", AgentProfile(), expected_input_tokens=PROMPT), 0.0)
    assert c.on_event(Acquire("x"), 0.0) == [Route("x", "a")]
    c.on_event(LlmEnd("x", "a", PROMPT, 0, 0), 1.0)
    return c


def retention_cycles(c, half_life, cycles, at=1.0):
    for k in range(cycles):
        elapsed = half_life * (0.25 + 0.25 * (k % 12))
        at = evicted_and_back(c, "x", at, elapsed, round(ASKED * 2.0 ** (-elapsed / half_life)))
    return at


def test_calls_of_a_session_that_lost_its_place_fit_the_node_half_life_that_credit_then_decays_with():
    c = coordinator()
    at = retention_cycles(c, 40.0, 19)
    assert c.retention_observations("a") == 19 and c.nodes["a"].credit_half_life_s is None
    at = retention_cycles(c, 40.0, 1, at)
    fitted = c.nodes["a"].credit_half_life_s
    assert fitted is not None and abs(math.log(fitted / 40.0)) < math.log(1.2)
    # the 30,000 tokens of the last call: 29 units now, 14 one fitted half-life later
    x = c.sessions["x"]
    credit = CacheCredit()
    assert credit.on_nodes(x, SignalContext(at, c.settings, c.nodes)) == {"a": 29}
    assert credit.on_nodes(x, SignalContext(at + fitted, c.settings, c.nodes)) == {"a": 14}
    assert CacheCredit(decay=False).on_nodes(x, SignalContext(at + 1e5, c.settings, c.nodes)) == {"a": 29}
    # it wakes when the credit falls below one unit at the fitted half-life, not at the configured one
    assert c.next_wakeup() == pytest.approx(at + fitted * math.log2(PROMPT / 1024), abs=1e-3)
    # a scrape keeps the fitted value; removing the node forgets it
    c.on_event(NodeUpdate("a", 70_000, load=NodeLoad(running=1)), at)
    assert c.nodes["a"].credit_half_life_s == fitted
    c.on_event(NodeRemoved("a"), at)
    c.on_event(NodeUpdate("a", 70_000), at)
    assert c.retention_observations("a") == 0 and c.nodes["a"].credit_half_life_s is None


def test_a_session_that_held_its_place_feeds_no_fit():
    c = coordinator()
    c.on_event(ToolStart("x", "t", "bash", DurationHints(timeout_s=5)), 1.0)
    c.on_event(ToolEnd("x", "t", 2.0), 3.0)
    assert c.on_event(Acquire("x"), 3.0) == [Route("x", "a")]
    c.on_event(LlmEnd("x", "a", PROMPT, 0, 0), 4.0)  # vLLM evicted it, but TAO held the place: not eviction by age
    assert c.retention_observations("a") == 0


def test_the_shared_prefix_other_sessions_keep_cached_says_nothing_about_the_session_s_own_cache():
    shared = 10_000
    c = Coordinator(make_policy("tao"), CoreSettings(lease_ttl_s=1e6, credit_half_life_fit=True))
    c.on_event(NodeUpdate("a", 70_000), 0.0)
    c.on_event(Register("x", AgentProfile(shared_prefix_tokens=shared), expected_input_tokens=PROMPT), 0.0)
    c.on_event(Acquire("x"), 0.0)
    c.on_event(LlmEnd("x", "a", PROMPT, 0, 0), 1.0)
    at = 1.0
    for k in range(20):
        elapsed = 10.0 * (0.25 + 0.25 * (k % 12))
        own = round((ASKED - shared) * 2.0 ** (-elapsed / 10.0))
        at = evicted_and_back(c, "x", at, elapsed, shared + own)
    fitted = c.nodes["a"].credit_half_life_s
    assert fitted is not None and abs(math.log(fitted / 10.0)) < math.log(1.2)


@pytest.mark.parametrize("settings", ({"credit_half_life_fit": False}, {"credit_half_life_s": None}))
def test_a_fixed_half_life_or_no_decay_leaves_the_nodes_alone(settings):
    c = coordinator(**settings)
    retention_cycles(c, 40.0, 25)
    assert c.retention_observations("a") == 25  # still observed, for the metrics
    assert c.nodes["a"].credit_half_life_s is None
