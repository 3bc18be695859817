"""Policies by name, imported on use: the registry maps a name to where its factory and its options model live.

Importing this module imports no policy, and checking a name (`check_name`, what a config's validation runs) imports
at most the policy's options model: no router module is loaded and no policy is built until `make_policy` is asked
for one. A name may carry options in brackets, `dynamo[temperature=0.5]` or `thunderagent[decay=resume;interval_s=2]`
(`parse_name`: numbers and true/false are converted); they are checked against the policy's options model
(`core/policies/options.py`, `baselines/options.py`) and the factory receives the model. A name not in the registry
may be a dotted path `package.module:factory` to a callable that takes no argument and returns a `Policy`, so a
third-party policy plugs in without touching this file.

Invariants: every entry's factory takes `(options)` when it has an options model, `()` otherwise, plus `seed=` when
`seeded`; a policy made with options is named by the whole name (`dynamo[temperature=0.5]`).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pydantic import BaseModel

    from .base import Policy

_TAO = "tao_coordinator.core.policies"
_BASELINES = "tao_coordinator.baselines"


@dataclass(frozen=True, slots=True)
class PolicyEntry:
    factory: str
    """`module:attribute` of a callable that returns the policy."""
    options: str | None = None
    """`module:attribute` of the policy's options model; None: the policy takes no options."""
    seeded: bool = False
    """The factory takes `seed=` (it draws random numbers)."""


def _tao(factory: str, options: str | None = None) -> PolicyEntry:
    return PolicyEntry(f"{_TAO}.tao:{factory}", options and f"{_TAO}.options:{options}")


def _baseline(module: str, factory: str, options: str | None = None, seeded: bool = False) -> PolicyEntry:
    return PolicyEntry(f"{_BASELINES}.{module}:{factory}", options and f"{_BASELINES}.options:{options}", seeded)


POLICIES: dict[str, PolicyEntry] = {
    "tao": _tao("tao", "TaoOptions"),
    "tao-no-dp": _tao("tao_no_dp"),
    "tao-no-readiness": _tao("tao_no_readiness"),
    "tao-no-decay": _tao("tao_no_decay"),
    "tao-no-cache": _tao("tao_no_cache"),
    "tao-no-tier": _tao("tao_no_tier"),
    "tao-no-token-time": _tao("tao_no_token_time"),
    "tao-no-workflow": _tao("tao_no_workflow"),
    "tao-no-expected-tools": _tao("tao_no_expected_tools"),
    "tao-plain-footprint": _tao("tao_plain_footprint"),
    "tao-static-admit": _tao("tao_static_admit"),
    "tao-room-admit": _tao("tao_room_admit"),
    "tao-spread": PolicyEntry(f"{_TAO}.tao_spread:tao_spread"),
    "tao-paper": _tao("tao_paper"),
    "tao-bound": _tao("tao_bound"),
    "round-robin": _baseline("round_robin", "RoundRobinPolicy"),
    "least-loaded": _baseline("least_loaded", "LeastLoadedPolicy"),
    "sglang-cache-aware": _baseline("sglang", "SglangCacheAwarePolicy", "SglangOptions"),
    "dynamo": _baseline("dynamo", "DynamoPolicy", "DynamoOptions", seeded=True),
    "llm-d": _baseline("llm_d", "LlmdPolicy", "LlmdOptions", seeded=True),
    "llm-d-precise": _baseline("llm_d", "LlmdPrecisePolicy", "LlmdPreciseOptions", seeded=True),
    "thunderagent": _baseline("thunderagent", "ThunderAgentPolicy", "ThunderAgentOptions"),
    "thunderagent-paper": _baseline("thunderagent", "thunderagent_paper", "ThunderAgentPaperOptions"),
    "continuum": _baseline("continuum", "ContinuumPolicy", "ContinuumOptions"),
    "cost-model": _baseline("cost_model", "CostModelPolicy", "CostModelOptions", seeded=True),
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
    """A name `make_policy` cannot make: not registered, no importable `module:factory`, or malformed brackets."""

    def __init__(self, name: str, detail: str = "") -> None:
        super().__init__(self._message(name, detail))

    def _message(self, name: str, detail: str) -> str:
        known = f"known: {', '.join(sorted(POLICIES))}, or module.path:factory"
        return f"unknown policy {name!r}{'; ' + detail if detail else ''}; {known}"


class BadOptions(UnknownPolicy):
    """A registered policy with options its model rejects: the message names each bad one and the known ones (an
    `UnknownPolicy`, so every caller that reports a bad name reports these too)."""

    def __init__(self, name: str, problems: list[str], known: list[str]) -> None:
        self.known = known
        super().__init__(name, "; ".join(problems))

    def _message(self, name: str, detail: str) -> str:
        return f"policy {name!r}: {detail} (its options: {', '.join(self.known) or 'none'})"


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


def _load(path: str) -> Any:
    module, _, attribute = path.partition(":")
    return getattr(importlib.import_module(module), attribute)


def _options(name: str, entry: PolicyEntry, given: dict[str, object]) -> BaseModel | None:
    """The entry's options model filled from `given`, or `BadOptions` naming what it rejects."""
    if entry.options is None:
        if given:
            raise BadOptions(name, [f"unknown option {key!r}" for key in given], [])
        return None
    from pydantic import ValidationError

    model: type[BaseModel] = _load(entry.options)
    try:
        return model.model_validate(given)
    except ValidationError as error:
        problems = [
            f"unknown option {'.'.join(map(str, e['loc']))!r}"
            if e["type"] == "extra_forbidden"
            else f"{'.'.join(map(str, e['loc']))}={e.get('input')!r}: {e['msg']}"
            for e in error.errors()
        ]
        raise BadOptions(name, problems, sorted(model.model_fields)) from error


def _third_party(name: str) -> Any:
    module_name, _, attribute = name.partition(":")
    if not attribute:
        raise UnknownPolicy(name)
    try:
        factory = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as error:
        raise UnknownPolicy(name) from error
    if not callable(factory):
        raise UnknownPolicy(name, f"{attribute} is not callable")
    return factory


def check_name(name: str) -> None:
    """Raise `UnknownPolicy` unless `make_policy(name)` would find the policy and accept its options; builds nothing
    and imports no registered policy's module (a third-party `module:factory` is imported, not called)."""
    base, options = parse_name(name)
    entry = POLICIES.get(base)
    if entry is None:
        _third_party(name)
    else:
        _options(name, entry, options)


def make_policy(name: str, seed: int = 0) -> Policy:
    """The policy `name` names, its options applied; `seed` reaches every policy that draws random numbers."""
    from .base import Policy

    base, options = parse_name(name)
    entry = POLICIES.get(base)
    if entry is None:
        made = _third_party(name)()
        if not isinstance(made, Policy):
            raise UnknownPolicy(name, f"its factory returned a {type(made).__name__}, not a Policy")
        return made
    model = _options(name, entry, options)
    factory = _load(entry.factory)
    arguments = () if model is None else (model,)
    policy: Policy = factory(*arguments, seed=seed) if entry.seeded else factory(*arguments)
    if options:
        policy.name = name
    return policy
