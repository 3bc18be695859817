"""Policies by name: TAO and its ablations, and the baselines of `reference/routers-and-baselines.md`.

| name                | kind                          | source (routers-and-baselines.md)                           |
|---------------------|-------------------------------|-------------------------------------------------------------|
| tao, tao-no-*       | admission (plans)             | design §4–§5, `tao.py`                                      |
| tao-static-admit    | admission (plans)             | TAO with the static utilisation target, `admission.py`      |
| tao-spread          | admission (plans)             | prototype: TAO with worst-fit ties, `tao_spread.py`         |
| tao-paper, tao-bound| admission (plans)             | TAO with the published / the previous binary readiness rule |
| round-robin         | per-request router            | §5.11                                                       |
| least-loaded        | per-request router            | §5.11                                                       |
| sglang-cache-aware  | per-request router            | §2 (SMG `cache_aware`, Python/CLI defaults)                 |
| dynamo              | per-request router            | §1 (kv-router cost, KV events on)                           |
| llm-d               | per-request router            | §3 (EPP default profile: prefix 3, kv 2, queue 2, max score)|
| llm-d-precise       | per-request router            | §3.4 (precise prefix from KV events, gpu 1.0 / cpu 0.8)     |
| thunderagent        | admission (plans every 5 s)   | §5.1 (released code, decay off)                             |
| thunderagent-paper  | admission (plans every 5 s)   | §5.1 (paper's decay, Eq. 7)                                 |
| continuum           | admission (plans)             | §5.2 (released preview: 2 s pins, job FCFS)                 |
| cost-model          | per-request router            | cost-model.md §2–§3 (the study's unified cost, corrected)   |

A name may carry options in brackets, `dynamo[temperature=0.5]` or `thunderagent[decay=resume;interval_s=2]`: each
`key=value` becomes a keyword argument of the factory (numbers and true/false are converted). `make_policy(name,
seed)` passes the seed to every baseline that draws random numbers. A name not in the registry may be a dotted path
`package.module:factory` to a callable that returns a `Policy`, so a third-party policy plugs in without touching
this file.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from .base import Policy
from .continuum import ContinuumPolicy
from .cost_model import CostModelPolicy
from .dynamo import DynamoPolicy
from .least_loaded import LeastLoadedPolicy
from .llm_d import LlmdPolicy, LlmdPrecisePolicy
from .round_robin import RoundRobinPolicy
from .sglang import SglangCacheAwarePolicy
from .tao import (
    tao,
    tao_bound,
    tao_no_cache,
    tao_no_decay,
    tao_no_dp,
    tao_no_expected_tools,
    tao_no_readiness,
    tao_no_tier,
    tao_no_token_time,
    tao_no_workflow,
    tao_paper,
    tao_plain_footprint,
    tao_room_admit,
    tao_static_admit,
)
from .tao_spread import tao_spread
from .thunderagent import thunderagent, thunderagent_paper


def _unseeded(factory: Callable[..., Policy]) -> Callable[..., Policy]:
    def make(*, seed: int = 0, **options: object) -> Policy:
        return factory(**options)

    return make


POLICIES: dict[str, Callable[..., Policy]] = {
    "tao": _unseeded(tao),
    "tao-no-dp": _unseeded(tao_no_dp),
    "tao-no-readiness": _unseeded(tao_no_readiness),
    "tao-no-decay": _unseeded(tao_no_decay),
    "tao-no-cache": _unseeded(tao_no_cache),
    "tao-no-tier": _unseeded(tao_no_tier),
    "tao-no-token-time": _unseeded(tao_no_token_time),
    "tao-no-workflow": _unseeded(tao_no_workflow),
    "tao-no-expected-tools": _unseeded(tao_no_expected_tools),
    "tao-plain-footprint": _unseeded(tao_plain_footprint),
    "tao-static-admit": _unseeded(tao_static_admit),
    "tao-room-admit": _unseeded(tao_room_admit),
    "tao-spread": tao_spread,
    "tao-paper": _unseeded(tao_paper),
    "tao-bound": _unseeded(tao_bound),
    "round-robin": _unseeded(RoundRobinPolicy),
    "least-loaded": LeastLoadedPolicy,
    "sglang-cache-aware": SglangCacheAwarePolicy,
    "dynamo": DynamoPolicy,
    "llm-d": LlmdPolicy,
    "llm-d-precise": LlmdPrecisePolicy,
    "thunderagent": thunderagent,
    "thunderagent-paper": thunderagent_paper,
    "continuum": ContinuumPolicy,
    "cost-model": CostModelPolicy,
}

BASELINES = (
    "round-robin",
    "least-loaded",
    "sglang-cache-aware",
    "dynamo",
    "llm-d",
    "llm-d-precise",
    "thunderagent",
    "thunderagent-paper",
    "continuum",
    "cost-model",
)
ABLATIONS = (
    "tao-no-dp",
    "tao-no-readiness",
    "tao-no-decay",
    "tao-no-cache",
    "tao-no-tier",
    "tao-no-token-time",
    "tao-no-workflow",
    "tao-no-expected-tools",
    "tao-plain-footprint",
    "tao-static-admit",
    "tao-room-admit",
    "tao-paper",
    "tao-bound",
)
VARIANTS = ("tao-spread",)
"""Prototype variants of TAO, benchmarked beside it but never counted as TAO or as a baseline."""


class UnknownPolicy(ValueError):
    def __init__(self, name: str, detail: str = "") -> None:
        known = f"known: {', '.join(sorted(POLICIES))}, or module.path:factory"
        super().__init__(f"unknown policy {name!r}{'; ' + detail if detail else ''}; {known}")


def _option(text: str) -> object:
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def parse_name(name: str) -> tuple[str, dict[str, object]]:
    """`base[k=v;...]` → (`base`, {k: v}); a name without brackets has no options."""
    base, bracket, rest = name.partition("[")
    if not bracket:
        return name, {}
    if not rest.endswith("]"):
        raise UnknownPolicy(name, "options go in brackets: name[key=value;...]")
    options: dict[str, object] = {}
    for item in filter(None, rest[:-1].split(";")):
        key, equals, value = item.partition("=")
        if not equals or not key.strip():
            raise UnknownPolicy(name, f"option {item!r} is not key=value")
        options[key.strip()] = _option(value.strip())
    return base, options


def make_policy(name: str, seed: int = 0) -> Policy:
    base, options = parse_name(name)
    factory = POLICIES.get(base)
    if factory is not None:
        try:
            policy = factory(seed=seed, **options)
        except TypeError as error:
            raise UnknownPolicy(name, str(error)) from error
        if options:
            policy.name = name
        return policy
    module_name, _, attribute = name.partition(":")
    if not attribute:
        raise UnknownPolicy(name)
    try:
        made: Policy = getattr(importlib.import_module(module_name), attribute)()
    except (ImportError, AttributeError) as error:
        raise UnknownPolicy(name) from error
    return made


__all__ = ["ABLATIONS", "BASELINES", "POLICIES", "VARIANTS", "Policy", "UnknownPolicy", "make_policy", "parse_name"]
