"""TAO coordinator: the scheduling core, its live driver (aiohttp), the simulator and the fake vLLM server."""

__version__ = "0.1.0"
