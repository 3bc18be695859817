"""TAO SDK: route an agent's OpenAI/Anthropic calls to the node the TAO coordinator assigned, and report its tool
calls. The `tao` command line lives in `tao_sdk.cli`."""

__version__ = "0.1.0"
