"""The pieces of `tao bench coordinator --ha` around the load: the bed of a run (`bed`: the fake fleet, a Redis,
coordinator replicas in processes of their own), their roles, and SDK agents that make model calls and tool reports
through them.

Each replica is `tao coordinator --redis URL --advertise-url URL` with a TOML file of its own (`server.lease_s`,
`server.replica_id`), no auth, loopback, its log (JSON lines) in `replica-<k>.log` of the work directory. The agents
are real `tao_sdk` sessions given the list of replicas and no fallback node, so a call the SDK cannot place raises:
every such exception is an SDK call error.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2

import tao_sdk

from ..fakevllm import FakeNodeConfig, ThreadedFleet
from ..fakevllm.config import DEFAULT_MODEL
from ..ha import LocalRedis
from ..local_coordinator import CoordinatorProcess, free_port, wait_ready

CLUSTER_NODE_CAPACITY = 1_000_000_000
"""Tokens per fake node: every session fits, so an acquire is never a wait."""


@contextmanager
def bed(
    count: int, work: Path, *, redis: LocalRedis | None = None
) -> Iterator[tuple[LocalRedis, list[CoordinatorProcess]]]:
    """A fake fleet, a Redis (the given one, or a fresh one with nothing on disk) and `count` replicas."""
    with ExitStack() as stack:
        fleet = stack.enter_context(ThreadedFleet(2, FakeNodeConfig(time_scale=100), kv_events=False))
        server = redis or stack.enter_context(LocalRedis())
        nodes = [f"node-{k}={url},{CLUSTER_NODE_CAPACITY}" for k, url in enumerate(fleet.urls)]
        yield server, stack.enter_context(replicas(count, server.url, nodes, work))


@contextmanager
def replicas(
    count: int, redis_url: str, nodes: Sequence[str], work: Path, lease_s: float = 1.0
) -> Iterator[list[CoordinatorProcess]]:
    """`count` replicas on one Redis, ready (a healthy node seen); stopped on the way out, even if paused."""
    with ExitStack() as stack:
        started: list[CoordinatorProcess] = []
        for k in range(count):
            port = free_port()
            config = work / f"replica-{k}.toml"
            config.write_text(f'[server]\nlease_s = {lease_s}\nreplica_id = "replica-{k}"\n')
            url = f"http://127.0.0.1:{port}"
            command = [sys.executable, "-m", "tao_sdk.cli", "coordinator", "--config", str(config)]
            command += ["--port", str(port), "--state-dir", str(work / f"state-{k}"), "--insecure-no-auth"]
            command += ["--redis", redis_url, "--advertise-url", url, "--log-format", "json"]
            for spec in nodes:
                command += ["--node", spec]
            log = stack.enter_context((work / f"replica-{k}.log").open("ab"))
            env = {**os.environ, "PYTHONUNBUFFERED": "1"}
            process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
            stack.callback(_stop, process)
            started.append(CoordinatorProcess(url, process))
        for k, replica in enumerate(started):
            try:
                wait_ready(replica.url, replica.process)
            except RuntimeError as error:
                tail = (work / f"replica-{k}.log").read_text(errors="replace").splitlines()[-5:]
                raise RuntimeError(f"{error}; its log ends:\n" + "\n".join(tail)) from error
        yield started


def _stop(process: subprocess.Popen[Any]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGCONT)
        process.terminate()
        process.wait(10)


def role(url: str) -> dict[str, Any] | None:
    """`GET /v1/leader` of one replica, or None when it does not answer within 0.5 s."""
    try:
        return dict(httpx2.get(url + "/v1/leader", timeout=0.5).json())
    except (httpx2.HTTPError, ValueError):
        return None


def wait_leader(running: Sequence[CoordinatorProcess], timeout_s: float = 20.0) -> CoordinatorProcess:
    """The one replica that says it leads, once exactly one does."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        leading = [r for r in running if (role(r.url) or {}).get("role") == "leader"]
        if len(leading) == 1:
            return leading[0]
        time.sleep(0.05)
    raise RuntimeError(f"no single leader among {[r.url for r in running]} within {timeout_s:g} s")


@dataclass
class Scale:
    sessions: int = 500
    sdk_sessions: int = 8
    phase_s: float = 4.0
    """Seconds of load before a fault, and again after it."""
    samples: int = 1000
    """Acquire round trips timed per configuration in the latency run."""
    cycle_s: float = 5.0
    """Seconds between two cycles (4 requests) of one raw session: an agent's model call every 5 s, so 500 sessions
    send about 400 requests a second."""


@dataclass
class Call:
    started: float
    ended: float
    ok: bool

    @property
    def ms(self) -> float:
        return (self.ended - self.started) * 1e3


@dataclass
class Agents:
    """`count` SDK sessions in threads, each looping over a tool and a model call every `period_s`."""

    urls: list[str]
    count: int
    period_s: float = 0.25
    calls: list[list[Call]] = field(default_factory=list)
    ids: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    failed_sessions: int = 0
    """Sessions that ended with an exception outside a turn (opening or closing the session)."""
    _stop: threading.Event = field(default_factory=threading.Event)
    _release: threading.Event = field(default_factory=threading.Event)
    _stopped: threading.Semaphore = field(default_factory=lambda: threading.Semaphore(0))
    _threads: list[threading.Thread] = field(default_factory=list)

    def start(self) -> None:
        self.calls = [[] for _ in range(self.count)]
        self.ids = [""] * self.count
        self._threads = [threading.Thread(target=self._agent, args=(k,), daemon=True) for k in range(self.count)]
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        """Stop looping and flush the reports; the sessions stay open (readable) until `release()`."""
        self._stop.set()
        for _ in self._threads:
            self._stopped.acquire(timeout=60)

    def release(self) -> None:
        self._release.set()
        for thread in self._threads:
            thread.join(30)

    def _agent(self, k: int) -> None:
        try:
            with tao_sdk.session(self.urls, None, tao_sdk.AgentContext(harness="bench-ha")) as s:
                self.ids[k] = s.id
                client = s.openai(max_retries=0)
                turn = 0
                while not self._stop.is_set():
                    begun = time.monotonic()
                    self._turn(s, client, k, turn)
                    turn += 1
                    self._stop.wait(max(0.0, self.period_s - (time.monotonic() - begun)))
                s.flush()
                self._stopped.release()
                self._release.wait(120)
        except Exception as error:  # the session itself failed: an error to report, not to raise
            self.errors.append(f"session {k}: {error!r}")
            self.failed_sessions += 1
            self._stopped.release()

    def _turn(self, s: tao_sdk.Session, client: Any, k: int, turn: int) -> None:
        started = time.monotonic()
        try:
            with s.tool("bash", command="true"):
                pass
            messages = [{"role": "user", "content": f"turn {turn} of agent {k}"}]
            client.chat.completions.create(model=DEFAULT_MODEL, messages=messages, max_tokens=2)
            self.calls[k].append(Call(started, time.monotonic(), True))
        except Exception as error:  # what the benchmark counts
            self.calls[k].append(Call(started, time.monotonic(), False))
            self.errors.append(f"session {k} turn {turn}: {error!r}")

    def all_calls(self) -> list[Call]:
        return [call for mine in self.calls for call in mine]
