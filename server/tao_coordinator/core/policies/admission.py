"""TAO's admission beside the plan: ready sessions admitted without waiting for one, and a utilisation target per
node that follows what vLLM does with the caches TAO reserved.

Today's rule, kept as `tao-static-admit`: a session without a place waits for the next plan, and the planner fills
every node up to `capacity × CoreSettings.utilization_target` (0.9), charging each session its whole footprint.

`FastAdmit`: a session that asks for the LLM without a place is admitted at once, without a plan, when a node has
room for its whole footprint next to what the node's holders hold now — the node where it has the most cache
credit among those with room (credit its workflow's relatives give it included, when the policy passes the
`WorkflowIndex` of its latest plan: a sub-agent without evidence of its own goes where its siblings' shared prefix
is cached, `signals/workflow.py`); without credit anywhere, the node whose CPU tier holds most of its prefix
(`signals/tier.py`), or, without that either, the node with the fewest requests running or queued at its last scrape
(ties: the most room; `place="room"` takes the most room alone, the rule before). It then holds its
place with that footprint, exactly as if a plan had admitted it, so the planner's accounting
(`FleetState.used_cells`) never passes a node's plannable capacity. A session with credit but no room at home waits
for the plan, which may interrupt someone for it or place it elsewhere.

Why load before room for a session without credit: where it lands is where its calls will run for as long as it
keeps its place, and room says nothing of that — it counts the tokens held by sessions in tools as much as those
decoding. A node's running and queued requests are what its next steps will batch; they are also what SGLang's and
the other load-aware routers balance, and the room rule lost to them when nothing was contended (mini-swe-agent at
32 sessions, docs/benchmarks.md).

Charging less — only what the session adds to its home node, its footprint minus its credit there — is unsound:
its cached blocks are on the node but in no holder's count, so after admission the accounting would pass the
node's capacity by that credit; the next plan then finds in-call sessions over capacity and interrupts holders in
tools to get back under it, and the interrupted sessions wait in their turn (measured: twice the interruptions,
more evictions, worse latency). The same holds for making every weight "footprint minus credit": resident blocks
that no weight counts let the holders' real total pass the capacity by the sum of their credits.

`AdaptiveTarget`: the headroom under the target exists so that the caches of sessions holding a place survive
their tools. vLLM knows nothing of those reservations and evicts least-recently-used blocks when it needs room, so
its preemption counter barely moves when the headroom is too small; what does move is the number of reserved
caches it evicts. The evidence comes per call (`cache_kept`): a session that held its place on a node since its
previous call there finds that call's context cached (kept) or not (evicted). Per node:

- each kept cache raises the level by `step_down · tolerance / (1 − tolerance)`;
- each evicted cache, and each preemption the node's counter shows, lowers it by `step_down`;
- nothing rises while requests queue inside vLLM (the node is full now);
- the level stays within [the settings' target, `ceiling`] — today's target is the floor.

The expected change is zero where the evicted share is `tolerance`, so the level settles where vLLM evicts about
1 % of the caches TAO reserved, or at a bound. Without evidence (a node whose calls report no cached tokens) it
never rises. The node carries the level floored to `quantum` (`Node.utilization_target`), read by the planner
and the applier alike; a change is a node change and asks for a plan, at most once per quantum. State is per node,
changed only by the coordinator's `NodeUpdate`s and call ends, with the `now` they come with.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from ..model import AgentSession, Node, NodeId
from ..settings import CoreSettings
from ..signals.base import SignalContext
from ..signals.cache_credit import CacheCredit
from ..signals.footprint import footprint_tokens
from ..signals.tier import TierCredit
from ..signals.workflow import WorkflowIndex
from ..state import token_cells
from .options import PlaceRule


class FastAdmit:
    def __init__(self, place: PlaceRule = "load", tier: bool = True) -> None:
        if place not in ("load", "room"):
            raise TypeError(f"place: one of load, room, got {place!r}")
        self.place = place
        self.tier = tier
        """Among nodes with room, prefer the one whose CPU tier holds most of the session's prefix (`TierCredit`)."""

    def admit(
        self,
        session: AgentSession,
        nodes: Mapping[NodeId, Node],
        room: Mapping[NodeId, int],
        settings: CoreSettings,
        now: float,
        workflows: WorkflowIndex | None = None,
    ) -> NodeId | None:
        cells = token_cells(footprint_tokens(session, settings), settings)
        fitting = [node_id for node_id in nodes if room.get(node_id, 0) >= cells]
        context = SignalContext(now, settings, nodes, workflows)
        credit = CacheCredit().on_nodes(session, context)
        if credit:
            return min((n for n in fitting if n in credit), key=lambda n: (-credit[n], n), default=None)
        tier = TierCredit().on_nodes(session, context) if self.tier else {}
        if tier_fitting := [n for n in fitting if n in tier]:
            return min(tier_fitting, key=lambda n: (-tier[n], n))
        if self.place == "room":
            return max(fitting, key=lambda n: (room[n], n), default=None)
        return min(fitting, key=lambda n: (nodes[n].load.running + nodes[n].load.waiting, -room[n], n), default=None)


@dataclass
class AdaptiveTarget:
    tolerance: float = 0.01
    """Share of reserved caches vLLM may evict at the level the target settles at."""
    step_down: float = 0.02
    """Fall per evicted cache or preemption: two quanta, so trouble is answered faster than evidence accrues."""
    ceiling: float = 1.0
    quantum: float = 0.01
    _level: dict[NodeId, float] = field(default_factory=dict)
    _kept: dict[NodeId, int] = field(default_factory=dict)
    _evicted: dict[NodeId, int] = field(default_factory=dict)
    _capacity: dict[NodeId, int] = field(default_factory=dict)

    def cache_kept(self, node_id: NodeId, asked_tokens: int, kept_tokens: int, now: float) -> None:
        tally = self._evicted if kept_tokens < asked_tokens else self._kept
        tally[node_id] = tally.get(node_id, 0) + 1

    def forget(self, node_id: NodeId) -> None:
        for table in (self._level, self._kept, self._evicted, self._capacity):
            table.pop(node_id, None)

    def target(self, previous: Node | None, node: Node, settings: CoreSettings, now: float, pool_tokens: int) -> float:
        floor = min(self.ceiling, settings.utilization_target)
        self._capacity[node.id] = node.capacity_tokens if node.healthy else 0
        headroom = (self.ceiling - floor) * sum(self._capacity.values())
        level = self._level.get(node.id, floor)
        kept, evicted = self._kept.pop(node.id, 0), self._evicted.pop(node.id, 0)
        if previous is not None and node.healthy:
            preempted = max(0, node.load.preemptions - previous.load.preemptions)  # a counter that went back: a restart
            if evicted or preempted:
                level -= self.step_down * (evicted + preempted)
            elif node.load.waiting == 0 and pool_tokens <= headroom:
                level += self.step_down * self.tolerance / (1 - self.tolerance) * kept
        level = min(self.ceiling, max(floor, level))
        self._level[node.id] = level
        return round(math.floor(level / self.quantum + 1e-9) * self.quantum, 9)
