"""Discovery of nodes in DNS, against a real dnsmasq on loopback (`tests/fleet/dnsmasq.py`)."""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import time
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import dns.flags
import dns.message
import dns.query
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from tao_coordinator.config import DiscoveryConfig
from tao_coordinator.fleet.discovery import Change, DiscoveredNode, DnsDiscovery, diff, node_name, nodes_at
from tao_coordinator.fleet.dns_lookup import FailureKind, LookupFailed, lookup_addresses, make_resolver
from tests.fleet.dnsmasq import LocalDnsmasq

NAME = "vllm.test"
INTERVAL_S = 0.5
SLACK_S = 0.5
"""Beyond one interval, what a change may take to be reported: the lookup itself, and a loaded machine's scheduling."""


@pytest.fixture
def dnsmasq(tmp_path: Path) -> Iterator[LocalDnsmasq]:
    server = LocalDnsmasq(tmp_path, {NAME: ["127.0.0.2", "127.0.0.3", "::1"]}, "--txt-record=text-only.test,hello")
    server.start()
    yield server
    server.stop()


def config_of(server: LocalDnsmasq, **fields: Any) -> DiscoveryConfig:
    host, port = server.address
    fields = {"name": NAME, "resolver": f"{host}:{port}", "interval_s": INTERVAL_S, "timeout_s": 0.3, **fields}
    return DiscoveryConfig(**fields)


class Recorder:
    """The callbacks of one `DnsDiscovery`: what they were called with, and when."""

    def __init__(self) -> None:
        self.changes: asyncio.Queue[tuple[float, Change[DiscoveredNode]]] = asyncio.Queue()
        self.failures: list[LookupFailed] = []

    def on_change(self, change: Change[DiscoveredNode]) -> None:
        self.changes.put_nowait((time.monotonic(), change))

    async def next_change(self, timeout_s: float = 5.0) -> tuple[float, Change[DiscoveredNode]]:
        return await asyncio.wait_for(self.changes.get(), timeout_s)


@asynccontextmanager
async def running(config: DiscoveryConfig) -> AsyncIterator[tuple[DnsDiscovery, Recorder]]:
    recorder = Recorder()
    discovery = DnsDiscovery(config, recorder.on_change, recorder.failures.append)
    task = asyncio.create_task(discovery.run())
    try:
        yield discovery, recorder
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


def urls(nodes: frozenset[DiscoveredNode]) -> set[str]:
    return {node.url for node in nodes}


def test_diff_tells_what_was_added_and_removed() -> None:
    change = diff({"a", "b"}, {"b", "c"})
    assert change == Change(frozenset({"c"}), frozenset({"a"}))
    assert not diff({"a"}, {"a"})
    assert diff(set(), {"a"}) == Change(frozenset({"a"}), frozenset())


def test_nodes_are_named_after_their_address_and_ipv6_urls_bracketed() -> None:
    config = DiscoveryConfig(name="vllm.default.svc.cluster.local", port=8001)
    assert sorted(nodes_at({"10.0.0.5", "fd00::5"}, config)) == [
        DiscoveredNode("vllm-10-0-0-5", "http://10.0.0.5:8001"),
        DiscoveredNode("vllm-fd00--5", "http://[fd00::5]:8001"),
    ]
    renamed = DiscoveryConfig(name="vllm.default.svc.cluster.local", node_prefix="gpu", scheme="https")
    assert nodes_at({"10.0.0.5"}, renamed) == {DiscoveredNode("gpu-10-0-0-5", "https://10.0.0.5:8000")}


@given(st.ip_addresses(), st.ip_addresses())
def test_distinct_addresses_get_distinct_names(first: Any, second: Any) -> None:
    names = {node_name("vllm", str(address)) for address in (first, second)}
    assert len(names) == len({first, second})
    assert all(len(name) <= 100 for name in names)  # NodeConfig's limit on a name


@pytest.mark.parametrize(
    ("resolver", "address"),
    [
        (None, None),
        ("10.0.0.2", ("10.0.0.2", 53)),
        ("10.0.0.2:5353", ("10.0.0.2", 5353)),
        ("fd00::2", ("fd00::2", 53)),
        ("[fd00::2]:5353", ("fd00::2", 5353)),
    ],
)
def test_a_resolver_is_an_address_and_a_port(resolver: str | None, address: tuple[str, int] | None) -> None:
    assert DiscoveryConfig(name="vllm.test", resolver=resolver).resolver_address == address


@pytest.mark.parametrize(
    "fields",
    [
        {"name": "vllm test"},
        {"name": "vllm..test"},
        {"name": "vllm.test", "resolver": "dns.local:53"},
        {"name": "vllm.test", "resolver": "10.0.0.2:0"},
        {"name": "vllm.test", "resolver": "[fd00::2"},
        {"name": "vllm.test", "interval_s": 0},
        {"name": "vllm.test", "scheme": "tcp"},
    ],
)
def test_a_bad_discovery_config_is_refused(fields: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        DiscoveryConfig(**fields)


async def test_a_lookup_finds_every_a_and_aaaa_record(dnsmasq: LocalDnsmasq) -> None:
    discovery = DnsDiscovery(config_of(dnsmasq), lambda change: None)
    change = await discovery.refresh()
    expected = {"http://127.0.0.2:8000", "http://127.0.0.3:8000", "http://[::1]:8000"}
    assert urls(change.added) == expected
    assert {node.name for node in discovery.nodes} == {"vllm-127-0-0-2", "vllm-127-0-0-3", "vllm---1"}
    assert (dnsmasq.queries(NAME, "A"), dnsmasq.queries(NAME, "AAAA")) == (1, 1)


async def test_a_large_fleet_is_read_over_tcp(dnsmasq: LocalDnsmasq) -> None:
    addresses = [f"127.0.{i // 250}.{i % 250 + 1}" for i in range(300)]
    dnsmasq.write({NAME: addresses})
    dnsmasq.reload()
    await asyncio.sleep(0.2)
    host, port = dnsmasq.address
    udp = dns.query.udp(dns.message.make_query(NAME, "A"), host, port=port, timeout=2)
    assert udp.flags & dns.flags.TC  # too many records for one UDP answer: the resolver must retry over TCP
    found = await lookup_addresses(make_resolver(dnsmasq.address, 2.0), NAME)
    assert found == set(addresses)


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("missing.test", FailureKind.NXDOMAIN),
        ("text-only.test", FailureKind.NO_ADDRESS),
        ("vllm.example", FailureKind.SERVER_FAILURE),  # outside dnsmasq's local domain, no upstream: REFUSED
    ],
)
async def test_a_failed_lookup_is_classified(dnsmasq: LocalDnsmasq, name: str, kind: FailureKind) -> None:
    with pytest.raises(LookupFailed) as failure:
        await lookup_addresses(make_resolver(dnsmasq.address, 1.0), name)
    assert failure.value.kind == kind


async def test_a_stopped_server_is_a_timeout_within_the_timeout(dnsmasq: LocalDnsmasq) -> None:
    dnsmasq.stop()
    started = time.monotonic()
    with pytest.raises(LookupFailed) as failure:
        await lookup_addresses(make_resolver(dnsmasq.address, 0.3), NAME)
    assert failure.value.kind == FailureKind.TIMEOUT
    assert time.monotonic() - started < 0.3 + SLACK_S


def records(*addresses: str) -> Mapping[str, Sequence[str]]:
    return {NAME: addresses}


async def test_a_record_added_then_removed_is_reported_within_one_interval(dnsmasq: LocalDnsmasq) -> None:
    dnsmasq.write(records("127.0.0.2"))
    dnsmasq.reload()
    async with running(config_of(dnsmasq)) as (discovery, recorder):
        _, first = await recorder.next_change()
        assert urls(first.added) == {"http://127.0.0.2:8000"}

        dnsmasq.write(records("127.0.0.2", "127.0.0.4"))
        dnsmasq.reload()
        changed = time.monotonic()
        seen, added = await recorder.next_change()
        assert urls(added.added) == {"http://127.0.0.4:8000"}
        assert not added.removed
        assert seen - changed < INTERVAL_S + SLACK_S

        dnsmasq.write(records("127.0.0.4"))
        dnsmasq.reload()
        changed = time.monotonic()
        seen, removed = await recorder.next_change()
        assert urls(removed.removed) == {"http://127.0.0.2:8000"}
        assert not removed.added
        assert seen - changed < INTERVAL_S + SLACK_S
        assert urls(discovery.nodes) == {"http://127.0.0.4:8000"}
        assert recorder.failures == []


async def test_failing_lookups_keep_the_nodes_and_are_reported_once_per_kind(
    dnsmasq: LocalDnsmasq, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "tao.fleet")
    intervals = 4
    async with running(config_of(dnsmasq, timeout_s=0.2)) as (discovery, recorder):
        _, first = await recorder.next_change()
        found = first.added

        dnsmasq.write({})
        dnsmasq.reload()
        queries = dnsmasq.queries(NAME)
        await asyncio.sleep(intervals * INTERVAL_S)
        assert dnsmasq.queries(NAME) - queries >= intervals - 1  # the loop kept looking, and failing
        assert [failure.kind for failure in recorder.failures] == [FailureKind.NXDOMAIN]

        dnsmasq.stop()
        await asyncio.sleep(intervals * INTERVAL_S)
        assert [failure.kind for failure in recorder.failures] == [FailureKind.NXDOMAIN, FailureKind.TIMEOUT]
        assert discovery.nodes == found
        assert recorder.changes.empty()

        dnsmasq.write(records("127.0.0.2", "127.0.0.3", "::1"))
        dnsmasq.start()
        await asyncio.sleep(2 * INTERVAL_S)
        assert discovery.failing is None
        assert discovery.nodes == found
        assert recorder.changes.empty()  # the same nodes as before the outage: nothing to report

    warnings = [record.getMessage() for record in caplog.records if record.levelno == logging.WARNING]
    assert len(warnings) == 2
    assert "nxdomain" in warnings[0] and "keeping its 3 nodes" in warnings[0]
    assert "timeout" in warnings[1]
    assert sum("resolves again" in record.getMessage() for record in caplog.records) == 1


def test_ipv6_names_stay_within_the_node_name_limit() -> None:
    longest = ipaddress.ip_address("fd00:1111:2222:3333:4444:5555:6666:7777")
    assert len(node_name("p" * 60, str(longest))) == 100
