"""An assistant reply and its token-by-token layout: what the node generates, and what is streamed after n tokens.

The reply's text is the assistant body exactly as the chat template renders it in the next turn (content, then one
`<tool_call>` block per call), tokenized, followed by the end-of-turn token `<|im_end|>` — which vLLM counts as a
completion token and which the next turn's prompt also contains. So a follow-up request that echoes the reply hits
the blocks the reply filled.

When the reply does not fit in `max_tokens`, the node generates the first `max_tokens` tokens and stops with
`length`; as with a real tool-call parser that sees truncated output, what was generated is then plain content.

Streaming maps token counts to characters of the rendered body: content is streamed piece by piece; a tool call
starts when the first token of its block is generated and its JSON arguments are released in proportion to the
block's generated characters, completely when the block is. Invariants: progress is monotone in the token count, and
at the full count everything has been released.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import accumulate
from typing import Literal

from .template import render_assistant_body, tool_call_block
from .tokenizer import EOS_TOKEN_ID, piece_id, pieces

ReplyFinish = Literal["stop", "length", "tool_calls"]


@dataclass(frozen=True, slots=True)
class ScriptedToolCall:
    id: str
    name: str
    arguments: str
    """JSON text of the arguments object."""


@dataclass(frozen=True, slots=True)
class Reply:
    content: str = ""
    tool_calls: tuple[ScriptedToolCall, ...] = ()


@dataclass(frozen=True, slots=True)
class ReplyProgress:
    content_chars: int
    tool_arg_chars: tuple[int | None, ...]
    """Per tool call: None before it starts, else how many characters of its arguments are out."""


class ReplyLayout:
    def __init__(self, reply: Reply, max_tokens: int) -> None:
        calls = [(call.name, call.arguments) for call in reply.tool_calls]
        body = pieces(render_assistant_body(reply.content, calls))
        self.finish_reason: ReplyFinish
        if len(body) + 1 > max_tokens:
            body = body[:max_tokens]
            reply = Reply(content="".join(body))
            self.finish_reason = "length"
            self.token_ids = [piece_id(piece) for piece in body]
        else:
            self.finish_reason = "tool_calls" if reply.tool_calls else "stop"
            self.token_ids = [*(piece_id(piece) for piece in body), EOS_TOKEN_ID]
        self.reply = reply
        self._ends = list(accumulate(len(piece) for piece in body))
        self._regions = _tool_regions(reply)

    @property
    def output_tokens(self) -> int:
        return len(self.token_ids)

    def progress(self, tokens: int) -> ReplyProgress:
        """What is out after `tokens` generated tokens."""
        chars = self._chars(tokens)
        args: list[int | None] = []
        for (start, end), call in zip(self._regions, self.reply.tool_calls, strict=True):
            if chars <= start:
                args.append(None)
            elif chars >= end:
                args.append(len(call.arguments))
            else:
                args.append(len(call.arguments) * (chars - start) // (end - start))
        return ReplyProgress(min(chars, len(self.reply.content)), tuple(args))

    def content_deltas(self, before: int, now: int) -> list[str]:
        """The content each token before+1 … now adds, one string per token ("" when it adds none)."""
        content = self.reply.content
        previous = min(self._chars(before), len(content))
        deltas = []
        for tokens in range(before + 1, now + 1):
            current = min(self._chars(tokens), len(content))
            deltas.append(content[previous:current])
            previous = current
        return deltas

    def _chars(self, tokens: int) -> int:
        """Characters of the rendered body out after `tokens` tokens."""
        shown = min(tokens, len(self._ends))
        return self._ends[shown - 1] if shown else 0


def _tool_regions(reply: Reply) -> list[tuple[int, int]]:
    regions = []
    offset = len(reply.content) + (1 if reply.content and reply.tool_calls else 0)
    for call in reply.tool_calls:
        length = len(tool_call_block(call.name, call.arguments))
        regions.append((offset, offset + length))
        offset += length + 1
    return regions
