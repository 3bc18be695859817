"""Decoding both KV-event encodings (reference §3.4) and keeping per-session residency (§3.5, §3.7)."""

import msgpack
import pytest

from tao_coordinator.fleet.kv_index import NodeKvIndex
from tao_coordinator.fleet.kv_subscriber import rank_endpoint
from tao_coordinator.kv_wire import (
    SPEC_FULL_ATTENTION,
    Cleared,
    KvWireError,
    Removed,
    Stored,
    decode_batch,
    encode_batch,
    split_message,
)

H1, H2 = 7322446309363477352, 17027874615116373601


def array_batch():
    return msgpack.packb(
        [
            1764444000.123,
            [
                ["BlockStored", [H1, H2], None, list(range(1000, 1032)), 16, None, "GPU"],
                ["BlockRemoved", [H2], "GPU"],
                ["AllBlocksCleared"],
            ],
            0,
        ]
    )


def map_batch(session="s1"):
    stored = {
        "type": "BlockStored",
        "block_hashes": [H1, H2],
        "parent_block_hash": None,
        "token_ids": list(range(1000, 1032)),
        "block_size": 16,
        "lora_id": None,
        "medium": "GPU",
        "lora_name": None,
        "session_id": session,
    }
    return msgpack.packb([1764444000.5, [stored, {"type": "BlockRemoved", "block_hashes": [H2], "medium": "GPU"}]])


def test_both_encodings_decode_to_the_same_events():
    assert decode_batch(array_batch()) == [Stored((H1, H2), 16, None), Removed((H2,)), Cleared()]
    assert decode_batch(map_batch()) == [Stored((H1, H2), 16, "s1"), Removed((H2,))]


def test_byte_hashes_become_ints_and_unknown_events_are_skipped():
    raw = msgpack.packb([0.0, [{"type": "BlockRemoved", "block_hashes": [b"\x00" * 31 + b"\x05"]}, {"type": "New"}]])
    assert decode_batch(raw) == [Removed((5,))]


@pytest.mark.parametrize(
    "payload",
    [
        b"\xc1",
        msgpack.packb({"a": 1}),
        msgpack.packb([0.0, [42]]),
        msgpack.packb([0.0, [{"type": "BlockStored", "block_hashes": [1], "block_size": "sixteen"}]]),
        msgpack.packb([0.0, [{"type": "BlockStored", "block_hashes": [1], "block_size": -16}]]),
        msgpack.packb([0.0, [{"type": "BlockRemoved", "block_hashes": ["not a hash"]}]]),
    ],
)
def test_malformed_batches_are_named(payload):
    with pytest.raises(KvWireError):
        decode_batch(payload)


def test_message_framing():
    assert split_message([b"kv@n1", (5).to_bytes(8, "big"), b"x"]) == (b"kv@n1", 5, b"x")
    with pytest.raises(KvWireError):
        split_message([b"x", b"short", b"y"])


def test_index_counts_a_sessions_resident_blocks_with_refcounts():
    index = NodeKvIndex()
    index.apply(Stored((1, 2, 3), 16, "a"))
    index.apply(Stored((3, 4), 16, "b"))  # 3 is stored twice (computed concurrently): refcount 2, owner a
    assert (index.tokens_of("a"), index.tokens_of("b")) == (48, 16)
    assert index.take_changed() == {("a", "GPU"): 48, ("b", "GPU"): 16}
    index.apply(Removed((3,)))
    assert index.tokens_of("a") == 48  # one physical copy of 3 is left
    index.apply(Removed((3, 1)))
    assert index.tokens_of("a") == 16
    assert index.take_changed() == {("a", "GPU"): 16}
    index.apply(Removed((99,)))  # unknown hash: ignored
    index.apply(Cleared())
    assert index.take_changed() == {("a", "GPU"): 0, ("b", "GPU"): 0}


def test_index_keeps_no_key_for_a_session_whose_blocks_are_all_gone():
    index = NodeKvIndex()
    for k in range(1_000):
        index.apply(Stored((k,), 16, f"s-{k}"))
        index.apply(Removed((k,)))
    assert index.sessions() == 0
    assert index.take_changed() == {(f"s-{k}", "GPU"): 0 for k in range(1_000)}
    index.apply(Stored((1, 2), 16, "a"))
    index.apply(Removed((1,)))
    assert (index.sessions(), index.tokens_of("a"), index.tokens_of("gone")) == (1, 16, 0)


@pytest.mark.parametrize(("encoding", "session"), [("map", "s1"), ("array", None)])
def test_what_the_fake_vllm_publishes_decodes_in_both_encodings(encoding, session):
    # the array encoding is vLLM ≤ 0.23's, which had no session id: its blocks count for nobody
    stored = Stored(
        (H1, H2), 16, "s1", token_ids=list(range(32)), extra_keys=[None, None], spec_kind=SPEC_FULL_ATTENTION
    )
    payload = encode_batch(1.0, [stored, Removed((H2,)), Cleared()], encoding)
    assert decode_batch(payload) == [Stored((H1, H2), 16, session), Removed((H2,)), Cleared()]


def test_each_data_parallel_rank_is_its_own_cache():
    index = NodeKvIndex()
    index.apply(Stored((1, 2), 16, "a"), rank=0)
    index.apply(Stored((1, 2), 16, "a"), rank=1)  # the same prefix on another rank: two more physical blocks
    assert index.tokens_of("a") == 64
    index.apply(Removed((1,)), rank=1)
    assert index.tokens_of("a") == 48
    index.apply(Cleared(), rank=0)  # one rank's reset leaves the other's blocks
    assert index.tokens_of("a") == 16
    index.clear(1)
    assert (index.tokens_of("a"), index.sessions()) == (0, 0)


def test_a_cpu_copy_belongs_to_the_session_that_owns_its_hash_in_hbm_and_outlives_the_hbm_copy():
    index = NodeKvIndex()
    index.apply(Stored((1, 2, 3), 16, "a"))
    index.apply(Stored((2, 3), 0, None, "CPU"))  # 0.33's default offloading payload: no session, no block size
    index.apply(Stored((7,), 0, None, "CPU"))  # a hash HBM never announced: nobody's
    assert (index.tokens_of("a"), index.tokens_of("a", "CPU"), index.block_size) == (48, 32, 16)
    index.apply(Removed((1, 2, 3)))  # evicted from HBM: the CPU copies stay
    index.apply(Cleared())  # vLLM clears HBM only
    assert (index.tokens_of("a"), index.tokens_of("a", "CPU")) == (0, 32)
    index.apply(Removed((2,), "CPU"))
    index.apply(Stored((9,), 16, "b", "STORAGE"))  # a tier below the CPU one: not tracked
    assert (index.tokens_of("a", "CPU"), index.tokens_of("b"), index.tokens_of("b", "CPU")) == (16, 0, 0)
    assert index.take_changed() == {("a", "GPU"): 0, ("a", "CPU"): 16}


def test_rank_endpoints_follow_vllms_port_offset():
    assert rank_endpoint("tcp://10.0.0.7:5557", 0) == "tcp://10.0.0.7:5557"
    assert rank_endpoint("tcp://10.0.0.7:5557", 3) == "tcp://10.0.0.7:5560"
    with pytest.raises(ValueError):
        rank_endpoint("ipc:///tmp/kv", 1)
