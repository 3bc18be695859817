"""KV-cache events in vLLM's msgpack wire format (§3.3–3.4 of the vLLM reference), in both encodings.

A batch is always the positional array `[ts, events, data_parallel_rank]`. Each event is a tagged struct with vLLM
0.33's fields, in 0.33's order:
* `map` (vLLM ≥ 0.24, the default): `{"type": "BlockStored", ...}`; fields without a default are always present
  (null included), defaulted fields only when not null (msgspec `omit_defaults`);
* `array` (vLLM ≤ 0.23): `["BlockStored", ...]` positionally with exactly 0.23's fields, always full length — 12
  elements for `BlockStored` (tag + 11 fields), 4 for `BlockRemoved` — trailing nulls included, because msgspec
  ignores `omit_defaults` on `array_like` structs (checked by encoding 0.23.0's structs). Fields newer than 0.23
  (`locality`, `ownership`, `session_id`, ...) did not exist there and are not sent.

Constant field values are those of a plain dense model: `lora_id`/`lora_name` null, `group_idx=0`. A GPU event has
`medium="GPU"` and `kv_cache_spec_kind="full_attention"`. A CPU-tier event is vLLM 0.33's default offloading payload
(`self_describing_kv_events` off, `offloading/events.py:_placeholder_stored`): one `BlockStored` per chunk naming
the hash of the chunk's last GPU block, parent null, no tokens, `block_size` 0, no extra keys, no spec kind, no
session, `medium="CPU"`; `BlockRemoved` carries `medium="CPU"`. Hashes are unsigned 64-bit ints.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import msgspec

Encoding = Literal["map", "array"]
ENCODINGS: tuple[Encoding, ...] = ("map", "array")
MEDIUM_GPU = "GPU"
MEDIUM_CPU = "CPU"
_encoder = msgspec.msgpack.Encoder()


@dataclass(frozen=True, slots=True)
class StoredEvent:
    block_hashes: list[int]
    parent_block_hash: int | None
    token_ids: list[int]
    block_size: int
    extra_keys: list[tuple[str, ...] | None] | None
    session_id: str | None
    medium: str = MEDIUM_GPU
    kv_cache_spec_kind: str | None = "full_attention"


def cpu_stored(block_hash: int) -> StoredEvent:
    """vLLM 0.33's placeholder `BlockStored` for one chunk stored in the CPU tier."""
    return StoredEvent([block_hash], None, [], 0, None, None, MEDIUM_CPU, None)


@dataclass(frozen=True, slots=True)
class RemovedEvent:
    block_hashes: list[int]
    medium: str = MEDIUM_GPU


@dataclass(frozen=True, slots=True)
class ClearedEvent:
    pass


WireEvent = StoredEvent | RemovedEvent | ClearedEvent
_Fields = list[tuple[str, Any, bool]]  # (name, value, has_default)
# how many leading fields of each struct existed in vLLM 0.23 (the last array-encoded version)
_FIELDS_IN_0_23 = {"BlockStored": 11, "BlockRemoved": 3, "AllBlocksCleared": 0}


def _stored_fields(event: StoredEvent) -> _Fields:
    return [
        ("block_hashes", event.block_hashes, False),
        ("parent_block_hash", event.parent_block_hash, False),
        ("token_ids", event.token_ids, False),
        ("block_size", event.block_size, False),
        ("lora_id", None, False),
        ("medium", event.medium, False),
        ("lora_name", None, False),
        ("extra_keys", event.extra_keys, True),
        ("group_idx", 0, True),
        ("kv_cache_spec_kind", event.kv_cache_spec_kind, True),
        ("kv_cache_spec_sliding_window", None, True),
        ("locality", None, True),
        ("ownership", None, True),
        ("session_id", event.session_id, True),
        ("lookahead_token_ids", None, True),
    ]


def _removed_fields(event: RemovedEvent) -> _Fields:
    return [
        ("block_hashes", event.block_hashes, False),
        ("medium", event.medium, False),
        ("group_idx", 0, True),
        ("locality", None, True),
        ("ownership", None, True),
    ]


def _tagged(tag: str, fields: _Fields, encoding: Encoding) -> Any:
    if encoding == "map":
        body: dict[str, Any] = {"type": tag}
        body.update((name, value) for name, value, defaulted in fields if not (defaulted and value is None))
        return body
    return [tag, *(value for _, value, _ in fields[: _FIELDS_IN_0_23[tag]])]


def event_body(event: WireEvent, encoding: Encoding) -> Any:
    if isinstance(event, StoredEvent):
        return _tagged("BlockStored", _stored_fields(event), encoding)
    if isinstance(event, RemovedEvent):
        return _tagged("BlockRemoved", _removed_fields(event), encoding)
    return _tagged("AllBlocksCleared", [], encoding)


def encode_batch(ts: float, events: Sequence[WireEvent], encoding: Encoding, data_parallel_rank: int = 0) -> bytes:
    if encoding not in ENCODINGS:
        raise ValueError(f"KV-event encoding: expected one of {ENCODINGS}, got {encoding!r}")
    return _encoder.encode([ts, [event_body(event, encoding) for event in events], data_parallel_rank])
