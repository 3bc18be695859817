"""Speed check: replay agent sessions with ~100k-token prompts sharing long prefixes through node engines.

Not a test: it measures wall time, so the lead can quote how fast the node model simulates. It is also a compact
example of a virtual-time driver: a heap of session arrivals merged with every node's `next_event_time()`.

Workload: `sessions` agent sessions of `turns` turns, `concurrency` of them live at once (a finished session is
replaced by the next). Every prompt starts with a shared system prefix; turn k+1 extends turn k's prompt and answer
(its output blocks are named, so they hit) with `new_tokens` fresh tokens; sessions are pinned to a node.

    python -m tao_coordinator.sim.node.speed_check --sessions 200 --turns 10 --profile h100-tp4
"""

from __future__ import annotations

import argparse
import heapq
import random
import time
from dataclasses import dataclass

from ..prompt import Prompt
from .engine import NodeEngine
from .events import Finished, NodeEvent
from .profile import profile_by_name
from .request import NodeRequest, cacheable_blocks


@dataclass(frozen=True, slots=True)
class SpeedReport:
    requests: int
    simulated_s: float
    wall_s: float
    prompt_tokens: int
    cached_tokens: int
    preemptions: int

    @property
    def requests_per_wall_s(self) -> float:
        return self.requests / self.wall_s

    def __str__(self) -> str:
        return (
            f"{self.requests} requests, {self.prompt_tokens / self.requests:,.0f} prompt tokens on average, "
            f"{self.cached_tokens / self.prompt_tokens:.1%} served from cache, {self.preemptions} preemptions\n"
            f"simulated {self.simulated_s:,.0f} s in {self.wall_s:.2f} s wall: "
            f"{self.requests_per_wall_s:,.0f} requests/s, {self.simulated_s / self.wall_s:,.0f}× real time"
        )


@dataclass(slots=True)
class _Session:
    index: int
    turn: int
    tokens: int


def _turn_request(session: _Session, output: int, system_blocks: int, block_size: int) -> NodeRequest:
    own_base = (session.index + 1) << 32
    history_blocks = session.tokens // block_size - system_blocks
    runs = ((0, system_blocks), (own_base, history_blocks))
    cacheable = cacheable_blocks(session.tokens, output, block_size)
    output_blocks = cacheable - system_blocks - history_blocks
    outputs = ((own_base + history_blocks, output_blocks),) if output_blocks else ()
    prompt = Prompt(session.tokens, runs)
    request_id = f"s{session.index}-t{session.turn}"
    return NodeRequest(request_id, prompt, output, session_id=f"s{session.index}", output_block_runs=outputs)


@dataclass(frozen=True, slots=True)
class SpeedWorkload:
    sessions: int = 200
    turns: int = 10
    concurrency: int = 16
    system_tokens: int = 20_000
    first_prompt_tokens: int = 90_000
    new_tokens: int = 2_000
    output_tokens: int = 400
    think_s: float = 5.0


class _Replay:
    """Closed-loop sessions on an arrival heap, merged with the nodes' `next_event_time()`."""

    def __init__(self, workload: SpeedWorkload, engines: list[NodeEngine], seed: int) -> None:
        self.workload = workload
        self.engines = engines
        self.rng = random.Random(seed)
        self.block_size = engines[0].profile.block_size
        self.arrivals: list[tuple[float, int, _Session]] = []
        self.live: dict[str, tuple[_Session, int]] = {}
        self.finished: list[Finished] = []
        self.started = 0

    def run(self) -> None:
        for _ in range(self.workload.concurrency):
            self._start_session(0.0)
        while True:
            node_times = [(t, i) for i, e in enumerate(self.engines) if (t := e.next_event_time()) is not None]
            next_node = min(node_times, default=None)
            if self.arrivals and (next_node is None or self.arrivals[0][0] <= next_node[0]):
                events = self._arrive(*heapq.heappop(self.arrivals))
            elif next_node is not None:
                events = self.engines[next_node[1]].advance(next_node[0])
            else:
                return
            for event in events:
                if isinstance(event, Finished):
                    self._on_finished(event)

    def _start_session(self, now: float) -> None:
        if self.started < self.workload.sessions:
            tokens = self.workload.first_prompt_tokens + self.rng.randrange(self.block_size * 50)
            heapq.heappush(self.arrivals, (now, self.started, _Session(self.started, 0, tokens)))
            self.started += 1

    def _arrive(self, now: float, _: int, session: _Session) -> list[NodeEvent]:
        output = max(1, int(self.rng.expovariate(1 / self.workload.output_tokens)))
        system_blocks = self.workload.system_tokens // self.block_size
        request = _turn_request(session, output, system_blocks, self.block_size)
        engine = self.engines[session.index % len(self.engines)]
        events = engine.advance(now)
        engine.submit(request, now)
        self.live[request.request_id] = (session, output)
        return events

    def _on_finished(self, event: Finished) -> None:
        self.finished.append(event)
        session, output = self.live.pop(event.request_id)
        if session.turn + 1 < self.workload.turns:
            tokens = session.tokens + output + self.workload.new_tokens
            think = self.rng.expovariate(1 / self.workload.think_s)
            heapq.heappush(
                self.arrivals, (event.time + think, session.index, _Session(session.index, session.turn + 1, tokens))
            )
        else:
            self._start_session(event.time)


def run_speed_check(
    workload: SpeedWorkload | None = None, *, nodes: int = 1, profile: str = "h100-tp4", seed: int = 0
) -> SpeedReport:
    engines = [NodeEngine(profile_by_name(profile)) for _ in range(nodes)]
    replay = _Replay(workload or SpeedWorkload(), engines, seed)
    wall = time.perf_counter()
    replay.run()
    wall = time.perf_counter() - wall
    finished = replay.finished
    return SpeedReport(
        requests=len(finished),
        simulated_s=max(e.time for e in finished),
        wall_s=wall,
        prompt_tokens=sum(e.prompt_tokens for e in finished),
        cached_tokens=sum(e.cached_tokens for e in finished),
        preemptions=sum(e.counters().num_preemptions for e in engines),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description="Replay long-prompt agent sessions through node engines.")
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--nodes", type=int, default=1)
    parser.add_argument("--profile", default="h100-tp4")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    workload = SpeedWorkload(sessions=args.sessions, turns=args.turns, concurrency=args.concurrency)
    print(run_speed_check(workload, nodes=args.nodes, profile=args.profile, seed=args.seed))


if __name__ == "__main__":
    main()
