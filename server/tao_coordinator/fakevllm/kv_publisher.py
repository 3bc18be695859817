"""vLLM's ZMQ KV-event publisher (§3.2 of the vLLM reference): a PUB socket and an optional ROUTER replay socket.

Live frames: `[topic, seq (8 bytes, big-endian), payload]`, `seq` counting batches from 0. The last
`buffer_steps` payloads are kept for replay. A replay client (DEALER) sends `[b"", start_seq]` and gets every
buffered batch with `seq >= start_seq`, then an end marker with seq −1 and an empty payload:
* framing of vLLM ≥ 0.26 (`replay_topic=True`): `[b"", topic, seq, payload]`, end `[b"", b"", END, b""]`;
* framing of vLLM ≤ 0.25: `[b"", seq, payload]`, end `[b"", END, b""]`.
(The ROUTER prepends/strips the client identity.)

Sockets bind to the given endpoints (vLLM connects instead when the address has no wildcard; `connect=True`
reproduces that). A `tcp://host:*` endpoint binds a free port; `endpoint` reports the bound address. PUB sends
never block: past the high-water mark ZMQ drops, as it does for vLLM.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from dataclasses import dataclass

import zmq
import zmq.asyncio

log = logging.getLogger(__name__)

END_SEQ = (-1).to_bytes(8, "big", signed=True)


@dataclass(frozen=True, slots=True)
class KvEventsConfig:
    endpoint: str = "tcp://127.0.0.1:5557"
    replay_endpoint: str | None = None
    topic: str = ""
    buffer_steps: int = 10_000
    hwm: int = 100_000
    replay_topic: bool = True
    """Replay replies carry the topic frame (vLLM ≥ 0.26)."""
    connect: bool = False
    """Connect the PUB socket instead of binding it."""


class KvEventPublisher:
    def __init__(self, config: KvEventsConfig) -> None:
        self.config = config
        self._topic = config.topic.encode("utf-8")
        self._buffer: deque[tuple[int, bytes]] = deque(maxlen=config.buffer_steps)
        self._seq = 0
        self._pub: zmq.Socket[bytes] | None = None
        self._replay: zmq.asyncio.Socket | None = None
        self._replay_task: asyncio.Task[None] | None = None
        self.endpoint: str | None = None
        self.replay_endpoint: str | None = None

    def start(self) -> None:
        pub: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.PUB)
        pub.set_hwm(self.config.hwm)
        pub.setsockopt(zmq.LINGER, 0)
        if self.config.connect:
            pub.connect(self.config.endpoint)
            self.endpoint = self.config.endpoint
        else:
            pub.bind(self.config.endpoint)
            self.endpoint = pub.getsockopt_string(zmq.LAST_ENDPOINT)
        self._pub = pub
        if self.config.replay_endpoint is not None:
            replay = zmq.asyncio.Context.instance().socket(zmq.ROUTER)
            replay.setsockopt(zmq.LINGER, 0)
            replay.bind(self.config.replay_endpoint)
            self.replay_endpoint = replay.getsockopt_string(zmq.LAST_ENDPOINT)
            self._replay = replay
            self._replay_task = asyncio.get_running_loop().create_task(self._serve_replay())

    def publish(self, payload: bytes) -> int:
        """Send one batch; returns its sequence number."""
        seq = self._seq
        self._seq += 1
        self._buffer.append((seq, payload))
        if self._pub is not None:
            self._pub.send_multipart((self._topic, seq.to_bytes(8, "big"), payload), flags=zmq.NOBLOCK)
        return seq

    def restart(self) -> None:
        """As a new process: numbers start again at 0 and the replay buffer is empty (the sockets stay bound)."""
        self._seq = 0
        self._buffer.clear()

    async def close(self) -> None:
        if self._replay_task is not None:
            self._replay_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._replay_task
        if self._replay is not None:
            self._replay.close(linger=0)
        if self._pub is not None:
            self._pub.close(linger=0)

    async def _serve_replay(self) -> None:
        assert self._replay is not None
        while True:
            frames = await self._replay.recv_multipart()
            if len(frames) != 3:
                log.warning("invalid KV-event replay request with %d frames", len(frames))
                continue
            client, _, start = frames
            await self._send_replay(client, int.from_bytes(start, "big"))

    async def _send_replay(self, client: bytes, start_seq: int) -> None:
        assert self._replay is not None
        topic = (self._topic,) if self.config.replay_topic else ()
        for seq, payload in list(self._buffer):
            if seq >= start_seq:
                await self._replay.send_multipart((client, b"", *topic, seq.to_bytes(8, "big"), payload))
        end_topic = (b"",) if self.config.replay_topic else ()
        await self._replay.send_multipart((client, b"", *end_topic, END_SEQ, b""))
