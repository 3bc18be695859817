"""Settings of the scheduling core: signals, solver and planner. One frozen, validated object.

Every field has a default that follows docs/algorithm.md or says why it differs. The live coordinator builds
this from its TOML file and CLI; the simulator from its arguments. Unknown fields are rejected by name.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class CoreSettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    credit_half_life_s: float | None = Field(default=10.0, gt=0)
    """Half-life h of snapshot cache evidence, k = k0·2^(−τ/h). None turns decay off (the `tao-no-decay` ablation).
    With `credit_half_life_fit` it is the prior: the h of every node until its retention has been observed."""

    credit_half_life_fit: bool = False
    """Fit h per node online from how much of a session's previous context vLLM kept when the session did not hold
    its place there (`signals/retention.py`) instead of keeping `credit_half_life_s` everywhere. Off by default: in
    the simulator the fitted h (100–330 s on AgentX, 15 s on mini-swe-agent) tracks retention well but lets credit
    outrank readiness for minutes, and TAO lost latency, TTFT and throughput with it (docs/benchmarks.md)."""

    cpu_hit_worth_prior: float = Field(default=0.5, ge=0, le=1)
    """What a prefix token in a node's CPU offloading tier is worth against one in HBM until the node has measured
    both its load and its prefill rates (`signals/tier.py`): half, between a hit and a miss."""

    credit_unit_tokens: int = Field(default=1024, ge=1)
    """Quantum of cache credit. Credit below one unit is 0, so stale credit stops outranking readiness. 1024 tokens
    is about what an H100 prefills in a few milliseconds: less than that is not worth holding a place for."""

    readiness_horizon_s: float = Field(default=1.0, ge=0)
    """H: readiness asks whether a tool returns within this many seconds (`tao`, `tao-bound`; `tao-paper` always
    1 s). For `tao[horizon=adaptive]`, whose H follows load (`forecast/horizon.py`), the least H."""

    readiness_levels: int = Field(default=1, ge=1)
    """Q: a session in a tool counts Q·P(it returns within H), rounded, so 0…Q; one not in a tool counts Q. With
    Q = 1 a session in a tool is as ready as a waiting one when it is more likely than not back within H. Q = 4
    measured no better (AgentX dev at 64 sessions: TTFT 4.74 s against 3.84 s; docs/benchmarks.md)."""

    reestimate_interval_s: float = Field(default=30.0, gt=0)
    """Binary rules: an expired tool prediction is re-estimated at most this often; until then it counts as ready."""

    estimator_delta: float = Field(default=0.2, gt=0, lt=1)
    """Binary rules: confidence parameter δ of the duration bound."""

    estimator_min_samples: int = Field(default=3, ge=2)
    """Binary rules: a tool's own history is used once it has this many durations; before that, the global one."""

    default_tool_duration_s: float = Field(default=5.0, gt=0)
    """Median of the forecast's prior (what is predicted before anything is learned); the binary rules' default."""

    forecast_window: int = Field(default=128, ge=2)
    """Durations kept per learned level (tool and program, tool, all tools); the newest win."""

    forecast_max_levels: int = Field(default=4096, ge=2)
    """Learned levels kept; the least recently used goes first (`forecast/history.py` states the memory)."""

    forecast_session_window: int = Field(default=32, ge=1)
    """Durations kept per level of one session's own calls; dropped when the session closes."""

    forecast_kappa: float = Field(default=2.0, gt=0)
    """Pseudo-count with which a level's forecast leans on the level above (`forecast/predictive.py`)."""

    forecast_recency_half_life: float = Field(default=32.0, gt=0)
    """In samples of a level: a duration's weight halves with every this many newer ones."""

    capacity_quantum_tokens: int = Field(default=16, ge=1)
    """Δ: weights are rounded up and capacities down to multiples of this. 16 is vLLM's block size, so quantizing
    loses nothing against vLLM's own whole-block allocation."""

    utilization_target: float = Field(default=0.9, gt=0, le=1)
    """Share of each node's KV capacity the planner may fill."""

    exact_node_limit: int = Field(default=10_000, ge=1)
    """Search nodes the exact solver may visit for one plan; past the limit the plan is the best found, not
    certified, with a bound on its gap. The dev replays never needed more than 3,566 (p99 under 700); at 1,024
    sessions on 64 nodes, where a node costs about 3 µs, 20,000 certified 1 plan in 200 more than 10,000 for a p95
    of 78 ms against 44 ms (docs/algorithm.md)."""

    lease_ttl_s: float = Field(default=60.0, gt=0)
    """A session that sends nothing for this long is closed; a tool's timeout hint extends it."""

    default_session_tokens: int = Field(default=8192, ge=0)
    """Footprint assumed for a session that has not said how large its first prompt is."""

    default_output_tokens: int = Field(default=512, ge=0)
    """Expected output of a session that has completed no call yet."""

    max_evidence_nodes: int = Field(default=4, ge=1)
    """Cache evidence is kept for at most this many nodes per session (the most recent)."""

    node_demote_after: int = Field(default=3, ge=1)
    """Consecutive calls a node refused, as its clients report them (connection refused or reset before any answer,
    HTTP 503 or 429), after which the node is demoted: nothing is placed or routed there until a probe shows it
    serves again (`core/demotion.py`). A call it served in between starts the count again."""

    max_running_tools: int = Field(default=64, ge=1)
    """Tools one session runs at once, at most (harnesses run a handful in parallel): a tool start past it is refused
    until one ends (`web/limits.py` answers it 409)."""

    max_running_tool_bytes: int = Field(default=8 * 1024, ge=1)
    """UTF-8 bytes of the call ids, tool names and programs of one session's running tools together, at most (a tool
    start past it is refused like one past `max_running_tools`)."""

    max_context_bytes: int = Field(default=8 * 1024, ge=1)
    """UTF-8 bytes of a session's agent context and step id, at most (a usual one takes a few hundred): a
    registration or an acquire that would take it past is refused (`web/limits.py` answers it 422)."""

    node_probe_interval_s: float = Field(default=2.0, gt=0)
    """How often a demoted node is probed with a minimal model call (`fleet/probe.py`), the first probe this long
    after the demotion. A probe costs the node one prompt of a few tokens and one output token."""
