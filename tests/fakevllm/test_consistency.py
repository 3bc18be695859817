"""Under memory pressure (preemptions, evictions), KV events still describe the node's prefix cache exactly."""

from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import msgpack
import openai
import zmq

from tao_coordinator.fakevllm import FakeNodeConfig, ThreadedFleet
from tao_coordinator.fakevllm.hashing import external

MODEL = "Qwen/Qwen3-32B"


def _replay_all(endpoint):
    dealer = zmq.Context.instance().socket(zmq.DEALER)
    dealer.setsockopt(zmq.LINGER, 0)
    dealer.connect(endpoint)
    dealer.send_multipart([b"", (0).to_bytes(8, "big")])
    batches = []
    while dealer.poll(5000):
        _, _topic, seq, payload = dealer.recv_multipart()
        if seq == (-1).to_bytes(8, "big", signed=True):
            break
        batches.append((int.from_bytes(seq, "big"), msgpack.unpackb(payload)))
    dealer.close()
    return batches


def test_kv_events_mirror_the_cache_through_preemptions(make_profile):
    config = FakeNodeConfig(profile=make_profile(num_gpu_blocks=80), time_scale=50)
    with (
        ThreadedFleet([config]) as fleet,
        openai.OpenAI(base_url=fleet.nodes[0].openai_base_url, api_key="x") as client,
    ):
        node = fleet.nodes[0]
        prefixes = [f"shared prefix {k} " * 40 for k in range(4)]

        def one(index):
            messages = [
                {"role": "system", "content": prefixes[index % 4]},
                {"role": "user", "content": f"question {index} " * (1 + index % 30)},
            ]
            max_tokens = 40 + 37 * index % 300
            response = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=max_tokens)
            return response.usage.completion_tokens == max_tokens

        with ThreadPoolExecutor(max_workers=24) as pool:
            assert all(pool.map(one, range(60)))
        engine, registry = node.service.driver.engine, node.service.registry
        counters = fleet.call(engine.counters)
        assert counters.num_preemptions > 0
        resident: Counter[int] = Counter()
        batches = _replay_all(node.kv_replay_endpoint)
        assert [seq for seq, _ in batches] == list(range(len(batches)))
        for _, (_ts, events, _rank) in batches:
            for event in events:
                delta = {"BlockStored": 1, "BlockRemoved": -1}.get(event["type"], 0)
                resident.update({block_hash: delta for block_hash in event.get("block_hashes", ())})
        cached_ids = fleet.call(lambda: [i for first, n in engine.cached_block_runs() for i in range(first, first + n)])
        assert {h for h, count in resident.items() if count > 0} == {external(registry.hash_of(i)) for i in cached_ids}
        assert len(registry) == counters.cached_blocks  # nothing live: the registry holds exactly the cached blocks
        fleet.call(engine.check_invariants)
