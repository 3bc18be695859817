"""A place granted as an acquire's wait runs out is handed to that acquire, not dropped (`web/grants.py`): the
session then holds its place and its call is routed, so an answer of "still waiting" would leave its client asking
about a wait that is over."""

from __future__ import annotations

import asyncio

from tao_coordinator.web.grants import Grants


async def test_a_grant_made_as_the_wait_runs_out_is_returned():
    grants = Grants()
    asyncio.get_running_loop().call_soon(grants.grant, "s", "node-0", False)
    granted = await grants.wait("s", 0)  # the grant lands while the timed-out wait is being wound up
    assert granted is not None and granted.node == "node-0"
    assert grants.claim("s") is None  # handed out once


async def test_a_wait_that_runs_out_without_a_grant_keeps_a_later_one_for_the_next_acquire():
    grants = Grants()
    assert await grants.wait("s", 0.01) is None
    grants.grant("s", "node-0", False)
    claimed = grants.claim("s")
    assert claimed is not None and claimed.node == "node-0"
