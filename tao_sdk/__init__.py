"""TAO SDK: route an agent's OpenAI/Anthropic calls to the node the TAO coordinator assigned, and report its tool
calls with their duration hints. Fails open: if the coordinator is down, the agent keeps running.

    import tao_sdk
    with tao_sdk.session(coordinator="http://127.0.0.1:8700", token="…") as s:
        client = s.openai()
        ...

The `tao` command line lives in `tao_sdk.cli`.
"""

from .errors import ConfigurationError, NoNodeAvailable, TaoError
from .hints import CommandHints, command_hints
from .protocol import AgentContext
from .session import Session, ToolCall, session

__version__ = "0.1.0"

__all__ = [
    "AgentContext",
    "CommandHints",
    "ConfigurationError",
    "NoNodeAvailable",
    "Session",
    "TaoError",
    "ToolCall",
    "command_hints",
    "session",
]
