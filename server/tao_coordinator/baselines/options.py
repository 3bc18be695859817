"""The options of each baseline, as `name[key=value;...]` sets them (`core/policies/registry.py`), and their defaults.

One model per router (on `Options`, `core/policies/options.py`: unknown keys are errors, a number is never a bool or
a string); its constructor takes it whole, so a default lives here and nowhere else. This module imports no router:
the registry checks a policy name's options against it (a config is validated this way) without loading the router.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BeforeValidator

from ..core.policies.options import NonNegative, Number, Options, Positive


class SglangOptions(Options):
    """SMG `cache_aware` with the Python/CLI defaults (`baselines/sglang.py`)."""

    cache_threshold: Number = 0.3
    balance_abs_threshold: int = 64
    balance_rel_threshold: Number = 1.5
    eviction_interval_s: Number = 120.0
    max_tree_tokens: int = 1 << 26


class DynamoOptions(Options):
    """Dynamo's kv-router defaults (`baselines/dynamo.py`); `temperature` > 0 samples by softmax."""

    overlap_score_credit: Number = 1.0
    prefill_load_scale: Number = 1.0
    temperature: Number = 0.0
    host_cache_hit_weight: Number = 0.75
    disk_cache_hit_weight: Number = 0.25


class EppOptions(Options):
    """The weights of the llm-d EPP's default profile, shared by both profiles (`baselines/llm_d.py`)."""

    prefix_weight: Number = 3.0
    kv_weight: Number = 2.0
    queue_weight: Number = 2.0


class LlmdOptions(EppOptions):
    max_prefix_blocks: int = 256


class LlmdPreciseOptions(EppOptions):
    gpu_weight: Number = 1.0
    cpu_weight: Number = 0.8


class CostModelOptions(Options):
    """The corrected unified cost (`baselines/cost_model.py`): weights scale its terms, the rest set its priors."""

    temperature: NonNegative = 0.0
    queue_slack: NonNegative = 4.0
    queue_weight: NonNegative = 1.0
    affinity_weight: NonNegative = 1.0
    tools_weight: NonNegative = 1.0
    default_output_tokens: Positive = 512.0
    half_life_s: Positive = 10.0
    link_time_constant_s: Positive = 5.0


class ThunderAgentOptions(Options):
    """The released code's defaults (`baselines/thunderagent.py`); `decay` picks the code's flag or the paper's."""

    decay: Literal["off", "resume", "paper"] = "off"
    interval_s: Number = 5.0
    acting_weight: Number = 1.0
    buffer_tokens: int = 100
    force_resume_s: Number = 1800.0
    half_life_s: Number = 1.0


class ThunderAgentPaperOptions(ThunderAgentOptions):
    decay: Literal["off", "resume", "paper"] = "paper"


def _names(value: object) -> object:
    """`continuum[text_harnesses=a,b]`: a comma-separated list of harness names."""
    return tuple(part.strip() for part in value.split(",") if part.strip()) if isinstance(value, str) else value


class ContinuumOptions(Options):
    """The released preview's pin (`baselines/continuum.py`), and the harnesses whose replies it can parse."""

    pin_s: Number = 2.0
    text_harnesses: Annotated[tuple[str, ...], BeforeValidator(_names)] = ("mini-swe-agent",)
