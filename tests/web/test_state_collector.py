"""The figures `/metrics` reads from the core at scrape time (`web/metrics.py`), against a core driven by events with
a clock of the test's own, as the live service would drive it over minutes."""

from prometheus_client import CollectorRegistry

from tao_coordinator.config import CoordinatorConfig
from tao_coordinator.core.actions import Action, StartPlan
from tao_coordinator.core.events import Acquire, Event, LlmEnd, NodeUpdate, Register, ToolEnd, ToolStart
from tao_coordinator.core.forecast import ToolHistory
from tao_coordinator.core.model import DurationHints
from tao_coordinator.core.plan import PlanFinished
from tao_coordinator.web.core_slot import CoreSlot
from tao_coordinator.web.metrics import StateCollector

PROMPT = 30_000
ASKED = (PROMPT - 1) // 16 * 16  # what vLLM can hit of the previous call's 30,000 tokens


def feed(slot: CoreSlot, event: Event | PlanFinished, now: float) -> list[Action]:
    """Feed `event` to the slot's core, solving at once every plan it asks for, as the service does off its loop."""
    done: list[Action] = []
    for action in slot.coordinator.on_event(event, now):
        if isinstance(action, StartPlan):
            done += feed(slot, PlanFinished(action.job.id, action.job.solve()), now)
        else:
            done.append(action)
    return done


def test_the_half_life_fitted_from_a_sessions_lost_places_is_exposed_beside_the_configured_one(tmp_path):
    config = CoordinatorConfig.model_validate(
        {
            "server": {"token": "t" * 32, "state_dir": str(tmp_path)},
            "nodes": [{"name": "node-0", "url": "http://127.0.0.1:1"}],
            "core": {"lease_ttl_s": 1e6},
        }
    )
    slot = CoreSlot(config, ToolHistory.from_settings(config.core))
    registry = CollectorRegistry()
    registry.register(StateCollector(slot, ["node-0"], lambda name: None, None, dict))

    def sample(name: str) -> float | None:
        return registry.get_sample_value(name, {"node": "node-0"})

    feed(slot, NodeUpdate("node-0", 70_000), 0.0)
    feed(slot, Register("x", expected_input_tokens=PROMPT), 0.0)
    feed(slot, Acquire("x"), 0.0)
    at = 1.0
    feed(slot, LlmEnd("x", "node-0", PROMPT, 0, 0), at)
    assert sample("tao_node_credit_half_life_fitted_seconds") is None  # no estimate yet
    for _ in range(20):  # the node fails during each tool; 30 s after its call the session finds a quarter kept
        feed(slot, ToolStart("x", "t", "bash", DurationHints(sleep_s=600)), at)
        feed(slot, NodeUpdate("node-0", 70_000, healthy=False), at + 0.1)
        feed(slot, NodeUpdate("node-0", 70_000), at + 0.1)
        feed(slot, ToolEnd("x", "t", 30.0), at + 30.0)
        feed(slot, Acquire("x"), at + 30.0)
        at += 31.0
        feed(slot, LlmEnd("x", "node-0", PROMPT, ASKED // 4, 0), at)
    assert sample("tao_node_retention_observations_total") == 20
    fitted = sample("tao_node_credit_half_life_fitted_seconds")
    assert fitted is not None and abs(fitted - 15.0) < 1.0
    assert sample("tao_node_credit_half_life_seconds") == 10.0  # the configured one: fitting is off by default
