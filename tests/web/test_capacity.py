"""A node's KV capacity is one figure everywhere: the coordinator's `/v1/nodes`, read from a (fake) vLLM node's
`/metrics`, equals the simulator's node model and the demo's `(num_gpu_blocks − 1) × block_size`."""

from tao_coordinator.fakevllm import FakeFleet, FakeNodeConfig
from tao_coordinator.sim.node import profile_by_name

from .conftest import API_TOKEN, running_coordinator


async def test_nodes_report_the_capacity_the_simulator_uses(tmp_path):
    profile = profile_by_name("h100-tp2")
    async with (
        FakeFleet(1, FakeNodeConfig(profile="h100-tp2")) as fleet,
        running_coordinator(tmp_path, fleet) as c,
    ):
        status, body = await c.call("GET", "/v1/nodes", token=API_TOKEN)
    assert status == 200
    assert [node["capacity_tokens"] for node in body["nodes"]] == [profile.capacity_tokens]
    assert profile.capacity_tokens == (profile.num_gpu_blocks - 1) * profile.block_size == 322_256
