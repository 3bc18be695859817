"""vLLM's prefix-cache block hashes (§3.6 of the vLLM reference), as vLLM ≥ 0.30 computes them by default.

    NONE_HASH = sha256(pickle("vllm-none-hash"))
    H_i = sha256(pickle((H_{i-1}, tuple(tokens[16i:16i+16]), extra_keys_i)))     full blocks only
    published hash = low 64 bits of H_i, as an unsigned int

`extra_keys_i` is None except for block 0 of a salted request, which carries `(("cache_salt", salt),)` (the tagged
form of vLLM ≥ 0.31). KV events carry the untagged form `(salt,)`. Pure functions; the reference's test vectors are
checked in the tests.
"""

from __future__ import annotations

import hashlib
import pickle
from collections.abc import Sequence
from typing import Any

NONE_HASH_SEED = "vllm-none-hash"
_MASK64 = (1 << 64) - 1


def sha256_pickle(value: Any) -> bytes:
    return hashlib.sha256(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)).digest()


NONE_HASH = sha256_pickle(NONE_HASH_SEED)


def salt_extra_keys(cache_salt: str | None) -> tuple[tuple[str, str], ...] | None:
    """The extra keys of block 0 for a request with this salt (None without a salt)."""
    return None if cache_salt is None else (("cache_salt", cache_salt),)


def event_extra_keys(cache_salt: str | None, first_block_index: int, count: int) -> list[tuple[str, ...] | None]:
    """The `extra_keys` list of a BlockStored covering blocks first…first+count−1 (untagged, one entry per block)."""
    keys: list[tuple[str, ...] | None] = [None] * count
    if cache_salt is not None and first_block_index == 0 and count:
        keys[0] = (cache_salt,)
    return keys


def block_hashes(tokens: Sequence[int], block_size: int, blocks: int, cache_salt: str | None = None) -> list[bytes]:
    """The chained hashes of the first `blocks` full blocks of `tokens`."""
    hashes: list[bytes] = []
    parent = NONE_HASH
    first_keys = salt_extra_keys(cache_salt)
    for index in range(blocks):
        start = index * block_size
        parent = sha256_pickle((parent, tuple(tokens[start : start + block_size]), first_keys if index == 0 else None))
        hashes.append(parent)
    return hashes


def external(block_hash: bytes) -> int:
    """The hash as KV events publish it (VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=1, the default)."""
    return int.from_bytes(block_hash, "big") & _MASK64
