"""Subscribing to one node's KV events over ZMQ and keeping its `NodeKvIndex` current.

Sequence numbers are checked: on a gap the subscriber asks the node's replay socket (when configured) for the
missing batches; without one, or when the replay cannot fill the gap, the index is cleared and rebuilt from the
events that follow — evidence is then missing for a while, never wrong.

A node running several data-parallel ranks has one publisher per rank, rank r on the configured port + r (vLLM's
`ZmqEventPublisher.offset_endpoint_port`, for the live and the replay socket alike), each with its own sequence
numbers: one subscriber per rank, all feeding the node's index under their rank.
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


def rank_endpoint(endpoint: str, rank: int) -> str:
    """The endpoint data-parallel rank `rank` publishes on, given rank 0's: `tcp://host:port` → port + rank."""
    if rank == 0:
        return endpoint
    host, sep, port = endpoint.rpartition(":")
    if not endpoint.startswith("tcp://") or not sep or not port.isdigit():
        raise ValueError(f"only tcp://host:port endpoints have per-rank ports, got {endpoint!r}")
    return f"{host}:{int(port) + rank}"


class KvEventSubscriber:
    def __init__(
        self,
        node: str,
        endpoint: str,
        replay_endpoint: str | None,
        index: NodeKvIndex,
        context: zmq.asyncio.Context,
        rank: int = 0,
    ) -> None:
        """`endpoint` and `replay_endpoint` are rank 0's; this subscriber listens to rank `rank`."""
        self.node, self.rank = node, rank
        self.endpoint = rank_endpoint(endpoint, rank)
        self.replay_endpoint = rank_endpoint(replay_endpoint, rank) if replay_endpoint is not None else None
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
            log.warning("node %s rank %d: dropping a malformed KV-event message: %s", self.node, self.rank, error)
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
            log.warning("node %s rank %d: undecodable KV-event batch %d: %s", self.node, self.rank, seq, error)
            return
        for event in events:
            self.index.apply(event, self.rank)
        self.last_seq = seq
        self.batches += 1

    async def _recover(self, first_missing: int, next_live: int) -> None:
        if self.replay_endpoint is not None and await self._replay(first_missing, next_live):
            return
        log.warning(
            "node %s rank %d: KV events %d..%d lost; rebuilding the index",
            self.node,
            self.rank,
            first_missing,
            next_live - 1,
        )
        self.index.clear(self.rank)
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
