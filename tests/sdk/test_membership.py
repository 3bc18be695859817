"""Nodes that join, drain and leave a running coordinator while SDK sessions use it (docs/coordinator.md, "Nodes at
run time"). Real processes throughout: fake vLLM nodes, a real coordinator on loopback, the SDK's own clients."""

import threading
import time

import httpx2
import pytest

import tao_sdk
from tao_coordinator.core.actions import Admit, Route, StartPlan
from tao_coordinator.core.events import NodeDrain, NodeUpdate
from tao_coordinator.core.model import Phase
from tao_coordinator.core.plan import PlanFinished
from tao_coordinator.fakevllm import FakeNodeConfig, ThreadedFleet
from tests.conftest import listen_to_feed

from .test_node_failover import ask, until

FAST = FakeNodeConfig(time_scale=50)


def operator(coordinator, method, path, body=None, token=None):
    headers = {"Authorization": f"Bearer {token or coordinator.token}"}
    return httpx2.request(method, coordinator.url + path, json=body, headers=headers, timeout=10)


def nodes(coordinator):
    return {node["name"]: node for node in operator(coordinator, "GET", "/v1/nodes").json()["nodes"]}


class Agents:
    """`count` SDK sessions in threads, each looping a model call and a short tool until stopped; failures kept."""

    def __init__(self, coordinator, count, tool_s=0.05):
        self.coordinator, self.tool_s = coordinator, tool_s
        self.failures: list[BaseException] = []
        self.calls = 0
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self._agent, args=(k,)) for k in range(count)]

    def _agent(self, k):
        try:
            with tao_sdk.session(self.coordinator.url, self.coordinator.token) as s:
                client = s.openai(max_retries=0)
                turn = 0
                while not self.stop.is_set():
                    ask(client, f"session {k} turn {turn}")
                    with self.lock:
                        self.calls += 1
                    with s.tool("bash", command=f"sleep {self.tool_s}"):
                        time.sleep(self.tool_s)
                    turn += 1
        except BaseException as error:
            self.failures.append(error)

    def __enter__(self):
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        for thread in self.threads:
            thread.join(60)


class Recorder:
    """Every event the coordinator feeds its core, with its actions and the sessions on `watched` just after."""

    def __init__(self, coordinator, watched):
        self.coordinator, self.watched = coordinator, watched
        self.rows = []
        listen_to_feed(coordinator.service, self._heard)

    def _heard(self, event, actions, error):
        core = self.coordinator.service.coordinator
        on_node = {s.id: s.phase for s in core.sessions.values() if s.node == self.watched}
        self.rows.append((time.monotonic(), event, actions or [], on_node))

    def since(self, event_type):
        start = next(k for k, row in enumerate(self.rows) if isinstance(row[1], event_type))
        return self.rows[start:]


@pytest.mark.parametrize("sessions", [32])
def test_a_node_drained_under_load_loses_no_call_admits_nothing_and_moves_its_idle_sessions_in_one_plan(
    coordinator_factory, sessions
):
    with ThreadedFleet(3, FAST, kv_events=False) as fleet:
        coordinator = coordinator_factory(fleet.urls)
        until(lambda: len(coordinator.service.coordinator.nodes) == 3)
        recorder = Recorder(coordinator, "node-0")
        with Agents(coordinator, sessions) as agents:
            until(lambda: agents.calls >= 3 * sessions, timeout=30)
            answer = operator(coordinator, "POST", "/v1/nodes/node-0/drain")
            assert answer.status_code == 200 and answer.json()["membership"] == "draining"
            drained_at_calls = agents.calls
            until(lambda: agents.calls >= drained_at_calls + 3 * sessions, timeout=30)
        assert agents.failures == []
        after = recorder.since(NodeDrain)
        placed = [
            a for _, _, actions, _ in after for a in actions if isinstance(a, Admit | Route) and a.node == "node-0"
        ]
        assert placed == []  # nothing admitted or routed there after the drain
        start = recorder.rows.index(after[0])
        idle_at_drain = {i for i, phase in recorder.rows[start - 1][3].items() if phase is not Phase.IN_LLM}
        assert all(phase is Phase.IN_LLM for phase in after[0][3].values())  # only calls stay: the rest wait again
        # then placed again elsewhere: by the first plan solved after the drain where TAO values a place for it now,
        # else at its next acquire (fast admission), as any session waiting in a tool
        job = next(a.job.id for _, _, actions, _ in after for a in actions if isinstance(a, StartPlan))
        first_plan = next(row for row in after if isinstance(row[1], PlanFinished) and row[1].job_id == job)
        placed_again: dict[str, float] = {}
        for at, _, actions, _ in after:
            for action in actions:
                if isinstance(action, Admit | Route):
                    placed_again.setdefault(action.session_id, at)
        late = {i for i in idle_at_drain if placed_again.get(i, float("inf")) > first_plan[0]}
        assert nodes(coordinator)["node-0"]["sessions"] == 0
        assert nodes(coordinator)["node-0"]["membership"] == "draining"
        delays = sorted(placed_again[i] - after[0][0] for i in idle_at_drain if i in placed_again)
        print(
            f"\ndrain under load: {sessions} sessions, {agents.calls} calls, {len(agents.failures)} failed; "
            f"{len(idle_at_drain)} idle on the node at the drain, released by it; placed elsewhere by the first plan "
            f"after it ({first_plan[0] - after[0][0]:.3f} s later): {len(idle_at_drain - late)}, at their next "
            f"acquire: {len(late)}; placed again within {max(delays, default=0.0):.3f} s"
        )
        assert len(delays) == len(idle_at_drain)  # every one placed again, elsewhere


def test_a_node_added_by_post_is_admitted_onto_within_two_scrapes_and_a_deleted_one_loses_no_call(coordinator_factory):
    with ThreadedFleet(2, FAST, kv_events=False) as fleet:
        # a small first node: most sessions wait, so a node that joins is worth admitting onto at once
        coordinator = coordinator_factory([], nodes=[{"name": "node-0", "url": fleet.urls[0], "capacity_tokens": 500}])
        until(lambda: len(coordinator.service.coordinator.nodes) == 1)
        recorder = Recorder(coordinator, "node-1")
        with Agents(coordinator, 16) as agents:
            until(lambda: agents.calls >= 32, timeout=30)
            posted = time.monotonic()
            answer = operator(coordinator, "POST", "/v1/nodes", {"name": "node-1", "url": fleet.urls[1]})
            assert answer.status_code == 201, answer.text
            assert (
                operator(coordinator, "POST", "/v1/nodes", {"name": "node-1", "url": fleet.urls[1]}).status_code == 409
            )
            until(lambda: any(isinstance(a, Admit | Route) and a.node == "node-1" for r in recorder.rows for a in r[2]))
            first = next(
                r[0] for r in recorder.rows for a in r[2] if isinstance(a, Admit | Route) and a.node == "node-1"
            )
            scrape_s = coordinator.config.fleet.scrape_interval_s
            scrapes = sum(
                1 for r in recorder.rows if r[0] <= first and isinstance(r[1], NodeUpdate) and r[1].node_id == "node-1"
            )
            assert 1 <= scrapes <= 2  # admitted onto at its first or second scrape
            calls = agents.calls
            assert operator(coordinator, "DELETE", "/v1/nodes/node-1").status_code == 204
            until(lambda: agents.calls >= calls + 32, timeout=30)
        assert agents.failures == []
        assert set(nodes(coordinator)) == {"node-0"}
        assert "node-1" not in coordinator.service.coordinator.nodes
        print(
            f"\nadd: first admission on the new node {first - posted:.3f} s after the POST, at its scrape {scrapes} "
            f"(every {scrape_s} s)"
        )


def test_membership_needs_the_operators_token(coordinator_factory):
    other = "another-api-token-0123456789"
    with ThreadedFleet(1, FAST, kv_events=False) as fleet:
        coordinator = coordinator_factory(fleet.urls, tokens=[{"name": "ci", "token": other}])
        body = {"name": "x", "url": "http://127.0.0.1:9"}
        assert operator(coordinator, "POST", "/v1/nodes", body, token=other).status_code == 403
        assert operator(coordinator, "DELETE", "/v1/nodes/node-0", token=other).status_code == 403
        assert operator(coordinator, "POST", "/v1/nodes/node-0/drain", token=other).status_code == 403
        assert httpx2.delete(coordinator.url + "/v1/nodes/node-0").status_code == 401
        assert operator(coordinator, "DELETE", "/v1/nodes/nope").status_code == 404
        assert operator(coordinator, "POST", "/v1/nodes", {"name": "y"}).status_code == 422
        ranks = {"name": "z", "url": "http://127.0.0.1:9", "kv_events": "tcp://127.0.0.1", "dp_size": 2}
        assert operator(coordinator, "POST", "/v1/nodes", ranks).status_code == 422  # rank 1 has no port to use
        assert set(nodes(coordinator)) == {"node-0"}


def test_a_pod_replaced_in_dns_is_a_node_added_and_admitted_onto_and_one_drained_and_removed(
    coordinator_factory, tmp_path
):
    """The record of 127.0.0.2 is replaced by 127.0.0.3 (a rolling update of a headless Service): the new node is
    added and takes every call, the old one drains — its running calls finish — and leaves."""
    from tao_coordinator.local_coordinator import free_port
    from tests.fleet.dnsmasq import LocalDnsmasq

    port = free_port()
    configs = [FAST.model_copy(update={"host": host, "port": port}) for host in ("127.0.0.2", "127.0.0.3")]
    old, new = "vllm-127-0-0-2", "vllm-127-0-0-3"
    dnsmasq = LocalDnsmasq(tmp_path, {"vllm.test": ["127.0.0.2"]})
    dnsmasq.start()
    try:
        with ThreadedFleet(configs, kv_events=False):
            host, dns_port = dnsmasq.address
            discovery = {"name": "vllm.test", "port": port, "resolver": f"{host}:{dns_port}", "interval_s": 0.2}
            coordinator = coordinator_factory([], discovery=[discovery])
            until(lambda: old in coordinator.service.coordinator.nodes)
            recorder = Recorder(coordinator, old)
            with Agents(coordinator, 16) as agents:
                until(lambda: agents.calls >= 32, timeout=30)
                dnsmasq.write({"vllm.test": ["127.0.0.3"]})
                changed = time.monotonic()
                dnsmasq.reload()
                until(lambda: any(isinstance(a, Route) and a.node == new for r in recorder.rows for a in r[2]))
                first = next(r[0] for r in recorder.rows for a in r[2] if isinstance(a, Route) and a.node == new)
                until(lambda: set(nodes(coordinator)) == {new}, timeout=10)
                gone = time.monotonic()
                calls = agents.calls
                until(lambda: agents.calls >= calls + 32, timeout=30)
            assert agents.failures == []
            drain = next(r[0] for r in recorder.rows if isinstance(r[1], NodeDrain))
            late = [
                a for r in recorder.rows if r[0] > drain for a in r[2] if isinstance(a, Admit | Route) and a.node == old
            ]
            assert late == []
            assert set(coordinator.service.coordinator.nodes) == {new}
            print(
                f"\ndns: first call on the added node {first - changed:.3f} s after the record changed (interval "
                f"0.2 s, scrape 0.1 s); the old node drained and removed {gone - changed:.3f} s after; "
                f"{len(agents.failures)} failed calls of {agents.calls}"
            )
    finally:
        dnsmasq.stop()


def test_sighup_applies_the_files_node_list_and_a_bad_file_changes_nothing(tmp_path):
    import os
    import signal
    import subprocess
    import sys

    from tao_coordinator.local_coordinator import free_port

    with ThreadedFleet(2, FAST, kv_events=False) as fleet:
        port, token = free_port(), "sighup-test-token-0123456789"
        config = tmp_path / "fleet.toml"

        def write(urls):
            nodes = "".join(f'[[nodes]]\nname = "node-{k}"\nurl = "{url}"\n' for k, url in urls.items())
            config.write_text(f'[server]\nport = {port}\ntoken = "{token}"\nstate_dir = "{tmp_path}/state"\n{nodes}')

        write({0: fleet.urls[0]})
        env = {**os.environ, "TAO_TOKEN": ""}
        process = subprocess.Popen(
            [sys.executable, "-m", "tao_sdk.cli", "coordinator", "--config", str(config)],
            env=env,
            stderr=subprocess.PIPE,
            text=True,
        )

        class Remote:
            url = f"http://127.0.0.1:{port}"

        Remote.token = token
        try:

            def listed():
                try:
                    return set(nodes(Remote))
                except httpx2.HTTPError:
                    return set()

            until(lambda: listed() == {"node-0"}, timeout=20)
            write({0: fleet.urls[0], 1: fleet.urls[1]})
            process.send_signal(signal.SIGHUP)
            until(lambda: listed() == {"node-0", "node-1"})
            config.write_text("[server\nnot toml")
            process.send_signal(signal.SIGHUP)
            time.sleep(0.5)
            assert listed() == {"node-0", "node-1"}
            write({1: fleet.urls[1]})
            process.send_signal(signal.SIGHUP)
            until(lambda: listed() == {"node-1"})
        finally:
            process.send_signal(signal.SIGINT)
            _, stderr = process.communicate(timeout=20)
        assert "SIGHUP: the configuration was not applied, nothing changed" in stderr
        assert "Traceback" not in stderr


def test_a_standby_that_takes_over_knows_the_nodes_added_drained_and_removed_on_the_leader(
    coordinator_factory, tmp_path
):
    from tao_coordinator.local_coordinator import free_port
    from tests.ha.conftest import local_redis

    from .test_replica_failover import leader_among

    with local_redis(directory=tmp_path / "redis") as redis_server, ThreadedFleet(3, FAST, kv_events=False) as fleet:
        replicas = []
        for _ in range(2):
            port = free_port()
            server = {"redis": redis_server.url, "advertise_url": f"http://127.0.0.1:{port}", "lease_s": 1.0}
            replicas.append(coordinator_factory(fleet.urls[:2], port=port, server=server))
        leader = leader_among(replicas)
        standby = next(r for r in replicas if r is not leader)
        assert operator(standby, "POST", "/v1/nodes/node-0/drain").status_code == 421  # writes go to the leader
        assert operator(leader, "POST", "/v1/nodes", {"name": "node-2", "url": fleet.urls[2]}).status_code == 201
        assert operator(leader, "POST", "/v1/nodes/node-1/drain").status_code == 200
        assert operator(leader, "DELETE", "/v1/nodes/node-0").status_code == 204
        with tao_sdk.session([leader.url, standby.url], leader.token) as s:
            ask(s.openai(max_retries=0))
            assert s.state.last.node == "node-2"
            leader.stop()
            until(lambda: httpx2.get(standby.url + "/v1/leader").json()["role"] == "leader", timeout=10)
            listed = nodes(standby)
            assert set(listed) == {"node-1", "node-2"}
            assert listed["node-1"]["membership"] == "draining"
            until(lambda: "node-2" in standby.service.coordinator.nodes)
            ask(s.openai(max_retries=0))
            assert s.state.last.node == "node-2" and not s.detached


def test_a_node_drained_before_the_core_knows_it_joins_the_core_draining(coordinator_factory):
    """A node that does not answer yet is known to the core only after `unhealthy_after` failed scrapes: a drain
    sent before that is applied as it joins."""
    with ThreadedFleet(1, FAST, kv_events=False) as fleet:
        coordinator = coordinator_factory(fleet.urls)
        until(lambda: len(coordinator.service.coordinator.nodes) == 1)
        late = {"name": "late", "url": "http://127.0.0.1:9"}  # nothing listens there
        assert operator(coordinator, "POST", "/v1/nodes", late).status_code == 201
        assert "late" not in coordinator.service.coordinator.nodes
        assert operator(coordinator, "POST", "/v1/nodes/late/drain").status_code == 200
        until(lambda: "late" in coordinator.service.coordinator.nodes)
        assert coordinator.service.coordinator.membership("late") == "draining"
        assert nodes(coordinator)["late"]["membership"] == "draining"
