"""The pure scheduling core: sessions and their state machine, signals, the lexicographic value, the solvers, the
planner, the policies, and `Coordinator.on_event(event, now)` that the live service and the simulator both drive.

Nothing under this package imports asyncio, aiohttp, httpx, zmq or a clock (a test enforces it): time comes in as
`now`, randomness as a seeded generator.
"""
