"""The `TAO_*` environment variables: this module is the one place that reads them.

| variable | what it gives | read by |
| --- | --- | --- |
| `TAO_COORDINATOR` | the coordinator's URL, or its replicas' (comma-separated) | `session`, `tao proxy`, `tao top` |
| `TAO_TOKEN` | the coordinator's API token (also the coordinator's `server.token`) | the same, `tao coordinator` |
| `TAO_NODES` | node root URLs for fail-open routing (comma-separated) | `session`, `tao proxy` |
| `TAO_PROXY_URL` | the `tao proxy` address the harness hooks relay tool events to | the Claude Code hook |
| `TAO_HOOK_TIMEOUT_S` | how long a hook waits for the proxy | the Claude Code hook |
| `TAO_HOOK_STATE_DIR` | where the hook keeps its markers of open background waits | the Claude Code hook |
| `TAO_HOOK_LOG` | a file the hook appends each event's outcome to, one line each | the Claude Code hook |
| `TAO_TRACES` | the folder of the trace files | `tao sim`, `tao bench` |

Each function takes the environment to read (`os.environ` unless given, so a hook or a test can pass its own) and
returns what the variable says, or None (an empty tuple for lists) when it is unset or empty: the caller keeps its
own default. An explicit setting (an argument, a flag) always wins over the variable; that choice stays with the
caller.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

__all__ = [
    "VARIABLES",
    "coordinator",
    "hook_log",
    "hook_state_dir",
    "hook_timeout_s",
    "nodes",
    "proxy_url",
    "token",
    "traces",
]

VARIABLES = (
    "TAO_COORDINATOR",
    "TAO_TOKEN",
    "TAO_NODES",
    "TAO_PROXY_URL",
    "TAO_HOOK_TIMEOUT_S",
    "TAO_HOOK_STATE_DIR",
    "TAO_HOOK_LOG",
    "TAO_TRACES",
)
"""Every variable the project reads, in the order of the table above."""

Environment = Mapping[str, str]


def _get(name: str, env: Environment | None) -> str | None:
    value = (os.environ if env is None else env).get(name)
    return value or None


def coordinator(env: Environment | None = None) -> str | None:
    """`$TAO_COORDINATOR`: the coordinator's URL, or several comma-separated (`replicas.coordinator_urls` parses)."""
    return _get("TAO_COORDINATOR", env)


def token(env: Environment | None = None) -> str | None:
    """`$TAO_TOKEN`: the coordinator's API token."""
    return _get("TAO_TOKEN", env)


def nodes(env: Environment | None = None) -> tuple[str, ...]:
    """`$TAO_NODES`: node root URLs, comma-separated, blanks around each removed."""
    listed = _get("TAO_NODES", env) or ""
    return tuple(url.strip() for url in listed.split(",") if url.strip())


def proxy_url(env: Environment | None = None) -> str | None:
    """`$TAO_PROXY_URL`: the root URL of the `tao proxy` the hooks relay to."""
    return _get("TAO_PROXY_URL", env)


def hook_timeout_s(env: Environment | None = None) -> str | None:
    """`$TAO_HOOK_TIMEOUT_S`, as written (the hook parses it, and falls back when it does not parse)."""
    return _get("TAO_HOOK_TIMEOUT_S", env)


def hook_state_dir(env: Environment | None = None) -> str | None:
    """`$TAO_HOOK_STATE_DIR`: the folder of the Claude Code hook's markers."""
    return _get("TAO_HOOK_STATE_DIR", env)


def hook_log(env: Environment | None = None) -> str | None:
    """`$TAO_HOOK_LOG`: the file the Claude Code hook reports each event's outcome to (none: it stays silent)."""
    return _get("TAO_HOOK_LOG", env)


def traces(env: Environment | None = None) -> str | None:
    """`$TAO_TRACES`: the folder of the trace files."""
    return _get("TAO_TRACES", env)
