"""`tao coordinator`: run the coordinator beside a vLLM fleet (configuration: `config.py`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from tao_sdk.listening import cannot_listen, listen

from ..config import ConfigError, load_config
from ..core.policies import POLICIES
from ..logs import LEVELS, configure
from .app import create_app
from .serve import serve


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
        }
        config = load_config(args.config, overrides, node_overrides(args.node))
    except ConfigError as error:
        print(f"tao coordinator: {error}", file=sys.stderr)
        return 2
    try:
        sock = listen(config.server.host, config.server.port)
    except OSError as error:
        print(cannot_listen("tao coordinator", config.server.host, config.server.port, error), file=sys.stderr)
        return 1
    configure(config.server.log_format, config.server.log_level)
    serve(create_app(config), config.server, sock)
    return 0
