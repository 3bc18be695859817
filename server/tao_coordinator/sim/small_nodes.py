"""`tao sim`'s two-model options: small-model nodes beside the main ones, and the side-call stress multiplier.

A fleet without small nodes (`--small-nodes 0`, the default) is the one-model fleet of before: its run, its output
and its JSON are unchanged. With small nodes the JSON's `fleet` names them and their profile. The context cap stays
the main nodes' limit: it bounds sessions, which the main model serves; a small-model call longer than the small
nodes' limit is refused by its node and counted as rejected (the measured side calls and Explore agents stay far
below it).
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from typing import Any

from .node import NodeProfile, profile_by_name
from .node.profile import with_cpu_tier
from .workloads import SMALL_MODEL, Workload

DEFAULT_SMALL_PROFILE = "h100-tp1-8b"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--small-nodes",
        type=int,
        default=0,
        help="nodes serving the small model (named small-NN) beside --nodes main-model nodes; the workload's side "
        "calls and small-model sub-agents run there (0: a one-model fleet)",
    )
    parser.add_argument(
        "--small-node-profile", default=DEFAULT_SMALL_PROFILE, help="the small nodes' profile (default: %(default)s)"
    )
    parser.add_argument(
        "--side-call-rate",
        type=float,
        default=1.0,
        help="multiply the synthetic preset's side-call share by this (a stress knob; default 1: as measured)",
    )


@dataclass(frozen=True)
class SmallNodes:
    nodes: int
    profile: NodeProfile | None
    side_call_rate: float

    def simulation_kwargs(self) -> dict[str, Any]:
        return {"small_nodes": self.nodes, "small_profile": self.profile}

    def fleet_line(self) -> str:
        if self.profile is None:
            return ""
        capacity = self.profile.reported_capacity_tokens
        return f" + {self.nodes} × {self.profile.name} serving the small model ({capacity:,} KV tokens each)"

    def fleet_json(self) -> dict[str, Any]:
        if self.profile is None:
            return {}
        return {
            "small_nodes": self.nodes,
            "small_node_profile": self.profile.name,
            "small_capacity_tokens": self.profile.reported_capacity_tokens,
        }


def small_nodes(args: argparse.Namespace, cpu_kv_gib: float) -> SmallNodes:
    """The options read; raises ValueError naming the option that is wrong (or UnknownProfile)."""
    if args.small_nodes < 0:
        raise ValueError("--small-nodes: must be at least 0")
    if not 0 <= args.side_call_rate < math.inf:
        raise ValueError("--side-call-rate: must be a finite number, at least 0")
    if not args.small_nodes:
        return SmallNodes(0, None, args.side_call_rate)
    profile = profile_by_name(args.small_node_profile)
    if cpu_kv_gib:
        profile = with_cpu_tier(profile, cpu_kv_gib)
    return SmallNodes(args.small_nodes, profile, args.side_call_rate)


def small_model_calls(workload: Workload) -> int:
    """Calls of the workload for the small model (side calls and sub-agents on it)."""
    return sum(request.model == SMALL_MODEL for script in workload.scripts for request in script.all_requests())
