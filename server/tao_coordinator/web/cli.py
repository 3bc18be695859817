"""`tao coordinator`: run the coordinator beside a vLLM fleet (configuration: `config.py`).

What the command cannot work with — a configuration, a state directory, a store — is one line on stderr naming the
file, what is wrong and what to do, and exit status 2, before anything listens; a port in use is exit status 1.
"""

from __future__ import annotations

import argparse
import gc
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from tao_sdk.listening import cannot_listen, listen

from ..config import ConfigError, CoordinatorConfig, LimitsConfig, PolicyConfig, ServerConfig, load_config
from ..field_help import field_choices, field_help
from ..logs import LEVELS, configure

if TYPE_CHECKING:
    from aiohttp import web

SECTIONS: dict[str, type[BaseModel]] = {"server": ServerConfig, "policy": PolicyConfig, "limits": LimitsConfig}

CONFIG_FLAGS: dict[str, str] = {
    "host": "server.host",
    "port": "server.port",
    "policy": "policy.name",
    "state_dir": "server.state_dir",
    "token": "server.token",
    "insecure_no_auth": "server.insecure_no_auth",
    "redis": "server.redis",
    "advertise_url": "server.advertise_url",
    "max_live_sessions": "limits.max_live_sessions",
    "registrations_per_s": "limits.registrations_per_s",
    "registration_burst": "limits.registration_burst",
    "log_format": "server.log_format",
    "log_level": "server.log_level",
}
"""Each flag that overrides a field of the configuration file (by its argparse name) and that field."""

RESET_CORRUPT_STORE = "--reset-corrupt-store"
"""The flag `store.py` names when the state directory's database is corrupt (`store.RESET_FLAG`)."""


def _help(dest: str) -> str:
    section, _, name = CONFIG_FLAGS[dest].partition(".")
    return field_help(SECTIONS[section], name)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from ..core.policies import POLICIES

    parser.add_argument("--config", type=Path, help="TOML configuration file (see docs/coordinator.md)")
    parser.add_argument("--host", help=_help("host"))
    parser.add_argument("--port", type=int, help=_help("port"))
    parser.add_argument("--policy", help=f"{_help('policy')}; registered: {', '.join(POLICIES)}")
    parser.add_argument("--state-dir", type=Path, help=_help("state_dir"))
    parser.add_argument("--token", help=_help("token"))
    parser.add_argument("--insecure-no-auth", action="store_true", default=None, help=_help("insecure_no_auth"))
    parser.add_argument(
        "--node",
        action="append",
        default=[],
        metavar="NAME=URL[,CAPACITY]",
        help="a vLLM node, in addition to the config file's (repeatable)",
    )
    parser.add_argument("--redis", metavar="URL", help=_help("redis"))
    parser.add_argument("--advertise-url", metavar="URL", help=_help("advertise_url"))
    parser.add_argument(
        RESET_CORRUPT_STORE,
        action="store_true",
        help="if the state directory's tao.sqlite3 is corrupt, move it aside (tao.sqlite3.corrupt-<time>) and start "
        "with an empty tool history",
    )
    parser.add_argument("--max-live-sessions", type=int, metavar="N", help=_help("max_live_sessions"))
    parser.add_argument("--registrations-per-s", type=float, metavar="R", help=_help("registrations_per_s"))
    parser.add_argument("--registration-burst", type=int, metavar="N", help=_help("registration_burst"))
    parser.add_argument("--log-format", choices=field_choices(ServerConfig, "log_format"), help=_help("log_format"))
    parser.add_argument("--log-level", type=str.lower, choices=list(LEVELS), help=_help("log_level"))


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
        overrides = {field: getattr(args, dest) for dest, field in CONFIG_FLAGS.items()}
        config = load_config(args.config, overrides, node_overrides(args.node))
    except ConfigError as error:
        print(f"tao coordinator: {error}", file=sys.stderr)
        return 2
    from .app import create_app
    from .serve import serve

    configure(config.server.log_format, config.server.log_level)
    if (problem := state_problem(config, args.reset_corrupt_store)) is not None:
        print(f"tao coordinator: {problem}", file=sys.stderr)
        return 2
    try:
        sock = listen(config.server.host, config.server.port)
    except OSError as error:
        print(cannot_listen("tao coordinator", config.server.host, config.server.port, error), file=sys.stderr)
        return 1
    app = create_app(config, lambda: load_config(args.config, overrides, node_overrides(args.node)))
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
    from ..store import StoreError, check_store
    from .tokens import SessionTokens

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
