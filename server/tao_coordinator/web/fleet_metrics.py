"""The coordinator's `/metrics` families about how each node's observation goes: failed scrapes and quarantines (by a
bounded kind), vLLM 0.33 figures shown as scraped (CPU tier, admission rejections, prompt tokens the CPU tier
served), KV-event restarts, and the cache credit the core holds from KV events.

Read at scrape time from the last observations, the KV indexes and the core's sessions, so they never drift from
what they describe. A figure not known yet is absent (the CPU tier before vLLM shows it), never 0.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from ..core.model import AgentSession, EvidenceSource
from ..fleet.kv_index import NodeKvIndex
from ..fleet.poller import NodeObservation


def fleet_families(
    nodes: Iterable[str],
    observations: Mapping[str, NodeObservation],
    kv_index: Callable[[str], NodeKvIndex | None],
    sessions: Iterable[AgentSession],
) -> Iterator[Metric]:
    failures = CounterMetricFamily(
        "tao_node_scrape_failures", "Failed scrapes of each node, by kind.", labels=["node", "kind"]
    )
    quarantines = CounterMetricFamily(
        "tao_node_quarantines",
        "Times a node's capacity was not believed, by the rule it broke.",
        labels=["node", "kind"],
    )
    quarantined = GaugeMetricFamily(
        "tao_node_quarantined", "1 while a node's capacity is not believed (nothing placed there).", labels=["node"]
    )
    cpu = GaugeMetricFamily(
        "tao_node_cpu_capacity_tokens",
        "KV tokens of a node's CPU tier; absent until the node shows it.",
        labels=["node"],
    )
    rejections = CounterMetricFamily(
        "tao_node_admission_rejections", "vLLM's admission_rejections_total (503s), as scraped.", labels=["node"]
    )
    host = CounterMetricFamily(
        "tao_node_prompt_tokens_cached_host",
        "Prompt tokens a node's CPU tier served (vLLM's prompt_tokens_cached_by_source host), as scraped.",
        labels=["node"],
    )
    resets = CounterMetricFamily(
        "tao_node_kv_event_resets", "Engine restarts seen in a node's KV-event numbers.", labels=["node"]
    )
    for name in sorted(nodes):
        index = kv_index(name)
        if index is not None:
            resets.add_metric([name], index.resets)
        observation = observations.get(name)
        if observation is None:
            continue
        for kind, count in sorted(observation.scrape_failures.items()):
            failures.add_metric([name, kind], count)
        for kind, count in sorted(observation.quarantines.items()):
            quarantines.add_metric([name, kind], count)
        quarantined.add_metric([name], 1.0 if observation.quarantined else 0.0)
        if observation.cpu_tier_known:
            cpu.add_metric([name], observation.cpu_capacity_tokens)
        rejections.add_metric([name], observation.admission_rejections)
        host.add_metric([name], observation.host_cached_tokens)
    yield from (failures, quarantines, quarantined, cpu, rejections, host, resets)
    yield _kv_credit(sessions)


def _kv_credit(sessions: Iterable[AgentSession]) -> Metric:
    held: dict[tuple[str, str], int] = {}
    for session in sessions:
        for evidence in session.evidence:
            if evidence.source is EvidenceSource.KV_EVENTS:
                key = (evidence.node, evidence.tier)
                held[key] = held.get(key, 0) + evidence.tokens
    credit = GaugeMetricFamily(
        "tao_node_kv_credit_tokens",
        "Prefix tokens of live sessions the core holds resident on each node and tier, from KV events.",
        labels=["node", "tier"],
    )
    for (node, tier), tokens in sorted(held.items()):
        credit.add_metric([node, tier], tokens)
    return credit
