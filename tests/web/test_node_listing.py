"""`GET /v1/nodes` says what each node serves and where that came from, how it joined the fleet, and whether a
drain removes it: what an operator (or a test) reads to see where a model's calls may go. Fake vLLM nodes serving
two models, a real coordinator."""

from typing import Any

from tao_coordinator.fakevllm import FakeFleet, FakeNodeConfig
from tao_coordinator.local_coordinator import free_port
from tao_sdk import protocol

from .conftest import API_TOKEN, eventually, running_coordinator

LARGE, SMALL = "org/large-32b", "org/small-4b"


async def test_nodes_list_their_models_origin_and_drain(tmp_path):
    configs = [FakeNodeConfig(time_scale=50, served_model_name=model) for model in (LARGE, SMALL)]
    async with FakeFleet(configs) as fleet:
        nodes: list[dict[str, Any]] = [
            {"name": "node-0", "url": fleet.nodes[0].url},
            {"name": "node-1", "url": fleet.nodes[1].url, "models": [SMALL, "org/small-4b-lora"]},
        ]
        async with running_coordinator(tmp_path, fleet, nodes=nodes) as c:
            await eventually(lambda: c.service.coordinator.nodes["node-0"].models is not None)
            dead = {"name": "node-2", "url": f"http://127.0.0.1:{free_port()}"}  # never scraped: models not known
            assert (await c.call("POST", "/v1/nodes", dead, token=API_TOKEN))[0] == 201
            assert (await c.call("POST", "/v1/nodes/node-0/drain", {}, token=API_TOKEN))[0] == 200
            assert (await c.call("POST", "/v1/nodes/node-2/drain", {"remove": True}, token=API_TOKEN))[0] == 200
            status, body = await c.call("GET", "/v1/nodes", token=API_TOKEN)
    assert status == 200
    listed = {node["name"]: node for node in protocol.NodeList.model_validate(body).model_dump()["nodes"]}
    fields = ("models", "models_from", "origin", "membership", "removed_when_empty")
    assert {name: tuple(node[f] for f in fields) for name, node in listed.items()} == {
        "node-0": ([LARGE], "node", "config", "draining", False),
        "node-1": ([SMALL, "org/small-4b-lora"], "config", "config", "active", False),
        "node-2": (None, None, "api", "active", True),  # the core drains it once it first hears of it
    }


async def test_the_openapi_document_describes_the_node_list(tmp_path, fleet):
    async with running_coordinator(tmp_path, fleet) as c:
        _, spec = await c.call("GET", "/openapi.json")
    answer = spec["paths"]["/v1/nodes"]["get"]["responses"]["200"]["content"]["application/json"]["schema"]
    assert answer == {"$ref": "#/components/schemas/NodeList"}
    node = spec["components"]["schemas"]["NodeInfo"]["properties"]
    assert {"models", "models_from", "origin", "removed_when_empty"} <= node.keys()
