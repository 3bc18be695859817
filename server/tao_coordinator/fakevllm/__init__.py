"""A fake vLLM server: vLLM's HTTP, metrics and KV-event formats over the simulator's node model, in real time.

Pointing an OpenAI/Anthropic client, a Prometheus scraper or a ZMQ KV-event subscriber at a fake node looks like
pointing it at `vllm serve` (0.33 formats): prefix-cache hits, queueing, preemption and step times come from
`tao_coordinator.sim.node`, sped up by `time_scale`. No GPU, no model weights: the text is filler or scripted
(tool calls for harness tests). See docs/fake-vllm.md.

Entry points: `FakeNode` / `FakeFleet` / `ThreadedFleet` (in-process servers on loopback ports), `create_app`
(the aiohttp application), `tao fake-vllm` (`fakevllm.cli`) and `tao bench fake-vllm` (`fakevllm.bench`).
"""

from .app import create_app
from .config import FakeNodeConfig
from .fleet import FakeFleet, FakeNode, ThreadedFleet
from .kv_publisher import KvEventsConfig
from .policy import Match, Policy, Script, Step, load_policy
from .service import NodeService

__all__ = [
    "FakeFleet",
    "FakeNode",
    "FakeNodeConfig",
    "KvEventsConfig",
    "Match",
    "NodeService",
    "Policy",
    "Script",
    "Step",
    "ThreadedFleet",
    "create_app",
    "load_policy",
]
