"""The live coordinator: an aiohttp service around the scheduling core (`tao coordinator`)."""
