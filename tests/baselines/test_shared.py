"""The bookkeeping several routers share: KV-event indexes per node and key, and one open call per session."""

from dataclasses import dataclass

from tao_coordinator.baselines.dynamo import storage_tier
from tao_coordinator.baselines.kv_index import KvIndex
from tao_coordinator.baselines.load import OpenCalls
from tao_coordinator.core.events import KvCacheEvent


def test_an_index_per_node_and_key_and_clears_only_where_asked():
    tiers = KvIndex(storage_tier)
    tiers.observe(KvCacheEvent("a", stored=((0, 10),)))
    tiers.observe(KvCacheEvent("a", stored=((0, 10),), medium="CPU_PINNED"))
    tiers.observe(KvCacheEvent("a", cleared=True))  # the device's index only
    assert (tiers.prefix("a", "device", ((0, 10),)), tiers.prefix("a", "host_pinned", ((0, 10),))) == (0, 10)
    assert list(tiers.on("a")) == ["device", "host_pinned"] and tiers.on("b") == {}
    assert tiers.get("b", "device") is None and tiers.prefix("b", "device", ((0, 10),)) == 0
    ignoring = KvIndex(str.lower, clears=False)
    ignoring.observe(KvCacheEvent("a", stored=((0, 10),), medium="GPU"))
    ignoring.observe(KvCacheEvent("a", cleared=True, medium="GPU"))
    assert ignoring.prefix("a", "gpu", ((0, 10),)) == 10


@dataclass
class _Call:
    node: str
    tokens: int


def test_one_open_call_per_session_listed_in_booking_order():
    calls: OpenCalls[_Call] = OpenCalls()
    calls.book("s", _Call("a", 1))
    calls.book("t", _Call("a", 2))
    calls.book("s", _Call("a", 3))  # the session's next call replaces its last, in its place
    assert [c.tokens for c in calls.on("a")] == [3, 2] and len(calls) == 2
    assert calls.at("t", "b") is None and calls.at("t", "a") == _Call("a", 2)
    assert calls.end("t") == _Call("a", 2) and calls.end("t") is None
    assert calls.on("a") == [_Call("a", 3)]
