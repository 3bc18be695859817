"""While a model call waits for a place, the session shows where it stands (`tao_sdk/queue_state.py`): the latest
waiting answer as `Session.queue` and through `on_queue`, the first one on the grant; a bound on the estimated wait
stops the wait without giving the place up."""

import httpx2
import pytest

from tao_sdk.queue_state import LongQueue, QueueState
from tao_sdk.router import AsyncRouter

from .test_router_unit import NODES, REGISTERED, Coordinator, admitted, config, sync_router


def waiting(position: int, wait_s: float | None = None) -> tuple[int, object]:
    body: dict[str, object] = {"status": "waiting", "queue_position": position}
    if wait_s is not None:
        body["estimated_wait_s"] = wait_s
    return 202, body


def test_each_waiting_answer_is_told_and_the_grant_keeps_the_first():
    told: list[QueueState] = []
    coordinator = Coordinator(sessions=[REGISTERED], acquire=[waiting(3), waiting(2, 8.0), waiting(1, 4.0), admitted()])
    router = sync_router(coordinator, on_queue=told.append)
    grant = router.acquire(10)
    assert [(q.position, q.estimated_wait_s) for q in told] == [(3, None), (2, 8.0), (1, 4.0)]
    assert grant.queued is not None and (grant.queued.position, grant.queued.estimated_wait_s) == (3, None)
    assert router.state.queue is None  # no call waits any more


def test_a_call_that_did_not_wait_has_no_queue_and_an_older_coordinator_says_no_position():
    router = sync_router(Coordinator(sessions=[REGISTERED], acquire=[admitted()]))
    assert router.acquire(10).queued is None
    told: list[QueueState] = []
    older = sync_router(
        Coordinator(sessions=[REGISTERED], acquire=[(202, {"status": "waiting"}), admitted()]), on_queue=told.append
    )
    older.acquire(10)
    assert [(q.position, q.estimated_wait_s) for q in told] == [(None, None)]


def test_a_callback_that_raises_changes_nothing():
    def broken(queue: QueueState) -> None:
        raise RuntimeError("boom")

    coordinator = Coordinator(sessions=[REGISTERED], acquire=[waiting(1, 2.0), admitted()])
    assert sync_router(coordinator, on_queue=broken).acquire(10).node == "n0"


async def test_a_bound_on_the_estimate_stops_the_wait_and_the_next_acquire_takes_the_place_up():
    coordinator = Coordinator(sessions=[REGISTERED], acquire=[waiting(2), waiting(2, 90.0), admitted()])
    router = AsyncRouter(config("http://127.0.0.1:1"), transport=httpx2.MockTransport(coordinator))
    too_long = lambda queue: (queue.estimated_wait_s or 0) > 60  # noqa: E731
    with pytest.raises(LongQueue) as stopped:
        await router.acquire(10, give_up=too_long)
    assert (stopped.value.queue.position, stopped.value.queue.estimated_wait_s) == (2, 90.0)
    assert coordinator.verbs() == ["sessions", "acquire", "acquire"]  # no close: the session keeps its place
    assert router.state.queue is None
    grant = await router.acquire(10, give_up=too_long)
    assert (grant.node, grant.node_url) == ("n0", NODES[0])
    await router.close()
