"""The SDK's errors. The SDK fails open: these are raised only when there is no way to keep the agent running.

TaoError
├── NoNodeAvailable   the coordinator is unreachable and no fallback node is known
└── ConfigurationError   a setting is missing or malformed (names it)
"""

from __future__ import annotations


class TaoError(Exception):
    """Base class of the SDK's errors."""


class NoNodeAvailable(TaoError):
    """The coordinator cannot be reached and neither a fallback node list nor a previously used node is known."""


class ConfigurationError(TaoError, ValueError):
    """A session was configured with a missing or malformed value."""
