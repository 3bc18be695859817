"""Settings of the scheduling core: signals, solver and planner. One frozen, validated object.

Every field has a default that follows the design (design §4–§6) or says why it differs. The live coordinator builds
this from its TOML file and CLI; the simulator from its arguments. Unknown fields are rejected by name.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class CoreSettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    credit_half_life_s: float | None = Field(default=10.0, gt=0)
    """Half-life h of snapshot cache evidence, k = k0·2^(−τ/h). None turns decay off (the `tao-no-decay` ablation)."""

    credit_unit_tokens: int = Field(default=1024, ge=1)
    """Quantum of cache credit. Credit below one unit is 0, so stale credit stops outranking readiness. 1024 tokens
    is about what an H100 prefills in a few milliseconds: less than that is not worth holding a place for."""

    readiness_horizon_s: float = Field(default=1.0, ge=0)
    """A tool predicted to return within this many seconds counts as ready (H)."""

    reestimate_interval_s: float = Field(default=30.0, gt=0)
    """An expired tool prediction is re-estimated at most this often; until then the session counts as ready."""

    estimator_delta: float = Field(default=0.2, gt=0, lt=1)
    """Confidence parameter δ of the empirical-Bernstein duration bound."""

    estimator_min_samples: int = Field(default=3, ge=2)
    """A tool's own history is used once it has this many durations; before that, the global history."""

    estimator_window: int = Field(default=1000, ge=2)
    """Durations kept per tool (the newest win)."""

    default_tool_duration_s: float = Field(default=5.0, ge=0)
    """Prediction when neither hints nor any history exist."""

    capacity_quantum_tokens: int = Field(default=16, ge=1)
    """Δ: weights are rounded up and capacities down to multiples of this. 16 is vLLM's block size, so quantizing
    loses nothing against vLLM's own whole-block allocation."""

    utilization_target: float = Field(default=0.9, gt=0, le=1)
    """Share of each node's KV capacity the planner may fill."""

    exact_node_limit: int = Field(default=20_000, ge=1)
    """Search nodes the exact solver may visit for one plan. Real snapshots need a few hundred at most (docs/
    algorithm.md); past the limit the plan is the best found, not certified, with a bound on its gap."""

    lease_ttl_s: float = Field(default=60.0, gt=0)
    """A session that sends nothing for this long is closed; a tool's timeout hint extends it."""

    default_session_tokens: int = Field(default=8192, ge=0)
    """Footprint assumed for a session that has not said how large its first prompt is."""

    default_output_tokens: int = Field(default=512, ge=0)
    """Expected output of a session that has completed no call yet."""

    max_evidence_nodes: int = Field(default=4, ge=1)
    """Cache evidence is kept for at most this many nodes per session (the most recent)."""
