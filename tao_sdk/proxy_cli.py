"""`tao proxy`: run the local routing proxy (see `proxy.py`)."""

from __future__ import annotations

import argparse
import logging
import sys

from . import environment
from .errors import ConfigurationError
from .listening import cannot_listen, listen


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--coordinator",
        help="coordinator URL, or its replicas' URLs comma-separated (or $TAO_COORDINATOR); none: route on our own",
    )
    parser.add_argument("--token", help="the coordinator's API token (or $TAO_TOKEN)")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (127.0.0.1)")
    parser.add_argument("--port", type=int, default=8787, help="port to listen on (8787)")
    parser.add_argument("--nodes", help="comma-separated node URLs for fail-open routing (or $TAO_NODES)")
    parser.add_argument("--api-key", help="bearer token the nodes expect (vLLM --api-key), if any")
    parser.add_argument("--idle-close-s", type=float, default=900.0, help="close sessions idle this long (900)")
    parser.add_argument(
        "--max-queue-wait-s",
        type=float,
        help="answer a model call 429 with Retry-After when the coordinator estimates its wait for a place above "
        "this many seconds; the session keeps its place (default: calls wait)",
    )
    parser.add_argument(
        "--tool-log",
        metavar="FILE",
        help="append every tool start and end seen on the wire or reported by a hook to FILE, one JSON line each "
        "(to compare the two paths in one run)",
    )


def run(args: argparse.Namespace) -> int:
    from aiohttp import web

    from .proxy import ProxyConfig, RoutingProxy
    from .replicas import coordinator_urls

    try:
        coordinator = coordinator_urls(args.coordinator or environment.coordinator())
    except ConfigurationError as error:
        print(f"tao proxy: --{error}", file=sys.stderr)
        return 2
    if args.max_queue_wait_s is not None and not args.max_queue_wait_s >= 0:
        print("tao proxy: --max-queue-wait-s: a number of seconds, 0 or more", file=sys.stderr)
        return 2
    listed = environment.nodes() if args.nodes is None else args.nodes.split(",")
    fallback = tuple(url.strip().rstrip("/") for url in listed if url.strip())
    if not coordinator and not fallback:
        print("tao proxy: give --coordinator, or --nodes to route without one", file=sys.stderr)
        return 2
    try:
        proxy = RoutingProxy(
            ProxyConfig(
                coordinator=coordinator or None,
                token=args.token or environment.token(),
                fallback_nodes=fallback,
                idle_close_s=args.idle_close_s,
                api_key=args.api_key,
                max_queue_wait_s=args.max_queue_wait_s,
                tool_log=args.tool_log,
            )
        )
    except ConfigurationError as error:
        print(f"tao proxy: {error}", file=sys.stderr)
        return 2
    try:
        sock = listen(args.host, args.port)
    except OSError as error:
        print(cannot_listen("tao proxy", args.host, args.port, error), file=sys.stderr)
        return 1
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    print(f"tao proxy on http://{args.host}:{args.port} (OpenAI base URL: http://{args.host}:{args.port}/v1)")
    web.run_app(proxy.app(), sock=sock, print=None)
    return 0
