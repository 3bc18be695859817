"""The live driver's side of node demotion (`core/demotion.py`): one log line per demotion and per restoration, the
probes the core asks for (`fleet/probe.py`), and the Prometheus series an operator alerts on.

Series (read from the core at scrape time, like the other state figures of `metrics.py`, so they cannot drift):
`tao_node_refused_calls_total{node}` (calls clients reported refused), `tao_node_demotions_total{node}`,
`tao_node_restorations_total{node}`, and the gauge `tao_node_demoted{node}` (1 while demoted). A replica that takes
over starts its counts from zero, which Prometheus reads as a counter reset.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ..core.actions import Action, NodeDemoted, NodeRestored, ProbeNode
from ..core.events import NodeProbed
from ..fleet.probe import NodeProber
from .core_slot import CoreSlot

log = logging.getLogger("tao.coordinator")


class DemotionDriver:
    """Carries out the core's demotion actions: probes the nodes at `urls` and feeds what each probe found."""

    def __init__(
        self,
        urls: Mapping[str, str],
        feed: Callable[[NodeProbed], object],
        registry: CollectorRegistry,
        core: CoreSlot,
    ) -> None:
        self.prober = NodeProber(urls, feed)
        registry.register(_DemotionCollector(core))

    def carry_out(self, action: Action) -> None:
        match action:
            case NodeDemoted():
                log.warning("node %s demoted: %s; probing it until it serves again", action.node, action.reason)
            case ProbeNode():
                self.prober.start(action.node)
            case NodeRestored():
                log.info(
                    "node %s serves again (a probe call answered): restored after %.1f s", action.node, action.demoted_s
                )

    async def stop(self) -> None:
        await self.prober.stop()


class _DemotionCollector(Collector):
    def __init__(self, core: CoreSlot) -> None:
        self.core = core

    def collect(self) -> Iterator[Metric]:
        core = self.core.coordinator
        refused = CounterMetricFamily(
            "tao_node_refused_calls",
            "Model calls clients reported the node refused (503, 429, refused or reset).",
            labels=["node"],
        )
        demoted = CounterMetricFamily(
            "tao_node_demotions", "Times the node was demoted for refusing calls in a row.", labels=["node"]
        )
        restored = CounterMetricFamily(
            "tao_node_restorations", "Times a probe call found the demoted node serving again.", labels=["node"]
        )
        now = GaugeMetricFamily("tao_node_demoted", "1 while the node is demoted.", labels=["node"])
        for name in sorted(core.nodes):
            standing = core.demotion(name)
            refused.add_metric([name], standing.refused_total)
            demoted.add_metric([name], standing.demoted_total)
            restored.add_metric([name], standing.restored_total)
            now.add_metric([name], 1.0 if standing.demoted else 0.0)
        yield from (refused, demoted, restored, now)
