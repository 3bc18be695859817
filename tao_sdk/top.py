"""`tao top`: a live terminal view of a coordinator's nodes and sessions, redrawn every second from its HTTP API
(`GET /v1/nodes`, `GET /v1/sessions`, a page at a time up to `SESSIONS_SHOWN`) with rich's `Live`.

Nodes: KV capacity and the share the coordinator counts as used, the sessions resident there and how many of them are
in an LLM call, the node's prefix-cache hit rate, and — when the coordinator reports them — its utilisation target
and CPU KV tier. Sessions: id, harness, phase, node, the tool running (with its predicted remaining time when the
coordinator's session timeline, `GET /v1/sessions/{id}`, gives one) and context tokens. Fields the coordinator does
not send show as "–".

Past `SESSIONS_SHOWN` live sessions the view reads no more pages: the header says how many there are in all (the
pages' `total`) and how many are shown.

`q` or Ctrl-C quits. An unreachable coordinator or a refused token ends the command at once with status 1 and a
message saying which; once running, a failed refresh is shown on screen and retried.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import select
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx2
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from . import environment
from .errors import ConfigurationError
from .replicas import coordinator_urls


class TopError(Exception):
    """The coordinator could not be read; the message says why and what to check."""


@dataclass(frozen=True)
class FleetView:
    nodes: list[dict[str, Any]]
    sessions: list[dict[str, Any]]
    taken_at: float
    total: int | None = None
    """Live sessions in all, as the coordinator counted them (None: it did not say); more than `sessions` when
    not every page was read."""


SESSIONS_SHOWN = 5000
"""Sessions read each refresh at most (`PAGE` at a time)."""
PAGE = 1000


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--coordinator", help="coordinator URL, or its replicas' URLs comma-separated (or $TAO_COORDINATOR)"
    )
    parser.add_argument("--token", help="the coordinator's API token (or $TAO_TOKEN)")
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between refreshes (1)")
    parser.add_argument("--once", action="store_true", help="print one view and exit (for scripts and logs)")


def fetch_any(client: httpx2.Client, urls: tuple[str, ...]) -> tuple[FleetView, str]:
    """The snapshot of the first replica that answers (every replica answers reads), and its URL."""
    problem = TopError("no coordinator URL")
    for url in urls:
        try:
            return fetch(client, url), url
        except TopError as error:
            problem = error
    raise problem


def fetch(client: httpx2.Client, url: str) -> FleetView:
    """Both lists, or a `TopError` naming the cause: unreachable, token refused, or an unexpected answer."""
    nodes = _get(client, url, "/v1/nodes").get("nodes", [])
    sessions: list[dict[str, Any]] = []
    params: dict[str, Any] = {"limit": PAGE}
    while True:
        page = _get(client, url, "/v1/sessions", params)
        sessions += page.get("sessions", [])
        total = page.get("total")
        cursor = page.get("next_cursor")  # a coordinator from before pagination sends none: its one page is all
        if not cursor or len(sessions) >= SESSIONS_SHOWN:
            break
        params = {"limit": min(PAGE, SESSIONS_SHOWN - len(sessions)), "cursor": cursor}
    now = time.time()
    for session in [s for s in sessions if s.get("phase") == "in_tool"][:TIMELINES]:
        session["tools"] = _running_tools(client, url, session["session_id"], now)
    return FleetView(nodes, sessions, now, total if isinstance(total, int) else None)


def _get(client: httpx2.Client, url: str, path: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    try:
        response = client.get(url + path, params=params)
    except httpx2.HTTPError as error:
        raise TopError(f"cannot reach the coordinator at {url} ({type(error).__name__}: {error})") from None
    if response.status_code in (401, 403):
        raise TopError(
            f"the coordinator at {url} refused the token ({response.status_code}); "
            "give the one in its config with --token or $TAO_TOKEN"
        )
    if response.status_code != 200:
        raise TopError(f"GET {url}{path} answered {response.status_code}: {response.text[:200]}")
    try:
        document = response.json()
    except ValueError:
        raise TopError(f"GET {url}{path} did not answer JSON; is {url} a TAO coordinator?") from None
    if not isinstance(document, dict):
        raise TopError(f"GET {url}{path} did not answer a JSON object; is {url} a TAO coordinator?")
    return document


TIMELINES = 50
"""Sessions in a tool whose timeline (`GET /v1/sessions/{id}`) is read each refresh, for the tools' predictions."""


def _running_tools(client: httpx2.Client, url: str, session_id: str, now: float) -> list[dict[str, Any]]:
    """The session's running tools with the coordinator's predicted time left (`started_at + predicted_s − now`,
    0 when overdue), or none when the coordinator has no timeline to give."""
    try:
        response = client.get(f"{url}/v1/sessions/{session_id}")
        tools = response.json().get("tools", []) if response.status_code == 200 else []
    except (httpx2.HTTPError, ValueError, AttributeError):
        return []
    return [
        {"tool": t["tool"], "predicted_remaining_s": max(0.0, t["started_at"] + t["predicted_s"] - now)}
        for t in tools
        if t.get("ended_at") is None and "started_at" in t and "predicted_s" in t
    ]


def _tokens(value: Any) -> str:
    if not isinstance(value, int | float):
        return "–"
    return f"{value / 1e6:.2f}M" if value >= 1e6 else f"{value / 1e3:.0f}k" if value >= 1e3 else f"{value:.0f}"


def _share(value: Any) -> str:
    return f"{value:.0%}" if isinstance(value, int | float) else "–"


def _tool(session: dict[str, Any]) -> str:
    """The running tool(s); `tools` entries with `predicted_remaining_s` when the coordinator sends them."""
    detailed = session.get("tools")
    if isinstance(detailed, list) and detailed:
        parts = []
        for tool in detailed:
            remaining = tool.get("predicted_remaining_s")
            parts.append(f"{tool.get('tool', '?')} ({remaining:.1f} s left)" if remaining is not None else tool["tool"])
        return ", ".join(parts)
    return ", ".join(session.get("running_tools") or []) or "–"


def render(snapshot: FleetView, url: str, problem: str | None = None) -> Group:
    sessions = snapshot.sessions
    phases: dict[str, int] = {}
    for session in sessions:
        phases[session["phase"]] = phases.get(session["phase"], 0) + 1
    counts = ", ".join(f"{count} {phase.replace('_', ' ')}" for phase, count in sorted(phases.items())) or "none"
    total = snapshot.total if snapshot.total is not None else len(sessions)
    shown = (
        f"{total} sessions ({counts})"
        if total <= len(sessions)
        else f"{total} sessions, {len(sessions)} shown ({counts})"
    )
    header = Text.assemble(
        ("tao top", "bold"),
        f"  {url}  {time.strftime('%H:%M:%S', time.localtime(snapshot.taken_at))}  ",
        f"{len(snapshot.nodes)} nodes, {shown}  ",
        ("q quits", "dim"),
    )
    nodes = Table(title="nodes", title_justify="left")
    for column in ("node", "healthy", "capacity", "used", "resident", "in LLM", "hit rate", "target", "CPU tier"):
        nodes.add_column(column, justify="left" if column == "node" else "right")
    for node in snapshot.nodes:
        here = [s for s in sessions if s.get("node") == node["name"]]
        capacity, used = node.get("capacity_tokens", 0), node.get("used_tokens", 0)
        nodes.add_row(
            node["name"],
            "yes" if node.get("healthy") else Text("no", style="red"),
            _tokens(capacity),
            f"{_tokens(used)} ({used / capacity:.0%})" if capacity else _tokens(used),
            str(node.get("sessions", len(here))),
            str(sum(s["phase"] == "in_llm" for s in here)),
            _share(node.get("prefix_hit_rate")),
            _share(node.get("target_utilisation", node.get("target_utilization"))),
            _tokens(node.get("cpu_tier_tokens")),
        )
    table = Table(title=f"sessions ({phases.get('waiting', 0)} waiting)", title_justify="left")
    for column in ("session", "harness", "phase", "node", "tool", "context"):
        table.add_column(column, justify="right" if column == "context" else "left")
    for session in sorted(sessions, key=lambda s: (s.get("node") or "~", s["session_id"])):
        table.add_row(
            session["session_id"],
            session.get("harness") or "–",
            session["phase"].replace("_", " "),
            session.get("node") or "–",
            _tool(session),
            _tokens(session.get("context_tokens")),
        )
    parts: list[Any] = [header]
    if problem:
        parts.append(Text(f"refresh failed, retrying: {problem}", style="bold red"))
    return Group(*parts, nodes, table)


@contextlib.contextmanager
def _keys() -> Iterator[bool]:
    """Standard input in cbreak mode (keys arrive unbuffered, unechoed) while inside; yields whether it is a TTY."""
    if not sys.stdin.isatty():
        yield False
        return
    import termios
    import tty

    saved = termios.tcgetattr(sys.stdin)
    try:
        tty.setcbreak(sys.stdin)
        yield True
    finally:
        termios.tcsetattr(sys.stdin, termios.TCSADRAIN, saved)


def _quit_pressed(wait_s: float, keyboard: bool) -> bool:
    """Waits up to `wait_s` for a key; true when it is q."""
    if not keyboard:
        time.sleep(wait_s)
        return False
    deadline = time.monotonic() + wait_s
    while (left := deadline - time.monotonic()) > 0:
        ready, _, _ = select.select([sys.stdin], [], [], left)
        if ready and os.read(sys.stdin.fileno(), 32).lower().startswith(b"q"):
            return True
    return False


def run(args: argparse.Namespace) -> int:
    given = args.coordinator or environment.coordinator() or ""
    try:
        urls = coordinator_urls(given)
    except ConfigurationError:
        urls = ()
    if not urls:
        print(
            f"tao top: give the coordinator's http(s) URL with --coordinator or $TAO_COORDINATOR (got {given!r})",
            file=sys.stderr,
        )
        return 2
    if args.interval <= 0:
        print("tao top: --interval must be more than 0 seconds", file=sys.stderr)
        return 2
    token = args.token or environment.token()
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    with httpx2.Client(headers=headers, timeout=5.0) as client:
        try:
            snapshot, url = fetch_any(client, urls)
        except TopError as error:
            print(f"tao top: {error}", file=sys.stderr)
            return 1
        console = Console()
        if args.once:
            console.print(render(snapshot, url))
            return 0
        problem: str | None = None
        with _keys() as keyboard, Live(render(snapshot, url), console=console, screen=True, auto_refresh=False) as live:
            try:
                while not _quit_pressed(args.interval, keyboard):
                    try:
                        (snapshot, url), problem = fetch_any(client, (url, *(u for u in urls if u != url))), None
                    except TopError as error:
                        problem = str(error)
                    live.update(render(snapshot, url, problem), refresh=True)
            except KeyboardInterrupt:
                pass
    return 0
