"""Workloads of the fleet simulator: real agent traces and a calibrated synthetic generator, as `Workload` values.

    load_agentx(path, max_context=…)   Claude Code traces (AgentX / kv-cache-tester schema)   agentx.py
    load_mini_swe(path, max_context=…) mini-swe-agent per-step table                           mini_swe.py
    generate(preset, sessions=…, …)    synthetic sessions, presets "claude-code", "swe-agent" synthetic.py
    generate_mixed(sessions=…, …)      agent sessions with side calls, and chat requests      mixed.py

The replay contract is in `model.py`; the gap rule and the context cap, shared by all three, in `rules.py`; the id
layout in `blocks.py`; the derivation of every constant in `calibration.py` and docs/workloads.md.
"""

from .agentx import load_agentx
from .distributions import QuantileTable, SyntheticPreset
from .files import traces_dir
from .mini_swe import GEMINI_3_PRO_LLM_TIME, LlmTimeModel, load_mini_swe
from .mixed import DEFAULT_CHAT_SHARE, MIXED, generate_mixed
from .model import (
    MAIN_MODEL,
    SMALL_MODEL,
    TOOL_FORMAT_ERROR,
    TOOL_START,
    TOOL_SUBAGENT,
    TOOL_UNKNOWN,
    TOOL_USER,
    GapKind,
    LoadReport,
    RemovedScript,
    RequestSpec,
    ScriptMeta,
    SessionScript,
    SubagentLaunch,
    Workload,
)
from .rules import GapRule
from .synthetic import CLAUDE_CODE, CLAUDE_CODE_SIDE_CALLS, PRESETS, SWE_AGENT, generate

__all__ = [
    "CLAUDE_CODE",
    "CLAUDE_CODE_SIDE_CALLS",
    "DEFAULT_CHAT_SHARE",
    "GEMINI_3_PRO_LLM_TIME",
    "MAIN_MODEL",
    "MIXED",
    "PRESETS",
    "SMALL_MODEL",
    "SWE_AGENT",
    "TOOL_FORMAT_ERROR",
    "TOOL_START",
    "TOOL_SUBAGENT",
    "TOOL_UNKNOWN",
    "TOOL_USER",
    "GapKind",
    "GapRule",
    "LlmTimeModel",
    "LoadReport",
    "QuantileTable",
    "RemovedScript",
    "RequestSpec",
    "ScriptMeta",
    "SessionScript",
    "SubagentLaunch",
    "SyntheticPreset",
    "Workload",
    "generate",
    "generate_mixed",
    "load_agentx",
    "load_mini_swe",
    "traces_dir",
]
