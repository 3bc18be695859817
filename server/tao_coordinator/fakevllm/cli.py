"""`tao fake-vllm`: serve one fake vLLM node until SIGINT/SIGTERM.

    tao fake-vllm --port 8000 --profile h100-tp2 --time-scale 10 \\
        --kv-events-endpoint tcp://127.0.0.1:5557 --kv-events-replay-endpoint tcp://127.0.0.1:5558 \\
        --kv-events-encoding map --policy script.json --served-model-name Qwen/Qwen3-32B \\
        --cpu-kv-gib 64 --max-num-queued-reqs 256

`--served-model-name A B` serves the model under both names (metrics name A); `--model PATH` is the `root` of its
`/v1/models` cards; `--lora-modules name=path ...` (or vLLM's JSON form) adds LoRA adapters (`model_cards.py`).

`--fault-metrics MODE` (with `--fault-metrics-series`, `--fault-metrics-delay`) starts the node with a broken
`/metrics` (`faults.py`; `PUT /fake/faults` changes it while it runs).

`--kv-events-endpoint` binds the PUB socket (add `--kv-events-connect` to connect it instead); vLLM's own
`--kv-events-config '{"enable_kv_cache_events": true, "endpoint": ..., ...}'` is accepted too and then follows
vLLM's rule (bind when the address has `*`/`::` or is ipc/inproc, else connect). `--profile-file` reads node
profiles from a TOML file (one table per profile, fields of `NodeProfile` with a `step` sub-table). Prints one
line with the URL once the server accepts connections.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tomllib
from pathlib import Path

from pydantic import ValidationError

from ..field_help import field_choices, field_default, field_help, problems
from ..sim.node import BUILTIN_PROFILES, NodeProfile, profile_by_name, profile_from_mapping
from .config import VLLM_VERSION, FakeNodeConfig
from .faults import Faults
from .kv_publisher import KvEventsConfig
from .model_cards import parse_lora_module
from .policy import load_policy

PORT = 8000
"""The command's port, vLLM's default (`FakeNodeConfig` picks a free one)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    node = FakeNodeConfig
    parser.add_argument("--host", default=field_default(node, "host"), help=field_help(node, "host"))
    parser.add_argument("--port", type=int, default=PORT, help=field_help(node, "port", default=str(PORT)))
    parser.add_argument(
        "--profile",
        default=field_default(node, "profile"),
        help=f"{field_help(node, 'profile')}; built in: {', '.join(BUILTIN_PROFILES)}",
    )
    parser.add_argument("--profile-file", type=Path, help="TOML file of extra node profiles")
    parser.add_argument("--max-model-len", type=int, help="override the profile's max_model_len")
    parser.add_argument(
        "--time-scale", type=float, default=field_default(node, "time_scale"), help=field_help(node, "time_scale")
    )
    parser.add_argument(
        "--served-model-name",
        nargs="+",
        metavar="NAME",
        default=field_default(node, "served_model_name"),
        help=f"{field_help(node, 'served_model_name')}; names after it serve the same model (served_model_aliases)",
    )
    parser.add_argument("--model", help=field_help(node, "model"))
    parser.add_argument(
        "--lora-modules",
        nargs="+",
        default=[],
        metavar="NAME=PATH",
        help=f"{field_help(node, 'lora_modules', default='none')}: name=path, or JSON with name, path, base_model_name",
    )
    parser.add_argument(
        "--allow-runtime-lora-updating", action="store_true", help=field_help(node, "allow_runtime_lora_updating")
    )
    parser.add_argument("--accept-any-model", action="store_true", help="do not answer 404 to other model names")
    parser.add_argument(
        "--scheduling-policy",
        choices=field_choices(node, "scheduling_policy"),
        default=field_default(node, "scheduling_policy"),
        help=field_help(node, "scheduling_policy"),
    )
    parser.add_argument("--policy", type=Path, help="scripted behaviour (JSON or TOML), see docs/fake-vllm.md")
    parser.add_argument("--kv-events-endpoint", help="ZMQ PUB address to bind, e.g. tcp://127.0.0.1:5557")
    parser.add_argument("--kv-events-replay-endpoint", help="ZMQ ROUTER address for replay requests")
    parser.add_argument("--kv-events-topic", default="")
    parser.add_argument("--kv-events-connect", action="store_true", help="connect the PUB socket instead of binding")
    parser.add_argument("--kv-events-config", help="vLLM's KVEventsConfig as JSON (alternative to the flags above)")
    parser.add_argument(
        "--kv-events-encoding",
        choices=field_choices(node, "kv_events_encoding"),
        default=field_default(node, "kv_events_encoding"),
        help=field_help(node, "kv_events_encoding"),
    )
    parser.add_argument(
        "--kv-events-legacy-replay", action="store_true", help="replay replies without the topic frame (vLLM <= 0.25)"
    )
    parser.add_argument("--disable-prompt-tokens-details", action="store_true", help="omit cached_tokens from usage")
    parser.add_argument(
        "--tick", type=float, default=field_default(node, "tick_seconds"), help=field_help(node, "tick_seconds")
    )
    parser.add_argument("--cpu-kv-gib", "--kv-offloading-size", type=float, help=field_help(node, "cpu_kv_gib"))
    parser.add_argument("--max-num-queued-reqs", type=int, help=field_help(node, "max_num_queued_reqs"))
    parser.add_argument(
        "--fault-metrics",
        choices=field_choices(Faults, "metrics"),
        default=field_default(Faults, "metrics"),
        help=field_help(Faults, "metrics"),
    )
    parser.add_argument(
        "--fault-metrics-series",
        default=field_default(Faults, "metrics_series"),
        help=field_help(Faults, "metrics_series"),
    )
    parser.add_argument(
        "--fault-metrics-delay",
        type=float,
        default=field_default(Faults, "metrics_delay_s"),
        help=field_help(Faults, "metrics_delay_s"),
    )


def _profile(args: argparse.Namespace) -> NodeProfile:
    extra: dict[str, NodeProfile] = {}
    if args.profile_file is not None:
        tables = tomllib.loads(args.profile_file.read_text(encoding="utf-8"))
        extra = {name: profile_from_mapping(name, table) for name, table in tables.items()}
    profile = profile_by_name(args.profile, extra)
    if args.max_model_len is not None:
        profile = dataclasses.replace(profile, max_model_len=args.max_model_len)
    return profile


def _kv_events(args: argparse.Namespace) -> KvEventsConfig | None:
    replay_topic = not args.kv_events_legacy_replay
    if args.kv_events_config is not None:
        raw = json.loads(args.kv_events_config)
        if not raw.get("enable_kv_cache_events", False):
            return None
        endpoint = str(raw.get("endpoint", "tcp://*:5557"))
        binds = "*" in endpoint or "::" in endpoint or endpoint.startswith(("ipc://", "inproc://"))
        return KvEventsConfig(
            endpoint=endpoint,
            replay_endpoint=raw.get("replay_endpoint"),
            topic=str(raw.get("topic", "")),
            buffer_steps=int(raw.get("buffer_steps", 10_000)),
            hwm=int(raw.get("hwm", 100_000)),
            replay_topic=replay_topic,
            connect=not binds,
        )
    if args.kv_events_endpoint is None:
        return None
    return KvEventsConfig(
        endpoint=args.kv_events_endpoint,
        replay_endpoint=args.kv_events_replay_endpoint,
        topic=args.kv_events_topic,
        replay_topic=replay_topic,
        connect=args.kv_events_connect,
    )


def build_config(args: argparse.Namespace) -> FakeNodeConfig:
    names = args.served_model_name  # the default alone is a string, names given are a list
    names = [names] if isinstance(names, str) else names
    return FakeNodeConfig(
        profile=_profile(args),
        served_model_name=names[0],
        served_model_aliases=tuple(names[1:]),
        model=args.model,
        lora_modules=tuple(parse_lora_module(item) for item in args.lora_modules),
        allow_runtime_lora_updating=args.allow_runtime_lora_updating,
        time_scale=args.time_scale,
        scheduling_policy=args.scheduling_policy,
        host=args.host,
        port=args.port,
        kv_events=_kv_events(args),
        kv_events_encoding=args.kv_events_encoding,
        policy=load_policy(args.policy) if args.policy is not None else FakeNodeConfig().policy,
        enable_prompt_tokens_details=not args.disable_prompt_tokens_details,
        strict_model_name=not args.accept_any_model,
        tick_seconds=args.tick,
        cpu_kv_gib=args.cpu_kv_gib,
        max_num_queued_reqs=args.max_num_queued_reqs,
    )


def build_faults(args: argparse.Namespace) -> Faults:
    return Faults(
        metrics=args.fault_metrics, metrics_series=args.fault_metrics_series, metrics_delay_s=args.fault_metrics_delay
    )


async def serve_node(config: FakeNodeConfig, faults: Faults | None = None) -> None:
    import asyncio
    import signal

    from .app import FAULTS
    from .fleet import FakeNode

    node = await FakeNode(config).start()
    if faults is not None:
        node.app[FAULTS].faults = faults
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    profile = node.service.profile
    events = f"; KV events on {node.kv_endpoint}" if node.kv_endpoint else ""
    if profile.cpu_tier is not None:
        events = f"; CPU tier of {profile.cpu_tier.num_blocks} blocks" + events
    print(
        f"fake vLLM {VLLM_VERSION} serving {_served(config)} on {node.url} "
        f"(profile {profile.name}, {profile.num_gpu_blocks} blocks, time scale {config.time_scale}){events}",
        flush=True,
    )
    try:
        await stop.wait()
    finally:
        await node.stop()


def _served(config: FakeNodeConfig) -> str:
    """The served names as the start line shows them: the main one alone when there is nothing else."""
    served = config.catalog()
    extra = [*served.names[1:], *(adapter.name for adapter in served.adapters)]
    return served.names[0] + (f" (also {', '.join(extra)})" if extra else "")


def run(args: argparse.Namespace) -> int:
    import asyncio

    import zmq

    try:
        config = build_config(args)
        faults = build_faults(args)
    except ValidationError as error:
        print(f"tao fake-vllm: {problems(error)}", file=sys.stderr)
        return 2
    except (OSError, ValueError, KeyError) as error:
        print(f"tao fake-vllm: {error}", file=sys.stderr)
        return 2
    try:
        asyncio.run(serve_node(config, faults))
    except (OSError, zmq.ZMQError) as error:
        print(f"tao fake-vllm: {error}", file=sys.stderr)
        return 1
    return 0
