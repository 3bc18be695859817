"""The Anthropic Messages routes with the real `anthropic` client: cache reads, the event stream, count_tokens."""

MODEL = "Qwen/Qwen3-32B"


def _request(system, text="Hi", **extra):
    return {"model": MODEL, "max_tokens": 6, "system": system, "messages": [{"role": "user", "content": text}], **extra}


def test_second_request_sharing_a_prefix_reads_from_the_cache(claude, unique_text):
    system = unique_text(300)
    first = claude.messages.create(**_request(system, "one"))
    second = claude.messages.create(**_request(system, "two"))
    assert first.usage.cache_read_input_tokens == 0
    assert second.usage.cache_read_input_tokens >= 300
    usage = second.usage
    assert usage.input_tokens + usage.cache_read_input_tokens + usage.cache_creation_input_tokens > 300
    assert second.stop_reason == "max_tokens" and second.usage.output_tokens == 6
    assert second.content[0].type == "text" and second.role == "assistant"


def test_streaming_events_and_final_usage(claude, unique_text):
    system = unique_text(200)
    claude.messages.create(**_request(system))
    with claude.messages.stream(**_request(system, "again")) as stream:
        events = list(stream)
        message = stream.get_final_message()
    kinds = [event.type for event in events]
    assert kinds[0] == "message_start"
    delta = next(event for event in events if event.type == "message_delta").delta
    assert delta.model_dump(exclude_unset=True) == {"stop_reason": "max_tokens", "stop_sequence": None}  # vLLM 0.33
    assert kinds[-2:] == ["message_delta", "message_stop"]
    assert kinds.count("content_block_start") == 1 and kinds.count("content_block_stop") == 1
    assert message.usage.cache_read_input_tokens >= 200
    assert message.content[0].text.startswith("The fake node")


def test_count_tokens_matches_the_prompt_a_request_uses(claude, unique_text):
    system = [
        {"type": "text", "text": "x-anthropic-billing-header: cch=123;"},
        {"type": "text", "text": unique_text(50)},
    ]
    counted = claude.messages.count_tokens(model=MODEL, system=system, messages=[{"role": "user", "content": "Hi"}])
    message = claude.messages.create(**_request(system))
    usage = message.usage
    assert (
        counted.input_tokens == usage.input_tokens + usage.cache_read_input_tokens + usage.cache_creation_input_tokens
    )
    without_header = claude.messages.count_tokens(
        model=MODEL, system=system[1:], messages=[{"role": "user", "content": "Hi"}]
    )
    assert without_header.input_tokens == counted.input_tokens


def test_inline_system_messages_and_claude_code_roles_are_accepted(claude, unique_text):
    messages = [
        {"role": "user", "content": [{"type": "text", "text": unique_text(5), "cache_control": {"type": "ephemeral"}}]},
        {"role": "system", "content": "Be terse."},
    ]
    response = claude.messages.create(model=MODEL, max_tokens=2, messages=messages)
    assert response.usage.output_tokens == 2
