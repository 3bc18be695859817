"""Everything that defines one fake vLLM node, as one frozen value (the CLI and `FakeFleet` both build it)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..sim.node import NodeProfile, SchedulingPolicy, profile_by_name, with_cpu_tier
from .kv_publisher import KvEventsConfig
from .kv_wire import Encoding
from .policy import Policy

DEFAULT_MODEL = "Qwen/Qwen3-32B"
VLLM_VERSION = "0.33.0"


@dataclass(frozen=True)
class FakeNodeConfig:
    profile: NodeProfile | str = "h100-tp2"
    """A node profile, or the name of a built-in one (`h100-tp1`, `h100-tp2`, `h100-tp4`)."""
    served_model_name: str = DEFAULT_MODEL
    time_scale: float = 1.0
    """Engine seconds per wall second."""
    scheduling_policy: SchedulingPolicy = "fcfs"
    host: str = "127.0.0.1"
    port: int = 0
    """0 picks a free port."""
    kv_events: KvEventsConfig | None = None
    """None: no KV-event publisher (the node still tracks its cache)."""
    kv_events_encoding: Encoding = "map"
    policy: Policy = field(default_factory=Policy)
    enable_prompt_tokens_details: bool = True
    """vLLM's --enable-prompt-tokens-details (off by default in vLLM; on here, the fake exists to show caching)."""
    strict_model_name: bool = True
    """Answer 404 for a model name other than the served one, as vLLM does."""
    tick_seconds: float = 0.02
    """Longest wall-time sleep of the engine loop while the engine is busy (streaming granularity)."""
    cpu_kv_gib: float | None = None
    """vLLM's --kv-offloading-size: GiB of host memory for a CPU KV tier (native offloading); None: no tier (or the
    profile's own `cpu_tier`)."""
    max_num_queued_reqs: int | None = None
    """vLLM's --max-num-queued-reqs: unfinished requests (waiting + running) beyond which new ones get a 503."""

    def __post_init__(self) -> None:
        if not self.time_scale > 0 or self.time_scale == float("inf"):
            raise ValueError(f"time_scale: must be a positive finite number, got {self.time_scale!r}")
        if not self.tick_seconds > 0:
            raise ValueError(f"tick_seconds: must be positive, got {self.tick_seconds!r}")
        if self.cpu_kv_gib is not None and not 0 < self.cpu_kv_gib < float("inf"):
            raise ValueError(f"cpu_kv_gib: must be a positive finite number, got {self.cpu_kv_gib!r}")
        if self.max_num_queued_reqs is not None and self.max_num_queued_reqs < 0:
            raise ValueError(f"max_num_queued_reqs: must not be negative, got {self.max_num_queued_reqs!r}")

    def node_profile(self) -> NodeProfile:
        profile = profile_by_name(self.profile) if isinstance(self.profile, str) else self.profile
        return profile if self.cpu_kv_gib is None else with_cpu_tier(profile, self.cpu_kv_gib)
