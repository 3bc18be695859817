"""Scheduling policies by name: TAO, its ablations and variants here; the baselines of
`reference/routers-and-baselines.md` in `tao_coordinator/baselines/`. The registry (`registry.py`) imports each on
use; the interface they all implement is `base.py`. Modules without a folder are in `core/policies/`.

| name                 | kind                 | module                      | source                                |
|----------------------|----------------------|-----------------------------|---------------------------------------|
| tao, tao-no-*        | admission            | `tao.py`                    | docs/algorithm.md                     |
| tao-static-admit     | admission            | `tao.py`                    | the static target, `admission.py`     |
| tao-spread           | admission            | `tao_spread.py`             | prototype: worst-fit ties             |
| tao-paper, tao-bound | admission            | `tao.py`                    | published / previous binary readiness |
| round-robin          | per-request router   | `baselines/round_robin.py`  | §5.11                                 |
| least-loaded         | per-request router   | `baselines/least_loaded.py` | §5.11                                 |
| sglang-cache-aware   | per-request router   | `baselines/sglang.py`       | §2 (SMG `cache_aware`, CLI defaults)  |
| dynamo               | per-request router   | `baselines/dynamo.py`       | §1 (kv-router cost, KV events on)     |
| llm-d                | per-request router   | `baselines/llm_d.py`        | §3 (EPP default profile 3/2/2)        |
| llm-d-precise        | per-request router   | `baselines/llm_d.py`        | §3.4 (precise prefix from KV events)  |
| thunderagent         | admission, 5-s ticks | `baselines/thunderagent.py` | §5.1 (released code, decay off)       |
| thunderagent-paper   | admission, 5-s ticks | `baselines/thunderagent.py` | §5.1 (paper's decay, Eq. 7)           |
| continuum            | admission            | `baselines/continuum.py`    | §5.2 (released preview: 2 s pins)     |
| cost-model           | per-request router   | `baselines/cost_model.py`   | cost-model.md §2–§3, corrected        |

Sections (§) are those of `reference/routers-and-baselines.md` unless named. Options in brackets
(`dynamo[temperature=0.5]`) are checked against the policy's options model (`options.py`, `baselines/options.py`);
`make_policy(name, seed)` passes the seed to every policy that draws random numbers; `module.path:factory` names a
third-party policy.
"""

from __future__ import annotations

from .registry import (
    ABLATIONS,
    BASELINES,
    POLICIES,
    VARIANTS,
    BadOptions,
    UnknownPolicy,
    check_name,
    make_policy,
    parse_name,
)

__all__ = [
    "ABLATIONS",
    "BASELINES",
    "POLICIES",
    "VARIANTS",
    "BadOptions",
    "UnknownPolicy",
    "check_name",
    "make_policy",
    "parse_name",
]
