"""vLLM's KV-cache events on the wire: the event types, the media, both msgpack encodings, encoding and decoding.

The fake vLLM server (`fakevllm/kv_events.py`) encodes what the coordinator (`fleet/kv_subscriber.py`) decodes, so
the format lives here once. Layouts are vLLM 0.33's (`vllm/distributed/kv_events.py`).

Framing: a ZMQ message is `[topic, seq (8 bytes big-endian), msgpack payload]`; the payload is the positional batch
`[ts, events, data_parallel_rank]`. Each event is a tagged struct with 0.33's fields, in 0.33's order (`_LAYOUTS`):
* `map` (vLLM ≥ 0.24, the default): `{"type": "BlockStored", ...}`; fields without a default are always present
  (null included), defaulted fields only when not null (msgspec `omit_defaults`);
* `array` (vLLM ≤ 0.23): `["BlockStored", ...]` positionally with exactly 0.23's fields, always full length — 12
  elements for `BlockStored` (tag + 11 fields), 4 for `BlockRemoved` — trailing nulls included, because msgspec
  ignores `omit_defaults` on `array_like` structs (checked by encoding 0.23.0's structs). Fields newer than 0.23
  (`locality`, `ownership`, `session_id`, ...) did not exist there and are not sent.
The encoder writes exactly that (with msgspec, as vLLM does, so the bytes are vLLM's). The decoder accepts both
encodings, shorter arrays and extra fields; hashes may be ints (the default) or 32-byte strings, both become ints.

`medium` says which tier an event is about (`"GPU"`, `"CPU"`, `"STORAGE"`): with an offloading connector the CPU and
storage tiers publish on the same stream. The decoder upper-cases it and reads a missing or null one as `"GPU"`
(older versions; 0.33's own GPU events never leave it null).

Constant field values the encoder sends are those of a plain dense model: `lora_id`/`lora_name` null,
`group_idx=0`. A GPU event has `medium="GPU"` and `kv_cache_spec_kind="full_attention"`. A CPU-tier event is vLLM
0.33's default offloading payload (`self_describing_kv_events` off, `offloading/events.py:_placeholder_stored`,
`cpu_stored`): one `BlockStored` per chunk naming the hash of the chunk's last GPU block, parent null, no tokens,
`block_size` 0 (read back as "unknown"), no extra keys, no spec kind, no session, `medium="CPU"`; `BlockRemoved`
carries `medium="CPU"`.

A decoded `Stored` carries what a consumer of the stream reads — hashes, block size, session and medium; its
payload fields (`parent_hash`, `token_ids`, `extra_keys`, `spec_kind`) are only written, and decode as their
defaults.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

import msgpack
import msgspec

Encoding = Literal["map", "array"]
ENCODINGS: tuple[Encoding, ...] = ("map", "array")
MEDIUM_GPU = "GPU"
MEDIUM_CPU = "CPU"
SPEC_FULL_ATTENTION = "full_attention"
_encoder = msgspec.msgpack.Encoder()


class KvWireError(ValueError):
    """A message that is not a vLLM KV-event batch."""


@dataclass(frozen=True, slots=True)
class Stored:
    """`BlockStored`: blocks that became cached, one contiguous run of a request's block table."""

    hashes: tuple[int, ...]
    block_size: int
    """0 when the event does not say (CPU-tier events of 0.33's default offloading payload)."""
    session_id: str | None
    medium: str = MEDIUM_GPU
    parent_hash: int | None = None
    token_ids: Sequence[int] = ()
    extra_keys: list[tuple[str, ...] | None] | None = None
    spec_kind: str | None = None


@dataclass(frozen=True, slots=True)
class Removed:
    """`BlockRemoved`: cached blocks evicted."""

    hashes: tuple[int, ...]
    medium: str = MEDIUM_GPU


@dataclass(frozen=True, slots=True)
class Cleared:
    """`AllBlocksCleared`: the prefix cache was reset."""


KvWireEvent = Stored | Removed | Cleared


def cpu_stored(block_hash: int) -> Stored:
    """vLLM 0.33's placeholder `BlockStored` for one chunk stored in the CPU tier."""
    return Stored((block_hash,), 0, None, MEDIUM_CPU)


class _Layout(NamedTuple):
    fields: tuple[str, ...]
    """vLLM 0.33's fields, in its order."""
    required: int
    """How many leading fields have no default (always sent in a map)."""
    in_0_23: int
    """How many leading fields existed in vLLM 0.23, the last array-encoded version (the array's length − 1)."""


_LAYOUTS = {
    "BlockStored": _Layout(
        (
            "block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium", "lora_name",
            "extra_keys", "group_idx", "kv_cache_spec_kind", "kv_cache_spec_sliding_window", "locality",
            "ownership", "session_id", "lookahead_token_ids",
        ),
        required=7,
        in_0_23=11,
    ),
    "BlockRemoved": _Layout(("block_hashes", "medium", "group_idx", "locality", "ownership"), required=2, in_0_23=3),
    "AllBlocksCleared": _Layout((), required=0, in_0_23=0),
}  # fmt: skip
# positions in the array encoding (tag at 0); session_id never existed there
_STORED_BLOCK_SIZE = _LAYOUTS["BlockStored"].fields.index("block_size") + 1
_STORED_MEDIUM = _LAYOUTS["BlockStored"].fields.index("medium") + 1
_REMOVED_MEDIUM = _LAYOUTS["BlockRemoved"].fields.index("medium") + 1


def _tag_and_values(event: KvWireEvent) -> tuple[str, dict[str, Any]]:
    """The event's tag and its non-null field values (`lora_id`, `lora_name` and the rest are null)."""
    if isinstance(event, Stored):
        return "BlockStored", {
            "block_hashes": event.hashes,
            "parent_block_hash": event.parent_hash,
            "token_ids": event.token_ids,
            "block_size": event.block_size,
            "medium": event.medium,
            "extra_keys": event.extra_keys,
            "group_idx": 0,
            "kv_cache_spec_kind": event.spec_kind,
            "session_id": event.session_id,
        }
    if isinstance(event, Removed):
        return "BlockRemoved", {"block_hashes": event.hashes, "medium": event.medium, "group_idx": 0}
    return "AllBlocksCleared", {}


def event_body(event: KvWireEvent, encoding: Encoding) -> Any:
    tag, values = _tag_and_values(event)
    layout = _LAYOUTS[tag]
    if encoding == "array":
        return [tag, *(values.get(name) for name in layout.fields[: layout.in_0_23])]
    body: dict[str, Any] = {"type": tag}
    for i, name in enumerate(layout.fields):
        value = values.get(name)
        if i < layout.required or value is not None:
            body[name] = value
    return body


def encode_batch(ts: float, events: Sequence[KvWireEvent], encoding: Encoding, data_parallel_rank: int = 0) -> bytes:
    if encoding not in ENCODINGS:
        raise ValueError(f"KV-event encoding: expected one of {ENCODINGS}, got {encoding!r}")
    return _encoder.encode([ts, [event_body(event, encoding) for event in events], data_parallel_rank])


def split_message(frames: Sequence[bytes]) -> tuple[bytes, int, bytes]:
    if len(frames) != 3 or len(frames[1]) != 8:
        raise KvWireError(f"expected [topic, seq8, payload], got {len(frames)} frames")
    return frames[0], int.from_bytes(frames[1], "big", signed=True), frames[2]


def decode_batch(payload: bytes) -> list[KvWireEvent]:
    try:
        batch = msgpack.unpackb(payload, raw=False, strict_map_key=False)
    except (ValueError, msgpack.ExtraData) as error:
        raise KvWireError(f"payload is not msgpack: {error}") from error
    if not isinstance(batch, list) or len(batch) < 2 or not isinstance(batch[1], list):
        raise KvWireError("payload is not a [ts, events, …] batch")
    try:
        events = [_event(raw) for raw in batch[1]]
    except (TypeError, ValueError, OverflowError) as error:  # a field of the wrong type, e.g. a text block_size
        raise KvWireError(f"malformed event field: {error}") from error
    return [event for event in events if event is not None]


def _event(raw: Any) -> KvWireEvent | None:
    if isinstance(raw, dict):
        tag = raw.get("type")
        fields = raw
    elif isinstance(raw, list) and raw and isinstance(raw[0], str):
        tag = raw[0]
        fields = {"block_hashes": raw[1] if len(raw) > 1 else []}
        if tag == "BlockStored" and len(raw) > _STORED_BLOCK_SIZE:
            fields["block_size"] = raw[_STORED_BLOCK_SIZE]
        medium_at = _STORED_MEDIUM if tag == "BlockStored" else _REMOVED_MEDIUM
        if len(raw) > medium_at:
            fields["medium"] = raw[medium_at]
    else:
        raise KvWireError(f"event is neither a tagged array nor a tagged map: {type(raw).__name__}")
    if tag == "BlockStored":
        session = fields.get("session_id")
        session = session if isinstance(session, str) and session else None
        raw_size = fields.get("block_size")
        block_size = 16 if raw_size is None else int(raw_size)
        if block_size < 0:
            raise KvWireError(f"block_size must not be negative, got {block_size}")
        return Stored(_hashes(fields.get("block_hashes")), block_size, session, _medium(fields.get("medium")))
    if tag == "BlockRemoved":
        return Removed(_hashes(fields.get("block_hashes")), _medium(fields.get("medium")))
    if tag == "AllBlocksCleared":
        return Cleared()
    return None


def _hashes(raw: Any) -> tuple[int, ...]:
    if not isinstance(raw, list):
        raise KvWireError("block_hashes is not a list")
    return tuple(h if isinstance(h, int) else int.from_bytes(h, "big") for h in raw)


def _medium(medium: Any) -> str:
    if medium is None:
        return MEDIUM_GPU
    if not isinstance(medium, str):
        raise KvWireError(f"medium is not a string: {medium!r}")
    return medium.upper()
