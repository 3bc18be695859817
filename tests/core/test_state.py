"""`FleetState`'s indexes stay what a walk over every session would find, whatever is put and forgotten."""

import random

import pytest

from tao_coordinator.core.model import AgentProfile, AgentSession, Phase
from tao_coordinator.core.settings import CoreSettings
from tao_coordinator.core.signals.footprint import footprint_tokens
from tao_coordinator.core.state import FleetState, token_cells

SETTINGS = CoreSettings()
PHASES_WITH_A_PLACE = (Phase.ADMITTED, Phase.IN_LLM, Phase.IN_TOOL, Phase.READY)


def random_session(rng: random.Random, session_id: str, version: int) -> AgentSession:
    node = rng.choice((None, "a", "b"))
    phase = rng.choice(PHASES_WITH_A_PLACE) if node else rng.choice((Phase.WAITING, Phase.IN_TOOL))
    return AgentSession(
        id=session_id,
        context=AgentProfile(),
        registered_at=0.0,
        lease_expires_at=1e9,
        phase=phase,
        node=node,
        version=version,
        context_tokens=rng.randrange(0, 200_000),
        completed_calls=rng.randrange(0, 5),
        output_tokens_total=rng.randrange(0, 5_000),
    )


@pytest.mark.parametrize("seed", range(5))
def test_holder_indexes_match_a_walk_over_every_session(seed):
    rng = random.Random(seed)
    state = FleetState(settings=SETTINGS)
    changed: set[str] = set()
    for version in range(400):
        session_id = f"s{rng.randrange(12)}"
        if rng.random() < 0.15:
            state.forget(session_id)
        else:
            session = random_session(rng, session_id, version)
            state.put(session)
            if session.node is not None:
                changed.add(session.node)
        for node_id in ("a", "b"):
            holders = [s for s in state.sessions.values() if s.node == node_id]
            assert set(state.holders_at(node_id)) == {s.id for s in holders}
            footprints = sum(token_cells(footprint_tokens(s, SETTINGS), SETTINGS) for s in holders)
            assert state.footprint_bound(node_id) == footprints
            assert state.footprint_bound(node_id) >= state.cells_held(node_id, SETTINGS)
        if rng.random() < 0.1:
            assert state.take_holdings_changed() == changed
            changed = set()
