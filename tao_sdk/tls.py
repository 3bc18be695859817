"""One TLS context for every HTTP client the SDK makes.

Building a verifying context loads the system's CA bundle, about 50 ms; a process that opens many sessions (the
proxy, an agent farm) would block its event loop that long per session and miss its own short timeouts. The
context is built once, on first use, and shared (contexts are safe to share between connections and threads).
"""

from __future__ import annotations

import ssl
from functools import cache


@cache
def shared_ssl_context() -> ssl.SSLContext:
    return ssl.create_default_context()
