"""The SDK's errors. The SDK fails open: these are raised only when there is no way to keep the agent running.

TaoError
├── NoNodeAvailable   there is no node to route a call to: the coordinator cannot place it, and no fallback is known
│   └── AuthenticationFailed   … because the coordinator refused the API token (401)
└── ConfigurationError   a setting is missing or malformed (names it)
"""

from __future__ import annotations


class TaoError(Exception):
    """Base class of the SDK's errors."""


class NoNodeAvailable(TaoError):
    """The coordinator cannot place the call (unreachable, or no node of its fleet is healthy) and neither a fallback
    node list nor a previously used node is known. The message names the cause."""


class AuthenticationFailed(NoNodeAvailable):
    """The coordinator answered 401 to the API token (wrong or missing: `token=` or `$TAO_TOKEN`), and no fallback
    node is known."""


class ConfigurationError(TaoError, ValueError):
    """A session was configured with a missing or malformed value."""
