"""The coordinator service end to end, against real fake-vLLM nodes on loopback."""

import asyncio
import socket

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tao_coordinator.core.events import LlmEnd
from tao_coordinator.core.model import EvidenceSource, Phase
from tao_coordinator.fakevllm import FakeFleet, FakeNodeConfig
from tao_coordinator.fakevllm.kv_publisher import KvEventsConfig
from tao_coordinator.web.cache_reports import CacheReports

from .conftest import API_TOKEN, PROMPT, eventually, running_coordinator


async def chat(base_url: str, session_id: str, text: str) -> dict:
    body = {
        "model": "Qwen/Qwen3-32B",
        "messages": [{"role": "user", "content": text}],
        "max_tokens": 8,
    }
    async with (
        aiohttp.ClientSession() as http,
        http.post(f"{base_url}/chat/completions", json=body, headers={"X-Session-ID": session_id}) as response,
    ):
        assert response.status == 200, await response.text()
        return await response.json()


async def test_a_session_registers_acquires_calls_and_reports(tmp_path, fleet):
    async with running_coordinator(tmp_path, fleet) as c:
        session, token = await c.register(context={"harness": "test", "shared_prefix_tokens": 100})
        status, grant = await c.call("POST", f"/v1/sessions/{session}/acquire", {}, token)
        assert status == 200 and grant["status"] == "admitted"
        assert grant["node_url"] in fleet.urls and grant["base_url"] == grant["node_url"] + "/v1"
        answer = await chat(grant["base_url"], session, "hello " * 50)
        usage = answer["usage"]
        end = {
            "lease_id": grant["lease_id"],
            "node": grant["node"],
            "prompt_tokens": usage["prompt_tokens"],
            "cached_tokens": 0,
            "completion_tokens": usage["completion_tokens"],
            "ttft_s": 0.01,
        }
        assert (await c.call("POST", f"/v1/sessions/{session}/llm_end", end, token))[0] == 204
        start = {"call_id": "t1", "tool": "bash", "hints": {"timeout_s": 120, "sleep_s": 2}}
        assert (await c.call("POST", f"/v1/sessions/{session}/tool_start", start, token))[0] == 204
        core_session = c.service.coordinator.session(session)
        assert core_session.phase is Phase.IN_TOOL and core_session.tools[0].hints.timeout_s == 120
        assert core_session.evidence[0].source is EvidenceSource.USAGE
        _, listed = await c.call("GET", "/v1/sessions", token=API_TOKEN)
        assert [(s["session_id"], s["phase"], s["running_tools"]) for s in listed["sessions"]] == [
            (session, "in_tool", ["bash"])
        ]
        assert (await c.call("POST", f"/v1/sessions/{session}/tool_end", {"call_id": "t1", "duration_s": 2.5}, token))[
            0
        ] == 204
        assert c.service.history.shared("bash").oldest_first() == [0.5]  # learned: beyond the 2 s sleep
        assert (await c.call("DELETE", f"/v1/sessions/{session}", token=token))[0] == 204
        assert (await c.call("POST", f"/v1/sessions/{session}/acquire", {}, token))[0] == 404


async def test_capacity_is_respected_and_a_freed_place_wakes_a_waiting_acquire(tmp_path, fleet):
    # 60,000 tokens per node at 0.9: one 30k session per node
    async with running_coordinator(tmp_path, fleet, capacity=60_000) as c:
        sessions = [await c.register() for _ in range(3)]
        grants = [await c.call("POST", f"/v1/sessions/{s}/acquire", {"wait_s": 0.2}, t) for s, t in sessions]
        assert [status for status, _ in grants] == [200, 200, 202]
        assert {grants[0][1]["node"], grants[1][1]["node"]} == {"node-0", "node-1"}
        waiting, waiting_token = sessions[2]
        pending = asyncio.create_task(c.call("POST", f"/v1/sessions/{waiting}/acquire", {"wait_s": 5}, waiting_token))
        await asyncio.sleep(0.1)
        assert not pending.done()
        first, first_token = sessions[0]
        end = {"node": grants[0][1]["node"], "prompt_tokens": PROMPT, "completion_tokens": 10}
        await c.call("POST", f"/v1/sessions/{first}/llm_end", end, first_token)
        await c.call("DELETE", f"/v1/sessions/{first}", token=first_token)
        status, grant = await asyncio.wait_for(pending, 2)
        assert status == 200 and grant["node"] == grants[0][1]["node"]


async def test_a_tool_start_keeps_or_frees_capacity_as_the_planner_decides(tmp_path, fleet):
    # credit halves every 50 ms: a long tool loses its place to a waiting session within about a second. The waiting
    # session is a little smaller than a (27,512 tokens against 30,020, still too large to share a node), so when
    # a's credit runs out before b's, readiness and footprint both keep a: the outcome does not hang on timing.
    core = {"credit_half_life_s": 0.05}
    async with running_coordinator(tmp_path, fleet, capacity=60_000, core=core) as c:
        (a, ta), (b, tb) = [await c.register() for _ in range(2)]
        w, tw = await c.register(expected=27_000)
        grant_a = (await c.call("POST", f"/v1/sessions/{a}/acquire", {}, ta))[1]
        grant_b = (await c.call("POST", f"/v1/sessions/{b}/acquire", {}, tb))[1]
        for session, token, grant in ((a, ta, grant_a), (b, tb, grant_b)):
            end = {"node": grant["node"], "prompt_tokens": PROMPT, "completion_tokens": 10}
            await c.call("POST", f"/v1/sessions/{session}/llm_end", end, token)
        short = {"call_id": "t", "tool": "grep", "hints": {"timeout_s": 0.5}}
        long = {"call_id": "t", "tool": "pytest", "hints": {"sleep_s": 300}}
        await c.call("POST", f"/v1/sessions/{a}/tool_start", short, ta)
        await c.call("POST", f"/v1/sessions/{b}/tool_start", long, tb)
        status, grant = await c.call("POST", f"/v1/sessions/{w}/acquire", {"wait_s": 5}, tw)
        assert status == 200 and grant["node"] == grant_b["node"]
        await asyncio.sleep(0.3)  # credit is gone everywhere now: nothing else may change
        await c.settled()
        state = c.service.coordinator
        assert (state.session(b).phase, state.session(b).node) == (Phase.IN_TOOL, None)
        assert (state.session(a).phase, state.session(a).node) == (Phase.IN_TOOL, grant_a["node"])
        assert state.session(w).node == grant_b["node"]
        assert (await c.metric("tao_interruptions_total")) == 1  # b only: a was never moved


async def test_a_node_killed_mid_run_is_marked_unhealthy_and_its_sessions_go_elsewhere(tmp_path, fleet):
    async with running_coordinator(tmp_path, fleet) as c:
        session, token = await c.register()
        grant = (await c.call("POST", f"/v1/sessions/{session}/acquire", {}, token))[1]
        end = {"node": grant["node"], "prompt_tokens": PROMPT, "completion_tokens": 10}
        await c.call("POST", f"/v1/sessions/{session}/llm_end", end, token)
        dead = int(grant["node"][-1])
        await fleet.nodes[dead].stop()
        await eventually(lambda: not c.service.coordinator.nodes[grant["node"]].healthy)
        _, nodes = await c.call("GET", "/v1/nodes", token=API_TOKEN)
        assert {n["name"]: n["healthy"] for n in nodes["nodes"]}[grant["node"]] is False
        status, again = await c.call("POST", f"/v1/sessions/{session}/acquire", {"wait_s": 5}, token)
        assert status == 200 and again["node"] != grant["node"]
        newcomer, newcomer_token = await c.register()
        status, placed = await c.call("POST", f"/v1/sessions/{newcomer}/acquire", {}, newcomer_token)
        assert placed["node"] != grant["node"]


async def test_a_vanished_client_loses_its_lease(tmp_path, fleet):
    async with running_coordinator(tmp_path, fleet, core={"lease_ttl_s": 0.3}) as c:
        session, token = await c.register()
        await c.call("POST", f"/v1/sessions/{session}/acquire", {}, token)
        await eventually(lambda: session not in c.service.coordinator.sessions, timeout=3)
        assert (await c.call("POST", f"/v1/sessions/{session}/heartbeat", None, token))[0] == 404


async def test_heartbeats_keep_a_session_alive(tmp_path, fleet):
    async with running_coordinator(tmp_path, fleet, core={"lease_ttl_s": 0.4}) as c:
        session, token = await c.register()
        for _ in range(6):
            await asyncio.sleep(0.15)
            assert (await c.call("POST", f"/v1/sessions/{session}/heartbeat", None, token))[0] == 204
        assert session in c.service.coordinator.sessions


async def test_a_restart_keeps_the_learned_tool_history(tmp_path, fleet):
    async with running_coordinator(tmp_path, fleet) as c:
        session, token = await c.register()
        for k, duration in enumerate((1.5, 2.5, 3.5)):
            await c.call("POST", f"/v1/sessions/{session}/tool_start", {"call_id": f"c{k}", "tool": "make"}, token)
            await c.call(
                "POST", f"/v1/sessions/{session}/tool_end", {"call_id": f"c{k}", "duration_s": duration}, token
            )
    async with running_coordinator(tmp_path, fleet) as c:
        assert c.service.history.shared("make").oldest_first() == [1.5, 2.5, 3.5]
        session, token = await c.register()
        await c.call("POST", f"/v1/sessions/{session}/tool_start", {"call_id": "x", "tool": "make"}, token)
        running = c.service.coordinator.session(session).tools[0]
        assert running.predicted_end - running.started_at < c.service.config.core.default_tool_duration_s


async def test_kv_events_give_exact_per_session_credit(tmp_path):
    async with (
        FakeFleet(1, FakeNodeConfig(time_scale=50)) as fleet,
        running_coordinator(tmp_path, fleet, kv_events=True) as c,
    ):
        session, token = await c.register()
        grant = (await c.call("POST", f"/v1/sessions/{session}/acquire", {}, token))[1]
        await chat(grant["base_url"], session, "lorem ipsum " * 400)

        def kv_evidence():
            evidence = c.service.coordinator.session(session).evidence
            return [e for e in evidence if e.source is EvidenceSource.KV_EVENTS and e.tokens > 0]

        await eventually(lambda: bool(kv_evidence()))
        assert kv_evidence()[0].node == "node-0" and kv_evidence()[0].tokens % 16 == 0


async def test_credit_from_kv_events_decays_so_a_long_tool_still_gives_up_its_place(tmp_path, fleet):
    # test_a_tool_start_keeps_or_frees_capacity_as_the_planner_decides with KV events on: a and b really call their
    # nodes, whose events keep telling the coordinator the caches are resident. Credit still decays from each call's
    # end (half-life 50 ms), so b's long tool loses its place to w as it does without KV events; counted undecayed,
    # the resident caches would outrank w for as long as vLLM keeps them and w would wait.
    core = {"credit_half_life_s": 0.05}
    async with running_coordinator(tmp_path, fleet, capacity=60_000, kv_events=True, core=core) as c:
        (a, ta), (b, tb) = [await c.register() for _ in range(2)]
        w, tw = await c.register(expected=27_000)
        grants = {}
        for session, token in ((a, ta), (b, tb)):
            grants[session] = (await c.call("POST", f"/v1/sessions/{session}/acquire", {}, token))[1]
            await chat(grants[session]["base_url"], session, "lorem ipsum " * 1500)
            end = {"node": grants[session]["node"], "prompt_tokens": PROMPT, "completion_tokens": 10}
            await c.call("POST", f"/v1/sessions/{session}/llm_end", end, token)

        def resident(session):
            evidence = c.service.coordinator.session(session).evidence
            return any(e.source is EvidenceSource.KV_EVENTS and e.tokens >= 1024 for e in evidence)

        await eventually(lambda: resident(a) and resident(b))
        short = {"call_id": "t", "tool": "grep", "hints": {"timeout_s": 0.5}}
        long = {"call_id": "t", "tool": "pytest", "hints": {"sleep_s": 300}}
        await c.call("POST", f"/v1/sessions/{a}/tool_start", short, ta)
        await c.call("POST", f"/v1/sessions/{b}/tool_start", long, tb)
        status, grant = await c.call("POST", f"/v1/sessions/{w}/acquire", {"wait_s": 5}, tw)
        assert status == 200 and grant["node"] == grants[b]["node"]
        assert resident(b)  # its cache was still there: the decay, not an eviction, gave its place away
        await c.settled()
        state = c.service.coordinator
        assert (state.session(b).phase, state.session(b).node) == (Phase.IN_TOOL, None)
        assert state.session(a).node == grants[a]["node"]


async def test_metrics_are_prometheus_text_and_move(tmp_path, fleet):
    async with running_coordinator(tmp_path, fleet) as c:
        session, token = await c.register()
        grant = (await c.call("POST", f"/v1/sessions/{session}/acquire", {}, token))[1]
        await c.settled()
        async with c.http.get(c.url + "/metrics") as response:
            assert response.headers["Content-Type"].startswith("text/plain")
            text = await response.text()
        families = {family.name: family for family in text_string_to_metric_families(text)}
        sessions = {s.labels["phase"]: s.value for s in families["tao_sessions"].samples}
        assert sessions["in_llm"] == 1
        assert next(s.value for s in families["tao_admissions"].samples if s.name == "tao_admissions_total") == 1
        assert {s.labels["node"] for s in families["tao_node_capacity_tokens"].samples} == {"node-0", "node-1"}
        assert await c.metric("tao_node_used_tokens", node=grant["node"]) > 0
        assert await c.metric("tao_acquire_wait_seconds_count") == 1
        assert await c.metric("tao_plans_total", outcome="applied") >= 1
        assert await c.metric("tao_plan_seconds_count") == c.service.coordinator.plan_stats.started
        assert await c.metric("tao_plans_uncertified_total") == 0
        assert await c.metric("tao_readiness_horizon_seconds") == c.service.coordinator.settings.readiness_horizon_s
        assert await c.metric("tao_forecast_levels_evicted_total") == 0
        end = {"node": grant["node"], "prompt_tokens": PROMPT, "completion_tokens": 10}
        await c.call("POST", f"/v1/sessions/{session}/llm_end", end, token)
        await c.call("POST", f"/v1/sessions/{session}/tool_start", {"call_id": "t", "tool": "ls"}, token)
        await c.call("POST", f"/v1/sessions/{session}/tool_end", {"call_id": "t", "duration_s": 1.0}, token)
        assert await c.metric("tao_forecast_levels") == 2  # "ls" and every tool
        # no history yet: the prediction was the prior's median, 5 s, so 4 s off
        assert await c.metric("tao_estimator_abs_error_seconds_sum") == pytest.approx(4.0, abs=0.01)
        for name in ("tao_node_running_requests", "tao_node_waiting_requests", "tao_node_kv_usage"):
            assert await c.metric(name, node="node-0") == 0
        assert await c.metric("tao_node_preemptions_total", node="node-0") == 0
        # nothing observed that the half-life could be fitted from: the configured one
        assert await c.metric("tao_node_credit_half_life_seconds", node="node-0") == 10.0
        assert await c.metric("tao_node_retention_observations_total", node="node-0") == 0
        fitted = families.get("tao_node_credit_half_life_fitted_seconds")
        assert fitted is None or not fitted.samples  # no estimate yet (test_state_collector.py: once there is one)


async def test_scraped_load_reaches_the_core_and_the_metrics(tmp_path):
    # at real speed a 4,000-token answer streams for many seconds: the node reports it running all that time
    async with (
        FakeFleet(1, FakeNodeConfig(time_scale=1)) as fleet,
        running_coordinator(tmp_path, fleet, core={"lease_ttl_s": 60}) as c,
        aiohttp.ClientSession() as http,
    ):
        body = {"model": "Qwen/Qwen3-32B", "messages": [{"role": "user", "content": "go"}], "max_tokens": 4000}
        async with http.post(f"{fleet.urls[0]}/v1/chat/completions", json={**body, "stream": True}) as stream:
            await stream.content.readline()

            def busy() -> bool:
                node = c.service.coordinator.nodes["node-0"]
                return node.load.running == 1 and node.load.kv_usage > 0

            await eventually(busy)
            assert await c.metric("tao_node_running_requests", node="node-0") == 1
            assert await c.metric("tao_node_kv_usage", node="node-0") > 0


async def test_openapi_describes_the_session_routes(tmp_path, fleet):
    async with running_coordinator(tmp_path, fleet) as c:
        status, spec = await c.call("GET", "/openapi.json")
        assert status == 200 and spec["openapi"].startswith("3.")
        assert "/v1/sessions/{session_id}/acquire" in spec["paths"]
        assert "AcquireResponse" in spec["components"]["schemas"]


async def test_overlapping_calls_share_a_lease_and_every_llm_end_is_accepted(tmp_path, fleet):
    async with running_coordinator(tmp_path, fleet) as c:
        session, token = await c.register()
        first = (await c.call("POST", f"/v1/sessions/{session}/acquire", {}, token))[1]
        second = (await c.call("POST", f"/v1/sessions/{session}/acquire", {}, token))[1]  # a side call meanwhile
        assert second["node"] == first["node"] and second["lease_id"] == first["lease_id"]
        assert c.service.coordinator.session(session).llm_calls == 2
        for grant in (second, first):
            end = {"lease_id": grant["lease_id"], "node": grant["node"], "prompt_tokens": 100, "completion_tokens": 5}
            assert (await c.call("POST", f"/v1/sessions/{session}/llm_end", end, token))[0] == 204
        assert c.service.coordinator.session(session).phase is Phase.ADMITTED


async def test_a_node_whose_calls_never_report_cached_tokens_is_warned_about_once(tmp_path, fleet, caplog):
    # real vLLM without --enable-prompt-tokens-details: usage has no cached_tokens, so the SDK reports none
    async with running_coordinator(tmp_path, fleet) as c:
        c.service.cache_reports.silent_calls = 3
        sessions = [await c.register()]

        async def one_call(session, token, **usage):
            grant = (await c.call("POST", f"/v1/sessions/{session}/acquire", {}, token))[1]
            end = {"lease_id": grant["lease_id"], "node": grant["node"], "prompt_tokens": 100, **usage}
            assert (await c.call("POST", f"/v1/sessions/{session}/llm_end", end, token))[0] == 204
            return grant["node"]

        silent, silent_token = sessions[0]
        with caplog.at_level("WARNING", logger="tao.coordinator"):
            quiet_node = await one_call(silent, silent_token)
            for _ in range(4):
                await one_call(silent, silent_token)
        warnings = [r.getMessage() for r in caplog.records if "--enable-prompt-tokens-details" in r.getMessage()]
        assert len(warnings) == 1 and warnings[0].startswith(f"node {quiet_node}: 3 calls")
        assert c.service.cache_reports.warned == {quiet_node}


def test_a_node_that_reported_cached_tokens_once_is_never_warned_about():
    reports = CacheReports(silent_calls=2)
    reports.observe(LlmEnd("s", "a", prompt_tokens=100, cached_tokens=0))
    for _ in range(5):
        reports.observe(LlmEnd("s", "a", prompt_tokens=100))  # a client that could not read usage
        reports.observe(LlmEnd("s", "b", prompt_tokens=100, error="timeout"))  # failed calls say nothing
        reports.observe(LlmEnd("s", "b", prompt_tokens=0))
    assert reports.warned == set()
    reports.observe(LlmEnd("s", "b", prompt_tokens=100))
    reports.observe(LlmEnd("s", "b", prompt_tokens=100))
    assert reports.warned == {"b"}


def _consecutive_free_ports() -> int:
    for _ in range(50):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            base = probe.getsockname()[1]
        try:
            with socket.socket() as upper:
                upper.bind(("127.0.0.1", base + 1))
        except OSError:
            continue
        return base
    raise RuntimeError("no two consecutive free loopback ports")


async def test_a_node_with_two_dp_ranks_is_subscribed_on_port_plus_rank(tmp_path):
    # two fake servers stand for the two DP ranks of one vLLM node: rank r publishes on the base port + r
    base = _consecutive_free_ports()
    ranks = [
        FakeNodeConfig(time_scale=50, kv_events=KvEventsConfig(endpoint=f"tcp://127.0.0.1:{base + r}", topic="kv"))
        for r in range(2)
    ]
    async with FakeFleet(ranks) as fleet:
        node = {"name": "node-0", "url": fleet.nodes[0].url, "kv_events": f"tcp://127.0.0.1:{base}", "dp_size": 2}
        async with running_coordinator(tmp_path, fleet, nodes=[node]) as c:
            session, token = await c.register()
            await c.call("POST", f"/v1/sessions/{session}/acquire", {}, token)
            await chat(fleet.nodes[1].url + "/v1", session, "lorem ipsum " * 400)  # served by rank 1

            def kv_evidence():
                evidence = c.service.coordinator.session(session).evidence
                return [e for e in evidence if e.source is EvidenceSource.KV_EVENTS and e.tokens > 0]

            await eventually(lambda: bool(kv_evidence()))
            assert kv_evidence()[0].node == "node-0"
