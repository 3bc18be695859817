"""Decoding vLLM KV-event batches (vLLM reference §3.2–3.4) into plain values.

A ZMQ message is `[topic, seq (8 bytes big-endian), msgpack payload]`; the payload is the batch
`[ts, events, dp_rank?]`. Events are tagged arrays up to vLLM 0.23 (`["BlockStored", hashes, parent, tokens,
block_size, lora_id, medium, …]`, always full length on a real node — 12 elements for `BlockStored`, 4 for
`BlockRemoved` — but shorter arrays are accepted) and tagged maps from 0.24 (`{"type": "BlockStored", …}`); both are
accepted, extra fields ignored. Hashes may be ints (the default) or 32-byte strings; both become Python ints.

`medium` says which tier an event is about (`"GPU"`, `"CPU"`, `"STORAGE"`; vllm/distributed/kv_events.py): with an
offloading connector the CPU and storage tiers publish on the same stream, so `Stored`/`Removed` carry it,
upper-cased, `"GPU"` for a missing or null one (older versions; 0.33's own GPU events never leave it null). A CPU
`BlockStored` of 0.33's default offloading payload names one hash per chunk (its last GPU block's), with no session,
parent, tokens or block size (`block_size` 0, read here as "unknown").
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
    """0 when the event does not say (CPU-tier events of 0.33's default offloading payload)."""
    session_id: str | None
    medium: str = "GPU"

    @property
    def gpu(self) -> bool:
        return self.medium == MEDIUM_GPU


@dataclass(frozen=True, slots=True)
class Removed:
    hashes: tuple[int, ...]
    medium: str = "GPU"

    @property
    def gpu(self) -> bool:
        return self.medium == MEDIUM_GPU


@dataclass(frozen=True, slots=True)
class Cleared:
    pass


KvEvent = Stored | Removed | Cleared

# field positions of the array encoding (≤ 0.23, tag at 0); session_id never existed there
_STORED_BLOCK_SIZE = 4
_STORED_MEDIUM = 6
_REMOVED_MEDIUM = 2
MEDIUM_GPU = "GPU"


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
