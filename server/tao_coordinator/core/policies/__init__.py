"""Policies by name. A name not in the registry may be a dotted path `package.module:factory` to a callable that
returns a `Policy`, so a third-party policy plugs in without touching this file."""

from __future__ import annotations

import importlib
from collections.abc import Callable

from .base import Policy
from .round_robin import RoundRobinPolicy
from .tao import tao, tao_no_cache, tao_no_decay, tao_no_dp, tao_no_readiness

POLICIES: dict[str, Callable[[], Policy]] = {
    "tao": tao,
    "tao-no-dp": tao_no_dp,
    "tao-no-readiness": tao_no_readiness,
    "tao-no-decay": tao_no_decay,
    "tao-no-cache": tao_no_cache,
    "round-robin": RoundRobinPolicy,
}


class UnknownPolicy(ValueError):
    def __init__(self, name: str) -> None:
        super().__init__(f"unknown policy {name!r}; known: {', '.join(sorted(POLICIES))}, or module.path:factory")


def make_policy(name: str) -> Policy:
    factory = POLICIES.get(name)
    if factory is not None:
        return factory()
    module_name, _, attribute = name.partition(":")
    if not attribute:
        raise UnknownPolicy(name)
    try:
        made: Policy = getattr(importlib.import_module(module_name), attribute)()
    except (ImportError, AttributeError) as error:
        raise UnknownPolicy(name) from error
    return made


__all__ = ["POLICIES", "Policy", "UnknownPolicy", "make_policy"]
