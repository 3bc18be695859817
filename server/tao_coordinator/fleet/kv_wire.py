"""Decoding vLLM KV-event batches (vLLM reference §3.2–3.4) into plain values.

A ZMQ message is `[topic, seq (8 bytes big-endian), msgpack payload]`; the payload is the batch
`[ts, events, dp_rank?]`. Events are tagged arrays up to vLLM 0.23 (`["BlockStored", hashes, parent, tokens,
block_size, lora_id, medium, …]`) and tagged maps from 0.24 (`{"type": "BlockStored", …}`); both are accepted, extra
fields ignored. Hashes may be ints (the default) or 32-byte strings; both become Python ints.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgpack


class KvWireError(ValueError):
    """A message that is not a vLLM KV-event batch."""


@dataclass(frozen=True, slots=True)
class Stored:
    hashes: tuple[int, ...]
    block_size: int
    session_id: str | None


@dataclass(frozen=True, slots=True)
class Removed:
    hashes: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Cleared:
    pass


KvEvent = Stored | Removed | Cleared

# field positions of the array encoding (≤ 0.23); session_id never existed there
_STORED_BLOCK_SIZE = 4


def split_message(frames: Sequence[bytes]) -> tuple[bytes, int, bytes]:
    if len(frames) != 3 or len(frames[1]) != 8:
        raise KvWireError(f"expected [topic, seq8, payload], got {len(frames)} frames")
    return frames[0], int.from_bytes(frames[1], "big", signed=True), frames[2]


def decode_batch(payload: bytes) -> list[KvEvent]:
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


def _event(raw: Any) -> KvEvent | None:
    if isinstance(raw, dict):
        tag = raw.get("type")
        fields = raw
    elif isinstance(raw, list) and raw and isinstance(raw[0], str):
        tag = raw[0]
        fields = {"block_hashes": raw[1] if len(raw) > 1 else []}
        if tag == "BlockStored" and len(raw) > _STORED_BLOCK_SIZE:
            fields["block_size"] = raw[_STORED_BLOCK_SIZE]
    else:
        raise KvWireError(f"event is neither a tagged array nor a tagged map: {type(raw).__name__}")
    if tag == "BlockStored":
        session = fields.get("session_id")
        session = session if isinstance(session, str) and session else None
        block_size = int(fields.get("block_size") or 16)
        if block_size < 1:
            raise KvWireError(f"block_size must be positive, got {block_size}")
        return Stored(_hashes(fields.get("block_hashes")), block_size, session)
    if tag == "BlockRemoved":
        return Removed(_hashes(fields.get("block_hashes")))
    if tag == "AllBlocksCleared":
        return Cleared()
    return None


def _hashes(raw: Any) -> tuple[int, ...]:
    if not isinstance(raw, list):
        raise KvWireError("block_hashes is not a list")
    return tuple(h if isinstance(h, int) else int.from_bytes(h, "big") for h in raw)
