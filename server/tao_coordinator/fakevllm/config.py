"""Everything that defines one fake vLLM node, as one frozen, validated value (the CLI and `FakeFleet` both build
it, and `tao fake-vllm --help` is written from its field docs). An invalid value is a `ValidationError` (a
`ValueError`) naming the field; a profile or KV-events value is kept as the object given, not copied."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, InstanceOf, model_validator

from ..kv_wire import Encoding
from ..sim.node import NodeProfile, SchedulingPolicy, profile_by_name, with_cpu_tier
from .kv_publisher import KvEventsConfig
from .model_cards import LoraModule, ModelCatalog
from .policy import ReplyPolicy

DEFAULT_MODEL = "Qwen/Qwen3-32B"
VLLM_VERSION = "0.33.0"


class FakeNodeConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    profile: InstanceOf[NodeProfile] | str = "h100-tp2"
    """A node profile, or the name of a built-in one (`sim/node/profile.py`)."""
    served_model_name: str = DEFAULT_MODEL
    """The model name the node serves and reports."""
    served_model_aliases: tuple[str, ...] = ()
    """More names of the same model (vLLM's --served-model-name takes several; metrics name the first)."""
    model: str | None = None
    """vLLM's --model: the path the model was loaded from, `root` of its /v1/models cards; none: its name."""
    lora_modules: tuple[LoraModule, ...] = ()
    """vLLM's --lora-modules: LoRA adapters served on the model, each under its own name."""
    allow_runtime_lora_updating: bool = False
    """vLLM's VLLM_ALLOW_RUNTIME_LORA_UPDATING: serve POST /v1/load_lora_adapter and /v1/unload_lora_adapter."""
    time_scale: float = Field(default=1.0, gt=0, allow_inf_nan=False)
    """Engine seconds per wall second."""
    scheduling_policy: SchedulingPolicy = "fcfs"
    """vLLM's --scheduling-policy: the order waiting requests are scheduled in."""
    host: str = "127.0.0.1"
    """Address to listen on."""
    port: int = 0
    """Port to listen on; 0 picks a free port."""
    kv_events: InstanceOf[KvEventsConfig] | None = None
    """None: no KV-event publisher (the node still tracks its cache)."""
    kv_events_encoding: Encoding = "map"
    """How KV events are encoded: map for vLLM >= 0.24, array for <= 0.23."""
    policy: ReplyPolicy = Field(default_factory=ReplyPolicy)
    """Scripted behaviour: replies, tool calls and output lengths (docs/fake-vllm.md)."""
    enable_prompt_tokens_details: bool = True
    """vLLM's --enable-prompt-tokens-details (off by default in vLLM; on here, the fake exists to show caching)."""
    strict_model_name: bool = True
    """Answer 404 for a model name other than the served one, as vLLM does."""
    tick_seconds: float = Field(default=0.02, gt=0)
    """Longest wall-time sleep of the engine loop while the engine is busy (streaming granularity)."""
    cpu_kv_gib: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    """vLLM's --kv-offloading-size: GiB of host memory for a CPU KV tier (native offloading); None: no tier (or the
    profile's own `cpu_tier`)."""
    max_num_queued_reqs: int | None = Field(default=None, ge=0)
    """vLLM's --max-num-queued-reqs: unfinished requests (waiting + running) beyond which new ones get a 503."""

    @model_validator(mode="after")
    def _names_are_distinct(self) -> FakeNodeConfig:
        names = [self.served_model_name, *self.served_model_aliases, *(lora.name for lora in self.lora_modules)]
        repeated = sorted({name for name in names if names.count(name) > 1})
        if repeated:
            raise ValueError(f"a model name is served twice: {', '.join(repeated)}")
        return self

    def catalog(self) -> ModelCatalog:
        names = (self.served_model_name, *self.served_model_aliases)
        return ModelCatalog(names, self.model or self.served_model_name, self.lora_modules)

    def node_profile(self) -> NodeProfile:
        profile = profile_by_name(self.profile) if isinstance(self.profile, str) else self.profile
        return profile if self.cpu_kv_gib is None else with_cpu_tier(profile, self.cpu_kv_gib)
