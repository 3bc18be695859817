"""`GET /v1/sessions` a page at a time (fault 7: 20,000 sessions were one 2.8 MB body): on a real coordinator, on a
standby replica reading the leader's sessions from a real Redis, and through `tao top`."""

from __future__ import annotations

import time

import httpx2
import pytest
from rich.console import Console

from tao_coordinator.fakevllm import FakeNodeConfig, ThreadedFleet
from tao_coordinator.local_coordinator import free_port
from tao_coordinator.web.listing import DEFAULT_LIMIT, MAX_LIMIT
from tao_sdk import top
from tests.ha.conftest import local_redis

from .conftest import API_TOKEN, running_coordinator


async def test_pages_list_every_live_session_once_in_id_order(tmp_path, fleet):
    async with running_coordinator(tmp_path, fleet) as c:
        ids = sorted([(await c.register())[0] for _ in range(DEFAULT_LIMIT + 5)])
        status, first = await c.call("GET", "/v1/sessions", token=API_TOKEN)
        assert status == 200 and first["total"] == len(ids)
        assert [s["session_id"] for s in first["sessions"]] == ids[:DEFAULT_LIMIT]
        assert first["next_cursor"] == ids[DEFAULT_LIMIT - 1]
        # sessions that come and go between pages: the ones live throughout are listed exactly once
        seen, cursor, late = [], None, None
        while True:
            query = f"?limit=7&cursor={cursor}" if cursor else "?limit=7"
            status, page = await c.call("GET", "/v1/sessions" + query, token=API_TOKEN)
            assert status == 200 and len(page["sessions"]) <= 7
            seen += [s["session_id"] for s in page["sessions"]]
            if late is None:
                late, _ = await c.register(session_id="zzz-registered-meanwhile")
                gone = ids[-1]
                assert (await c.call("DELETE", f"/v1/sessions/{gone}", token=_token_of(c, gone)))[0] == 204
            cursor = page["next_cursor"]
            if cursor is None:
                break
        assert seen == sorted(seen) and len(seen) == len(set(seen))
        assert set(ids[:-1]) <= set(seen) and late in seen and ids[-1] not in seen


def _token_of(c, session_id: str) -> str:
    return c.service.session_tokens[session_id]


@pytest.mark.parametrize(
    ("query", "field"),
    [("?limit=0", "limit"), (f"?limit={MAX_LIMIT + 1}", "limit"), ("?limit=ten", "limit"), ("?cursor=a/b", "cursor")],
)
async def test_a_bad_limit_or_cursor_is_a_422_naming_it(tmp_path, fleet, query, field):
    async with running_coordinator(tmp_path, fleet) as c:
        status, body = await c.call("GET", "/v1/sessions" + query, token=API_TOKEN)
        assert status == 422 and body["field"] == field


async def test_the_openapi_description_states_the_page(tmp_path, fleet):
    async with running_coordinator(tmp_path, fleet) as c:
        _, spec = await c.call("GET", "/openapi.json")
        listing = spec["paths"]["/v1/sessions"]["get"]
        assert [p["name"] for p in listing["parameters"]] == ["limit", "cursor"]
        assert listing["responses"]["200"]["content"]["application/json"]["schema"]["$ref"].endswith("SessionPage")
        assert "429" in spec["paths"]["/v1/sessions"]["post"]["responses"]


@pytest.fixture
def threaded_fleet():
    with ThreadedFleet(1, FakeNodeConfig(time_scale=50)) as running:
        yield running


def test_tao_top_reads_the_pages_and_says_how_many_it_shows(coordinator_factory, threaded_fleet, monkeypatch):
    coordinator = coordinator_factory(threaded_fleet.urls)
    headers = {"Authorization": f"Bearer {coordinator.token}"}
    for k in range(25):
        httpx2.post(coordinator.url + "/v1/sessions", json={"session_id": f"top-{k:02d}"}, headers=headers)
    monkeypatch.setattr(top, "PAGE", 10)
    with httpx2.Client(headers=headers) as client:
        snapshot = top.fetch(client, coordinator.url)
        assert [s["session_id"] for s in snapshot.sessions] == [f"top-{k:02d}" for k in range(25)]
        monkeypatch.setattr(top, "SESSIONS_SHOWN", 20)
        snapshot = top.fetch(client, coordinator.url)
        assert (len(snapshot.sessions), snapshot.total) == (20, 25)
    console = Console(width=200, record=True)
    console.print(top.render(snapshot, coordinator.url))
    assert "25 sessions, 20 shown" in console.export_text()


def test_a_standby_lists_the_leaders_sessions_from_redis_in_the_same_pages(
    coordinator_factory, threaded_fleet, tmp_path
):
    with local_redis(directory=tmp_path / "redis") as redis_server:
        replicas = []
        for _ in range(2):
            port = free_port()
            server = {"redis": redis_server.url, "advertise_url": f"http://127.0.0.1:{port}", "lease_s": 1.0}
            replicas.append(coordinator_factory(threaded_fleet.urls, port=port, server=server))
        leader = _leader(replicas)
        standby = next(r for r in replicas if r is not leader)
        headers = {"Authorization": f"Bearer {leader.token}"}
        for k in range(12):
            deadline = time.monotonic() + 10
            while (
                answer := httpx2.post(leader.url + "/v1/sessions", json={"session_id": f"ha-{k:02d}"}, headers=headers)
            ).status_code == 421:
                assert time.monotonic() < deadline, "the leader never served"  # until it has restored the stored state
                time.sleep(0.05)
            assert answer.status_code == 201
        pages = []
        for replica in (leader, standby):
            listed, cursor = [], None
            while True:
                params = {"limit": 5, **({"cursor": cursor} if cursor else {})}
                page = httpx2.get(replica.url + "/v1/sessions", params=params, headers=headers).json()
                listed.append([s["session_id"] for s in page["sessions"]])
                assert page["total"] == 12
                if (cursor := page["next_cursor"]) is None:
                    break
            pages.append(listed)
        assert pages[0] == pages[1] == [[f"ha-{k:02d}" for k in range(i, min(i + 5, 12))] for i in (0, 5, 10)]


def _leader(replicas):
    """The one replica that says it leads."""
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        roles = [httpx2.get(r.url + "/v1/leader").json()["role"] for r in replicas]
        if roles.count("leader") == 1:
            return replicas[roles.index("leader")]
        time.sleep(0.05)
    raise AssertionError("no single leader")
