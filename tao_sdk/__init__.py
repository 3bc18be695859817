"""TAO SDK: route an agent's OpenAI/Anthropic calls to the node the TAO coordinator assigned, and report its tool
calls with their duration hints. Fails open: if the coordinator is down, the agent keeps running.

    import tao_sdk
    with tao_sdk.session(coordinator="http://127.0.0.1:8700", token="…") as s:
        client = s.openai()
        ...

The `tao` command line lives in `tao_sdk.cli`. Names that need pydantic or httpx2 are imported on first use, so a
hook process that only parses commands (`tao_sdk.hints`) starts fast.
"""

from typing import TYPE_CHECKING, Any

from .errors import AuthenticationFailed, ConfigurationError, NoNodeAvailable, TaoError
from .hints import CommandHints, command_hints

if TYPE_CHECKING:
    from .protocol import AgentContext
    from .sessions import Session, ToolCall, session

__version__ = "0.1.0"

_LAZY = {
    "AgentContext": "protocol",
    "Session": "sessions",
    "ToolCall": "sessions",
    "session": "sessions",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'tao_sdk' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


__all__ = [
    "AgentContext",
    "AuthenticationFailed",
    "CommandHints",
    "ConfigurationError",
    "NoNodeAvailable",
    "Session",
    "TaoError",
    "ToolCall",
    "command_hints",
    "session",
]
