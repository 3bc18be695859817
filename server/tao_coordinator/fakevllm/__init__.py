"""A fake vLLM server: vLLM's HTTP, metrics and KV-event formats over the simulator's node model, in real time.

Pointing an OpenAI/Anthropic client, a Prometheus scraper or a ZMQ KV-event subscriber at a fake node looks like
pointing it at `vllm serve` (0.33 formats): prefix-cache hits, queueing, preemption and step times come from
`tao_coordinator.sim.node`, sped up by `time_scale`. No GPU, no model weights: the text is filler or scripted
(tool calls for harness tests). See docs/fake-vllm.md.

Entry points: `FakeNode` / `FakeFleet` / `ThreadedFleet` (in-process servers on loopback ports), `create_node_app`
(the aiohttp application), `tao fake-vllm` (`fakevllm.cli`) and `tao bench fake-vllm` (`fakevllm.bench`).
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .app import create_node_app
    from .config import FakeNodeConfig
    from .fleet import FakeFleet, FakeNode, ThreadedFleet
    from .kv_publisher import KvEventsConfig
    from .policy import Match, ReplyPolicy, ReplyStep, Script, load_policy
    from .service import NodeService

_LAZY = {
    "create_node_app": "app",
    "FakeNodeConfig": "config",
    "FakeFleet": "fleet",
    "FakeNode": "fleet",
    "ThreadedFleet": "fleet",
    "KvEventsConfig": "kv_publisher",
    "Match": "policy",
    "ReplyPolicy": "policy",
    "Script": "policy",
    "ReplyStep": "policy",
    "load_policy": "policy",
    "NodeService": "service",
}


def __getattr__(name: str) -> Any:
    """Each name is imported on first use, so `tao fake-vllm --help` does not load the server (aiohttp)."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


__all__ = [
    "FakeFleet",
    "FakeNode",
    "FakeNodeConfig",
    "KvEventsConfig",
    "Match",
    "NodeService",
    "ReplyPolicy",
    "ReplyStep",
    "Script",
    "ThreadedFleet",
    "create_node_app",
    "load_policy",
]
