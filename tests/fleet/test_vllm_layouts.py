"""vLLM's KV-event field layouts, held here as data per version, against our decoder and the fake's encoder.

The layouts are those of `vllm/distributed/kv_events.py` (the CPU-tier payload: 0.33.0's
`distributed/kv_transfer/kv_connector/v1/offloading/events.py`): 0.23.0 (the last with `array_like=True` events: msgspec
then sends every field, so arrays have full length) and 0.33.0 (tagged maps, defaulted fields omitted when null).
A field list changing upstream means a new entry here, not an edit of an old one.
"""

import msgpack
import pytest

from tao_coordinator.fleet.kv_index import NodeKvIndex
from tao_coordinator.kv_wire import SPEC_FULL_ATTENTION, Removed, Stored, cpu_stored, decode_batch, encode_batch

LAYOUTS = {
    "0.23.0": {
        "BlockStored": [
            "block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium", "lora_name",
            "extra_keys", "group_idx", "kv_cache_spec_kind", "kv_cache_spec_sliding_window",
        ],
        "BlockRemoved": ["block_hashes", "medium", "group_idx"],
    },
    "0.33.0": {
        "BlockStored": [
            "block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium", "lora_name",
            "extra_keys", "group_idx", "kv_cache_spec_kind", "kv_cache_spec_sliding_window", "locality",
            "ownership", "session_id", "lookahead_token_ids",
        ],
        "BlockRemoved": ["block_hashes", "medium", "group_idx", "locality", "ownership"],
    },
}  # fmt: skip
H1, H2 = 7322446309363477352, 17027874615116373601


def stored_values(medium, session="s1"):
    return {
        "block_hashes": [H1, H2],
        "parent_block_hash": None,
        "token_ids": list(range(32)),
        "block_size": 16,
        "lora_id": None,
        "medium": medium,
        "lora_name": None,
        "extra_keys": [None, None],
        "group_idx": 0,
        "kv_cache_spec_kind": "full_attention",
        "kv_cache_spec_sliding_window": None,
        "locality": None,
        "ownership": None,
        "session_id": session,
        "lookahead_token_ids": None,
    }


def array_event(tag, values, version="0.23.0"):
    return [tag, *(values.get(name) for name in LAYOUTS[version][tag])]


def map_event(tag, values, version="0.33.0"):
    return {"type": tag, **{name: values.get(name) for name in LAYOUTS[version][tag]}}


def batch(*events):
    return msgpack.packb([1764444000.5, list(events), 0])


@pytest.mark.parametrize("medium", ["GPU", None])
def test_0_23_full_length_arrays_decode(medium):
    stored = array_event("BlockStored", stored_values(medium))
    removed = array_event("BlockRemoved", {"block_hashes": [H2], "medium": medium})
    assert (len(stored), len(removed)) == (12, 4)
    assert decode_batch(batch(stored, removed)) == [Stored((H1, H2), 16, None), Removed((H2,))]


@pytest.mark.parametrize("version", ["0.23.0", "0.33.0"])
@pytest.mark.parametrize("medium", ["CPU", "STORAGE"])
def test_offloaded_tiers_are_not_resident(version, medium):
    encode = array_event if version == "0.23.0" else map_event
    session = "s1" if version == "0.33.0" else None
    index = NodeKvIndex()
    gpu = decode_batch(batch(encode("BlockStored", stored_values("GPU", "s1"), version)))
    for event in gpu:
        index.apply(event)
    offloaded = decode_batch(
        batch(
            encode("BlockStored", stored_values(medium, "s2"), version),
            encode("BlockRemoved", {"block_hashes": [H1, H2], "medium": medium}, version),
        )
    )
    assert offloaded[0] == Stored((H1, H2), 16, "s2" if session else None, medium.upper())
    for event in offloaded:
        index.apply(event)
    # the CPU copies, stored (under the GPU owner s1) and removed again, leave the GPU blocks and their owner alone
    assert (index.tokens_of("s1"), index.tokens_of("s2")) == ((32, 0) if session else (0, 0))


def test_the_fake_sends_0_23_arrays_in_full_and_0_33_maps():
    stored = Stored(
        (H1, H2), 16, "s1", token_ids=list(range(32)), extra_keys=[None, None], spec_kind=SPEC_FULL_ATTENTION
    )
    removed = Removed((H2,))
    array = msgpack.unpackb(encode_batch(1.0, [stored, removed], "array"))[1]
    assert array == [
        array_event("BlockStored", stored_values("GPU")),
        array_event("BlockRemoved", {"block_hashes": [H2], "medium": "GPU", "group_idx": 0}),
    ]
    maps = msgpack.unpackb(encode_batch(1.0, [stored, removed], "map"))[1]
    values = stored_values("GPU")
    sent = [n for n in LAYOUTS["0.33.0"]["BlockStored"] if values[n] is not None or n in REQUIRED_0_33]
    assert [list(m) for m in maps] == [["type", *sent], ["type", "block_hashes", "medium", "group_idx"]]


# 0.33 fields without a default: always present in a map (omit_defaults only drops defaulted ones)
REQUIRED_0_33 = {"parent_block_hash", "lora_id", "lora_name"}


# vLLM 0.33.0's default CPU payload (`offloading/events.py:_placeholder_stored`, self_describing_kv_events off)
CPU_PLACEHOLDER_0_33 = {
    "block_hashes": [H2],
    "parent_block_hash": None,
    "token_ids": [],
    "block_size": 0,
    "lora_id": None,
    "medium": "CPU",
    "lora_name": None,
    "group_idx": 0,
}


def test_the_fakes_cpu_tier_events_follow_the_0_33_placeholder_and_decode_as_cpu():
    stored, removed = cpu_stored(H2), Removed((H2,), "CPU")
    maps = msgpack.unpackb(encode_batch(1.0, [stored, removed], "map"))[1]
    full = map_event("BlockStored", CPU_PLACEHOLDER_0_33)
    assert maps[0] == {k: v for k, v in full.items() if v is not None or k in REQUIRED_0_33}
    assert list(maps[0]) == ["type", *(n for n in LAYOUTS["0.33.0"]["BlockStored"] if n in maps[0])]
    assert maps[1] == {"type": "BlockRemoved", "block_hashes": [H2], "medium": "CPU", "group_idx": 0}
    array = msgpack.unpackb(encode_batch(1.0, [stored, removed], "array"))[1]
    assert array == [
        array_event("BlockStored", CPU_PLACEHOLDER_0_33),
        array_event("BlockRemoved", {"block_hashes": [H2], "medium": "CPU", "group_idx": 0}),
    ]
    for encoding in ("map", "array"):
        decoded = decode_batch(encode_batch(1.0, [stored, removed], encoding))
        assert decoded == [Stored((H2,), 0, None, "CPU"), Removed((H2,), "CPU")]


def test_a_cpu_chunk_belongs_to_the_session_owning_its_hash_in_hbm():
    gpu = Stored((H1, H2), 16, "s1", token_ids=list(range(32)), extra_keys=[None, None], spec_kind=SPEC_FULL_ATTENTION)
    index = NodeKvIndex()
    for event in decode_batch(encode_batch(1.0, [gpu, cpu_stored(H2)], "map")):
        index.apply(event)
    assert (index.tokens_of("s1", "GPU"), index.tokens_of("s1", "CPU")) == (32, 16)
    for event in decode_batch(encode_batch(2.0, [Removed((H1, H2))], "map")):
        index.apply(event)
    assert (index.tokens_of("s1", "GPU"), index.tokens_of("s1", "CPU")) == (0, 16)
