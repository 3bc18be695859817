"""KV events over ZMQ with a real `pyzmq` subscriber, decoded by plain msgpack: both encodings, replay, eviction."""

import json
import time
import urllib.request

import msgpack
import openai
import zmq

from tao_coordinator.fakevllm.hashing import block_hashes, external

MODEL = "Qwen/Qwen3-32B"


def _chat(node, text, max_tokens=20, **extra):
    messages = [{"role": "user", "content": text}]
    with openai.OpenAI(base_url=node.openai_base_url, api_key="x", max_retries=0) as client:
        return client.chat.completions.create(model=MODEL, messages=messages, max_tokens=max_tokens, **extra), messages


def _tokenize(node, messages):
    request = urllib.request.Request(
        node.url + "/tokenize",
        data=json.dumps({"messages": messages}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request) as response:
        return json.loads(response.read())["tokens"]


def _stored_of(batches, encoding="map"):
    events = [event for batch in batches for event in batch.events]
    if encoding == "map":
        return [e for e in events if e["type"] == "BlockStored"]
    return [e for e in events if e[0] == "BlockStored"]


def test_map_encoded_events_carry_hashes_tokens_and_session(node, subscribe, unique_text):
    subscriber = subscribe(node)
    response, messages = _chat(node, unique_text(60), extra_headers={"X-Session-ID": "sess-header"})
    total = response.usage.prompt_tokens + response.usage.completion_tokens
    expected_blocks = (total - 1) // 16
    batches = subscriber.batches(lambda got: sum(len(e["block_hashes"]) for e in _stored_of(got)) >= expected_blocks)
    assert [b.seq for b in batches] == list(range(batches[0].seq, batches[0].seq + len(batches)))
    assert all(b.topic == b"kv@0" and b.dp_rank == 0 and abs(b.ts - time.time()) < 60 for b in batches)
    stored = _stored_of(batches)
    assert all(e["session_id"] == "sess-header" for e in stored)
    assert stored[0]["parent_block_hash"] is None
    assert stored[1]["parent_block_hash"] == stored[0]["block_hashes"][-1]
    prompt_tokens = _tokenize(node, messages)
    hashes = [h for e in stored for h in e["block_hashes"]]
    prompt_blocks = len(prompt_tokens) // 16
    assert hashes[:prompt_blocks] == [external(h) for h in block_hashes(prompt_tokens, 16, prompt_blocks)]
    first = stored[0]
    assert first["token_ids"] == prompt_tokens[: 16 * len(first["block_hashes"])]
    assert first["block_size"] == 16 and first["medium"] == "GPU" and first["lora_id"] is None
    assert first["extra_keys"] == [None] * len(first["block_hashes"])
    assert list(first)[:8] == [
        "type", "block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium", "lora_name"
    ]  # fmt: skip


def test_body_session_id_wins_and_salt_shows_in_extra_keys(node, subscribe, unique_text):
    subscriber = subscribe(node)
    body = {"session_id": "sess-body", "cache_salt": "salty"}
    _chat(node, unique_text(40), max_tokens=1, extra_headers={"X-Session-ID": "ignored"}, extra_body=body)
    stored = _stored_of(subscriber.batches(lambda got: bool(_stored_of(got))))
    assert stored[0]["session_id"] == "sess-body"
    assert stored[0]["extra_keys"][0] == ["salty"]


def test_vllm_xargs_session_id_is_the_last_resort(node, subscribe, unique_text):
    subscriber = subscribe(node)
    _chat(node, unique_text(40), max_tokens=1, extra_body={"vllm_xargs": {"session_id": "sess-xargs"}})
    assert _stored_of(subscriber.batches(lambda got: bool(_stored_of(got))))[0]["session_id"] == "sess-xargs"


def test_array_encoding_decodes_positionally(array_node, subscribe, unique_text):
    subscriber = subscribe(array_node)
    _chat(array_node, unique_text(40), max_tokens=1, extra_headers={"X-Session-ID": "s-arr"})
    batches = subscriber.batches(lambda got: bool(_stored_of(got, "array")))
    event = _stored_of(batches, "array")[0]
    assert batches[0].topic == b"legacy"
    tag, hashes, parent, tokens, block_size, lora_id, medium = event[:7]
    assert (tag, parent, block_size, lora_id, medium) == ("BlockStored", None, 16, None, "GPU")
    assert len(tokens) == 16 * len(hashes) and all(0 <= h < 2**64 for h in hashes)
    # vLLM 0.23.0 sends every field of its struct, trailing nulls included; session_id did not exist yet
    assert len(event) == 12 and event[7:] == [None, [None] * len(hashes), 0, "full_attention", None]


def test_eviction_emits_block_removed_for_stored_hashes(small_node, subscribe, unique_text):
    subscriber = subscribe(small_node)
    for _ in range(4):  # 39 usable blocks; each request caches about 14
        _chat(small_node, unique_text(150), max_tokens=10)
    batches = subscriber.batches(lambda got: any(e["type"] == "BlockRemoved" for b in got for e in b.events))
    stored = {h for e in _stored_of(batches) for h in e["block_hashes"]}
    removed = [e for b in batches for e in b.events if e["type"] == "BlockRemoved"]
    assert all(len(e["block_hashes"]) == 1 and e["medium"] == "GPU" for e in removed)
    assert {e["block_hashes"][0] for e in removed} <= stored


def _replay(endpoint, start_seq):
    dealer = zmq.Context.instance().socket(zmq.DEALER)
    dealer.setsockopt(zmq.LINGER, 0)
    dealer.connect(endpoint)
    dealer.send_multipart([b"", start_seq.to_bytes(8, "big")])
    frames = []
    while dealer.poll(5000):
        reply = dealer.recv_multipart()
        frames.append(reply)
        if reply[-2] == (-1).to_bytes(8, "big", signed=True):
            break
    dealer.close()
    return frames


def test_replay_socket_resends_buffered_batches(node, array_node, subscribe, unique_text):
    subscriber = subscribe(node)
    _chat(node, unique_text(40), max_tokens=1)
    live = subscriber.batches(lambda got: bool(_stored_of(got)))
    frames = _replay(node.kv_replay_endpoint, live[0].seq)
    assert frames[-1] == [b"", b"", (-1).to_bytes(8, "big", signed=True), b""]
    empty, topic, seq, payload = frames[0]
    assert (empty, topic, int.from_bytes(seq, "big")) == (b"", b"kv@0", live[0].seq)
    assert msgpack.unpackb(payload)[1] == live[0].events
    _chat(array_node, unique_text(20), max_tokens=1)
    legacy = _replay(array_node.kv_replay_endpoint, 0)
    assert legacy[-1] == [b"", (-1).to_bytes(8, "big", signed=True), b""]
    assert all(len(frame) == 3 for frame in legacy)  # ≤0.25 framing: no topic frame


def test_reset_prefix_cache_emits_all_blocks_cleared(small_node, subscribe, unique_text):
    subscriber = subscribe(small_node)
    _chat(small_node, unique_text(30), max_tokens=1)
    request = urllib.request.Request(small_node.url + "/reset_prefix_cache", method="POST")
    with urllib.request.urlopen(request) as response:
        assert response.status == 200
    batches = subscriber.batches(lambda got: any(e["type"] == "AllBlocksCleared" for b in got for e in b.events))
    assert batches[-1].events[-1] == {"type": "AllBlocksCleared"}
