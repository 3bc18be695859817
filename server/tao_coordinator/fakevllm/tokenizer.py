"""The fake server's deterministic tokenizer: text → token pieces → token ids, with no vocabulary file.

A piece is, in order of preference: one of the chat template's special tokens (`<|im_start|>`, ...), an optional
single space followed by 1–4 letters or digits, an optional space followed by one other non-space character, or a
run of whitespace (a run that is followed by a word leaves its last space to that word, as GPT-style tokenizers do).
That gives about 3.5 characters per token on English and code, close to real BPE tokenizers.

A piece's id is fixed: the special tokens have Qwen3's ids (151643–151645), every other piece maps to
blake2b(piece) mod 151643. Collisions are harmless: ids only feed block hashes and `/tokenize`.

Invariants:
* deterministic across processes and platforms (no Python `hash()`);
* prefix-stable: if text A is a prefix of text B, the pieces of A equal the pieces of B except possibly A's last
  piece (ordinary matches look ahead at most one character) — or its last few pieces when A ends inside a special
  token — so identical text prefixes give identical token prefixes;
* `"".join(pieces(text)) == text`;
* every piece of `filler_pieces(n)` is one token, and tokenizing their concatenation gives them back.
"""

from __future__ import annotations

import hashlib
import re
from functools import lru_cache

VOCAB_SIZE = 151_936
ENDOFTEXT = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
SPECIAL_TOKENS: dict[str, int] = {ENDOFTEXT: 151_643, IM_START: 151_644, IM_END: 151_645}
EOS_TOKEN_ID = SPECIAL_TOKENS[IM_END]
_ORDINARY_IDS = 151_643

_PIECE = re.compile(
    r"<\|(?:endoftext|im_start|im_end)\|>"  # special tokens, always whole
    r"| ?[^\W_]{1,4}"  # a short word chunk, with its leading space
    r"| ?[^\w\s]| ?_"  # one punctuation mark or symbol, with its leading space
    r"|\s+(?!\S)|\s+"  # whitespace; a space right before a word stays with the word
)

_FILLER_TEXT = (
    "The fake node is busy with some long text and it will stop here soon. It runs on a CPU, not on a GPU, "
    "so all of this is made up to fill the turn with the same kind of load a real model puts on the node."
)


@lru_cache(maxsize=1 << 16)
def piece_id(piece: str) -> int:
    special = SPECIAL_TOKENS.get(piece)
    if special is not None:
        return special
    digest = hashlib.blake2b(piece.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "little") % _ORDINARY_IDS


def pieces(text: str) -> list[str]:
    return _PIECE.findall(text)


def encode(text: str) -> list[int]:
    return [piece_id(piece) for piece in _PIECE.findall(text)]


def count(text: str) -> int:
    return sum(1 for _ in _PIECE.finditer(text))


def _one_token(word: str) -> str:
    """A filler word cut to one token (4 letters at most; punctuation is dropped)."""
    return " " + "".join(ch for ch in word if ch.isalnum())[:4]


_FILLER_WORDS = tuple(_one_token(word) for word in _FILLER_TEXT.split(" "))


def filler_pieces(n: int) -> list[str]:
    """`n` one-token pieces of plain English, the first without a leading space."""
    cycles, rest = divmod(n, len(_FILLER_WORDS))
    out = list(_FILLER_WORDS) * cycles + list(_FILLER_WORDS[:rest])
    return [out[0].lstrip(), *out[1:]] if out else []
