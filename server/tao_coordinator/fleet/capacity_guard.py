"""Whether to believe the KV capacity a node reports, before the planner places sessions on it.

A node once reported 1.6e31 tokens and was believed: 800 k tokens went to a 322 k node. The rules below hold by
construction, whatever the fleet, so none of them is a tuned threshold:

- a capacity of 0 or less is not a serving node's: vLLM does not start without a KV block to give;
- a capacity above the ceiling (`FleetConfig.max_capacity_tokens`, default 10^9 tokens: 16 TB of KV at 16 KiB a
  token, past any node built) is a broken exporter's; so is a CPU tier above it;
- vLLM sizes its KV cache once per process, at start-up (`num_gpu_blocks` from its memory profile): a capacity that
  changes within one process is a broken figure. A change is believed only across a restart: the node's
  `process_start_time_seconds` or its number of engines changed, or it stopped answering in between (`node_lost`).

A node failing a rule is quarantined: not used, with the rule's reason, its last believed capacity kept, until a
scrape passes every rule again. Invariant: `trusted` only ever holds a capacity that passed every rule.
"""

from __future__ import annotations

from dataclasses import dataclass

Epoch = tuple[float | None, int]
"""What tells one process of a node from the next: (`process_start_time_seconds` or None, engines)."""


@dataclass(frozen=True, slots=True)
class Quarantine:
    kind: str
    """"no_capacity", "above_ceiling" or "capacity_changed" (a bounded label for counting)."""
    reason: str


class CapacityGuard:
    def __init__(self, ceiling: int) -> None:
        self.ceiling = ceiling
        self.trusted: int | None = None
        """The last capacity believed (None before the first)."""
        self._epoch: Epoch | None = None
        self._lost = False

    def node_lost(self) -> None:
        """The node stopped answering: whatever it reports next may be a new process's."""
        self._lost = True

    def check(self, capacity: int | None, cpu_capacity: int | None, epoch: Epoch) -> Quarantine | None:
        """None when the scrape's figures are believed (then `trusted` is `capacity`, if given); else why not.
        `capacity` and `cpu_capacity` as reported, None when the scrape does not say."""
        if capacity is not None and capacity <= 0:
            return Quarantine("no_capacity", f"reports a KV capacity of {capacity} tokens: a serving node has some")
        for tier, figure in (("KV", capacity), ("CPU-tier KV", cpu_capacity)):
            if figure is not None and figure > self.ceiling:
                return Quarantine(
                    "above_ceiling",
                    f"reports {figure:.3g} {tier} tokens, above fleet.max_capacity_tokens = {self.ceiling}",
                )
        restarted = self._lost or epoch != self._epoch
        if capacity is not None and self.trusted is not None and capacity != self.trusted and not restarted:
            return Quarantine(
                "capacity_changed",
                f"its KV capacity changed from {self.trusted} to {capacity} tokens without a restart",
            )
        if capacity is not None:
            self.trusted = capacity
        self._epoch, self._lost = epoch, False
        return None
