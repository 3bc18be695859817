"""A vLLM-faithful model of one inference node: KV block pool with prefix caching, v1 scheduler, H100 step times.

Pure and synchronous: time comes in as arguments (seconds), so the same engine serves the virtual-time fleet
simulator and the real-time fake vLLM server. See docs/simulator-node.md for the model, its calibration and limits.
"""

from .counters import NodeCounters
from .cpu_tier import CpuTier, cpu_blocks_from_gib
from .engine import NodeEngine, RequestRejected
from .events import (
    AllBlocksCleared,
    BlockEvent,
    BlockRemoved,
    BlockStored,
    Finished,
    FinishReason,
    FirstToken,
    NodeEvent,
    Preempted,
)
from .profile import (
    BUILTIN_PROFILES,
    NodeProfile,
    StepCoefficients,
    UnknownProfile,
    gpu_blocks_from_memory,
    profile_by_name,
    profile_from_mapping,
    with_cpu_tier,
)
from .queues import SchedulingPolicy
from .request import NodeRequest, cacheable_blocks
from .step_time import StepTimeModel

__all__ = [
    "BUILTIN_PROFILES",
    "AllBlocksCleared",
    "BlockEvent",
    "BlockRemoved",
    "BlockStored",
    "CpuTier",
    "FinishReason",
    "Finished",
    "FirstToken",
    "NodeCounters",
    "NodeEngine",
    "NodeEvent",
    "NodeProfile",
    "NodeRequest",
    "Preempted",
    "RequestRejected",
    "SchedulingPolicy",
    "StepCoefficients",
    "StepTimeModel",
    "UnknownProfile",
    "cacheable_blocks",
    "cpu_blocks_from_gib",
    "gpu_blocks_from_memory",
    "profile_by_name",
    "profile_from_mapping",
    "with_cpu_tier",
]
