"""Subscribing to one node's KV events over ZMQ and keeping its `NodeKvIndex` current.

Sequence numbers are checked: on a gap the subscriber asks the node's replay socket (when configured) for the
missing batches; without one, or when the replay cannot fill the gap, the index is cleared and rebuilt from the
events that follow — evidence is then missing for a while, never wrong.
"""

from __future__ import annotations

import asyncio
import logging

import zmq
import zmq.asyncio

from .kv_index import NodeKvIndex
from .kv_wire import KvWireError, decode_batch, split_message

log = logging.getLogger("tao.fleet")

END_OF_REPLAY = -1


class KvEventSubscriber:
    def __init__(
        self, node: str, endpoint: str, replay_endpoint: str | None, index: NodeKvIndex, context: zmq.asyncio.Context
    ) -> None:
        self.node, self.endpoint, self.replay_endpoint = node, endpoint, replay_endpoint
        self.index, self.context = index, context
        self.last_seq: int | None = None
        self.batches = 0

    async def run(self) -> None:
        socket = self.context.socket(zmq.SUB)
        socket.setsockopt(zmq.LINGER, 0)
        socket.connect(self.endpoint)
        socket.setsockopt(zmq.SUBSCRIBE, b"")
        try:
            while True:
                frames = await socket.recv_multipart()
                await self._receive(frames)
        finally:
            socket.close()

    async def _receive(self, frames: list[bytes]) -> None:
        try:
            _, seq, payload = split_message(frames)
        except KvWireError as error:
            log.warning("node %s: dropping a malformed KV-event message: %s", self.node, error)
            return
        if self.last_seq is not None and seq > self.last_seq + 1:
            await self._recover(self.last_seq + 1, seq)
        if self.last_seq is not None and seq <= self.last_seq:
            return
        self._apply(seq, payload)

    def _apply(self, seq: int, payload: bytes) -> None:
        try:
            events = decode_batch(payload)
        except KvWireError as error:
            log.warning("node %s: undecodable KV-event batch %d: %s", self.node, seq, error)
            return
        for event in events:
            self.index.apply(event)
        self.last_seq = seq
        self.batches += 1

    async def _recover(self, first_missing: int, next_live: int) -> None:
        if self.replay_endpoint is not None and await self._replay(first_missing, next_live):
            return
        log.warning("node %s: KV events %d..%d lost; rebuilding the index", self.node, first_missing, next_live - 1)
        self.index.clear()
        self.last_seq = next_live - 1

    async def _replay(self, first_missing: int, next_live: int) -> bool:
        assert self.replay_endpoint is not None
        dealer = self.context.socket(zmq.DEALER)
        dealer.setsockopt(zmq.LINGER, 0)
        dealer.connect(self.replay_endpoint)
        try:
            await dealer.send_multipart([b"", first_missing.to_bytes(8, "big", signed=True)])
            while True:
                frames = await asyncio.wait_for(dealer.recv_multipart(), timeout=2.0)
                seq_frame, payload = frames[-2], frames[-1]
                seq = int.from_bytes(seq_frame, "big", signed=True)
                if seq == END_OF_REPLAY:
                    return self.last_seq is not None and self.last_seq >= next_live - 1
                if self.last_seq is None or seq == self.last_seq + 1:
                    self._apply(seq, payload)
        except TimeoutError:
            return False
        finally:
            dealer.close()
