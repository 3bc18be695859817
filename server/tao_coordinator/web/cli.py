"""`tao coordinator`: run the coordinator beside a vLLM fleet (configuration: `config.py`).

What the command cannot work with — a configuration, a state directory, a store — is one line on stderr naming the
file, what is wrong and what to do, and exit status 2, before anything listens; a port in use is exit status 1.
"""

from __future__ import annotations

import argparse
import gc
import sys
from pathlib import Path
from typing import Any

from aiohttp import web

from tao_sdk.listening import cannot_listen, listen

from ..config import ConfigError, CoordinatorConfig, load_config
from ..core.policies import POLICIES
from ..logs import LEVELS, configure
from ..store import RESET_FLAG, StoreError, check_store
from .app import create_app
from .serve import serve
from .tokens import SessionTokens


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", type=Path, help="TOML configuration file (see docs/coordinator.md)")
    parser.add_argument("--host", help="address to listen on (127.0.0.1)")
    parser.add_argument("--port", type=int, help="port to listen on (8700)")
    parser.add_argument("--policy", help=f"scheduling policy: {', '.join(POLICIES)}, or module:factory (tao)")
    parser.add_argument("--state-dir", type=Path, help="where learned state persists (~/.local/state/tao)")
    parser.add_argument("--token", help="API bearer token (or $TAO_TOKEN)")
    parser.add_argument("--insecure-no-auth", action="store_true", default=None, help="no tokens (loopback only)")
    parser.add_argument(
        "--node",
        action="append",
        default=[],
        metavar="NAME=URL[,CAPACITY]",
        help="a vLLM node, in addition to the config file's (repeatable)",
    )
    parser.add_argument("--redis", metavar="URL", help="share the fleet with other coordinators through this Redis")
    parser.add_argument(
        "--advertise-url", metavar="URL", help="where clients reach this coordinator (http://host:port)"
    )
    parser.add_argument(
        RESET_FLAG,
        action="store_true",
        help="if the state directory's tao.sqlite3 is corrupt, move it aside (tao.sqlite3.corrupt-<time>) and start "
        "with an empty tool history",
    )
    parser.add_argument(
        "--max-live-sessions", type=int, metavar="N", help="live sessions one API token may hold (limits, 5000)"
    )
    parser.add_argument(
        "--registrations-per-s", type=float, metavar="R", help="registrations per second one API token may make (100)"
    )
    parser.add_argument(
        "--registration-burst", type=int, metavar="N", help="registrations one API token may make at once (2000)"
    )
    parser.add_argument("--log-format", choices=["text", "json"], help="log lines as text or JSON (text)")
    parser.add_argument(
        "--log-level",
        type=str.lower,
        choices=list(LEVELS),
        help="least severe lines logged: info shows every decision, warning only problems (info)",
    )


def node_overrides(specs: list[str]) -> list[dict[str, Any]]:
    nodes = []
    for spec in specs:
        name, _, rest = spec.partition("=")
        url, _, capacity = rest.partition(",")
        if not name or not url:
            raise ConfigError(f"--node: {spec!r} is not NAME=URL[,CAPACITY]")
        node: dict[str, Any] = {"name": name, "url": url}
        if capacity:
            if not capacity.isdigit():
                raise ConfigError(f"--node: capacity {capacity!r} is not a whole number of tokens")
            node["capacity_tokens"] = int(capacity)
        nodes.append(node)
    return nodes


def run(args: argparse.Namespace) -> int:
    try:
        overrides: dict[str, Any] = {
            "server.host": args.host,
            "server.port": args.port,
            "server.state_dir": args.state_dir,
            "server.token": args.token,
            "server.insecure_no_auth": args.insecure_no_auth,
            "server.log_format": args.log_format,
            "server.log_level": args.log_level,
            "server.redis": args.redis,
            "server.advertise_url": args.advertise_url,
            "policy.name": args.policy,
            "limits.max_live_sessions": args.max_live_sessions,
            "limits.registrations_per_s": args.registrations_per_s,
            "limits.registration_burst": args.registration_burst,
        }
        config = load_config(args.config, overrides, node_overrides(args.node))
    except ConfigError as error:
        print(f"tao coordinator: {error}", file=sys.stderr)
        return 2
    configure(config.server.log_format, config.server.log_level)
    if (problem := state_problem(config, args.reset_corrupt_store)) is not None:
        print(f"tao coordinator: {problem}", file=sys.stderr)
        return 2
    try:
        sock = listen(config.server.host, config.server.port)
    except OSError as error:
        print(cannot_listen("tao coordinator", config.server.host, config.server.port, error), file=sys.stderr)
        return 1
    app = create_app(config)
    app.on_startup.append(_freeze_start_up)
    serve(app, config.server, sock)
    return 0


async def _freeze_start_up(app: web.Application) -> None:
    """After start-up (imports, compiled kernels, the learned history): those objects are never scanned by a full
    garbage collection again, which would otherwise pause every request for 100 ms and more (measured in a flood of
    registrations, `bench/fault_runs/flood.py`); only what serving creates is."""
    gc.collect()
    gc.freeze()


def state_problem(config: CoordinatorConfig, reset_corrupt: bool) -> str | None:
    """What keeps the state directory from being used, in one line; None when it can be. With `--redis` the state
    is in Redis and the directory is not used."""
    if config.server.redis is not None:
        return None
    state_dir = config.server.state_dir
    try:
        check_store(state_dir, reset_corrupt)
        SessionTokens.in_state_dir(state_dir)
    except StoreError as error:
        return str(error)
    except OSError as error:
        return (
            f"{error.filename or state_dir}: {error.strerror or error}: make the state directory and its files "
            "writable by this user, or choose another --state-dir"
        )
    return None
