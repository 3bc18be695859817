"""Block hashes against the vLLM reference's test vectors, and the hash ↔ block-id registry."""

from tao_coordinator.fakevllm.block_ids import BlockIdRegistry
from tao_coordinator.fakevllm.hashing import NONE_HASH, block_hashes, event_extra_keys, external

TOKENS = list(range(1000, 1032))


def test_none_hash_and_chained_hashes_match_the_reference_vectors():
    assert NONE_HASH.hex() == "066b1e8987e027138e98701c46128929378935f9b6cd1549105ae6b4f0d71198"
    assert [external(h) for h in block_hashes(TOKENS, 16, 2)] == [7322446309363477352, 17027874615116373601]
    salted = block_hashes(TOKENS, 16, 2, cache_salt="s1")
    assert [external(h) for h in salted] == [5273892730014746190, 15589599484288317392]


def test_only_full_blocks_are_hashed_and_prefixes_share_hashes():
    assert block_hashes(TOKENS[:31], 16, 31 // 16) == block_hashes(TOKENS, 16, 2)[:1]
    assert event_extra_keys("s1", 0, 3) == [("s1",), None, None]
    assert event_extra_keys("s1", 2, 2) == [None, None]


def test_registry_names_new_suffixes_with_one_run_and_forgets_unused_ids():
    registry = BlockIdRegistry()
    first = registry.acquire([b"a", b"b", b"c"])
    second = registry.acquire([b"a", b"b", b"x", b"y"])
    assert first == [0, 1, 2] and second == [0, 1, 3, 4]
    registry.stored(2, b"c")
    registry.release(first)
    assert registry.hash_of(2) == b"c"  # still cached
    assert registry.removed(2) == b"c"
    assert registry.acquire([b"a", b"b", b"c"]) == [0, 1, 5]  # an id that left the map is never reused
    registry.release(second)
    assert len(registry) == 3
