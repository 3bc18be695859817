"""Posting events to `tao proxy`'s hook relay (`POST /tao/v1/events`) from short-lived hook processes.

The proxy owns every session's coordinator token, so a hook sends bare events (`tao_sdk.protocol.BatchedEvent`
without `session_token`) and needs no secret. Only the standard library is used: a hook process must start fast.

Invariants: `post_events` never raises and never waits longer than its timeout; it ignores `HTTP(S)_PROXY` (the
relay is on loopback, and hook payloads must not leave the machine through a forward proxy).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from typing import Any

from tao_sdk import environment

DEFAULT_PROXY_URL = "http://127.0.0.1:8787"
RELAY_PATH = "/tao/v1/events"
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def proxy_url(env: Mapping[str, str] | None = None) -> str:
    """The proxy's root URL: `$TAO_PROXY_URL`, else the proxy's default address."""
    return (environment.proxy_url(env) or DEFAULT_PROXY_URL).rstrip("/")


def post_events(url: str, events: Sequence[Mapping[str, Any]], timeout_s: float) -> bool:
    """Send one batch to the relay at `url` (the proxy's root); True when it answered 2xx."""
    body = json.dumps({"events": list(events)}).encode()
    request = urllib.request.Request(
        url.rstrip("/") + RELAY_PATH, data=body, method="POST", headers={"Content-Type": "application/json"}
    )
    try:
        with _DIRECT.open(request, timeout=timeout_s) as response:
            response.read()
            return 200 <= int(response.status) < 300
    except (OSError, ValueError, urllib.error.URLError):
        return False
