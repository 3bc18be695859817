"""The deterministic tokenizer, the chat template and reply layouts: the properties prefix caching relies on."""

import json

import pytest

from tao_coordinator.fakevllm import tokenizer
from tao_coordinator.fakevllm.errors import BadRequest
from tao_coordinator.fakevllm.reply import Reply, ReplyLayout, ScriptedToolCall
from tao_coordinator.fakevllm.template import GENERATION_PROMPT, render_assistant_body, render_chat

TEXTS = [
    "Hello, world!  How are you?\n\n  def f(x_1):\n\treturn x_1 ** 2  # done",
    "<|im_start|>user\nünïcödé ☃ text — with dashes<|im_end|>\n",
    "    indented    spaces   and trailing   ",
]


def _inside_special_token(text):
    return any(text.endswith(special[:k]) for special in tokenizer.SPECIAL_TOKENS for k in range(1, len(special)))


@pytest.mark.parametrize("text", TEXTS)
def test_pieces_cover_the_text_and_are_prefix_stable(text):
    pieces = tokenizer.pieces(text)
    assert "".join(pieces) == text
    for cut in range(len(text) + 1):
        if _inside_special_token(text[:cut]):
            continue
        prefix = tokenizer.pieces(text[:cut])
        assert prefix[:-1] == pieces[: max(len(prefix) - 1, 0)]


def test_ids_are_deterministic_and_special_tokens_are_single():
    assert tokenizer.encode("<|im_start|>user") == [151644, tokenizer.piece_id("user")]
    assert tokenizer.encode("abc def") == tokenizer.encode("abc def")
    assert all(0 <= i < tokenizer.VOCAB_SIZE for i in tokenizer.encode(TEXTS[0]))
    assert tokenizer.count(TEXTS[0]) == len(tokenizer.encode(TEXTS[0]))


def test_filler_pieces_are_one_token_each():
    pieces = tokenizer.filler_pieces(300)
    assert len(pieces) == 300
    assert tokenizer.pieces("".join(pieces)) == pieces
    assert tokenizer.pieces(GENERATION_PROMPT + "".join(pieces))[-300:] == pieces


def _conversation():
    tools = [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}]
    call = {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"command":  "ls"}'}}
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "list "}, {"type": "text", "text": "files"}]},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "a.txt"},
        {"role": "assistant", "content": "One file."},
    ]
    return messages, tools


def test_template_is_append_only_across_turns():
    messages, tools = _conversation()
    for turn in range(1, len(messages)):
        before = render_chat(messages[:turn], tools)
        after = render_chat(messages[: turn + 1], tools)
        assert before.endswith(GENERATION_PROMPT)
        if messages[turn]["role"] == "assistant":
            assert after.startswith(before)
        else:
            assert after.startswith(before[: -len(GENERATION_PROMPT)])


def test_template_renders_tools_and_reserialises_arguments():
    messages, tools = _conversation()
    text = render_chat(messages, tools)
    assert text.startswith("<|im_start|>system\nBe brief.\n\n# Tools")
    assert json.dumps(tools[0]) in text
    assert '<tool_call>\n{"name": "bash", "arguments": {"command": "ls"}}\n</tool_call><|im_end|>' in text
    assert "<tool_response>\na.txt\n</tool_response>" in text
    assert "user\nlist files<|im_end|>" in text


def test_template_rejects_unknown_roles_by_index():
    with pytest.raises(BadRequest, match=r"messages\[1\]\.role"):
        render_chat([{"role": "user", "content": "x"}, {"role": "robot", "content": "y"}], None)


def test_reply_tokens_continue_the_prompt_exactly():
    """prompt + reply + <|im_end|> tokenizes like the next turn's prompt prefix: the answer's blocks get hit."""
    messages, tools = _conversation()
    prompt = render_chat(messages[:2], tools)
    call = ScriptedToolCall("id", "bash", json.dumps({"command": "ls"}))
    layout = ReplyLayout(Reply(content="Let me look.", tool_calls=(call,)), max_tokens=1000)
    echoed = {
        "role": "assistant",
        "content": "Let me look.",
        "tool_calls": [{"id": "id", "type": "function", "function": {"name": "bash", "arguments": call.arguments}}],
    }
    next_prompt = render_chat([*messages[:2], echoed], tools)
    sequence = tokenizer.encode(prompt) + layout.token_ids
    assert tokenizer.encode(next_prompt)[: len(sequence)] == sequence
    assert layout.token_ids[-1] == tokenizer.EOS_TOKEN_ID
    assert layout.finish_reason == "tool_calls"


def test_reply_progress_releases_content_then_arguments():
    call = ScriptedToolCall("id", "bash", json.dumps({"command": "echo " + "x" * 40}))
    layout = ReplyLayout(Reply(content="Sure.", tool_calls=(call,)), max_tokens=1000)
    seen = [layout.progress(n) for n in range(layout.output_tokens + 1)]
    assert seen[0].content_chars == 0 and seen[0].tool_arg_chars == (None,)
    assert seen[-1].content_chars == len("Sure.") and seen[-1].tool_arg_chars == (len(call.arguments),)
    args = [p.tool_arg_chars[0] or 0 for p in seen]
    assert args == sorted(args) and len(set(args)) > 3


def test_reply_truncated_by_max_tokens_becomes_content():
    call = ScriptedToolCall("id", "bash", json.dumps({"command": "ls -la /tmp"}))
    layout = ReplyLayout(Reply(tool_calls=(call,)), max_tokens=5)
    assert layout.finish_reason == "length"
    assert layout.output_tokens == 5
    assert layout.reply.tool_calls == ()
    assert render_assistant_body("", [("bash", call.arguments)]).startswith(layout.reply.content)
