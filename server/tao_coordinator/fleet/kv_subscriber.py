"""Subscribing to one node's KV events over ZMQ and keeping its `NodeKvIndex` current.

Sequence numbers are checked: on a gap the subscriber asks the node's replay socket (when configured) for the
missing batches; without one, or when the replay cannot fill the gap, the index is cleared and rebuilt from the
events that follow — evidence is then missing for a while, never wrong.

A publisher numbers its batches from 0 at every process start (vLLM reference, "KV event sequence"), and its live
messages arrive in increasing order. So a live number at or below the last live one means the node's engine
restarted: its cache is gone, so the rank's index is dropped (both tiers), one line is logged, and the new
process's batches are applied from its first — replayed from 0 when a replay socket is configured and the first
live one seen is not 0. Numbers at or below the last applied one but above the last live one are batches a replay
already applied, and are skipped.

A node running several data-parallel ranks has one publisher per rank, rank r on the configured port + r (vLLM's
`ZmqEventPublisher.offset_endpoint_port`, for the live and the replay socket alike), each with its own sequence
numbers: one subscriber per rank, all feeding the node's index under their rank.
"""

from __future__ import annotations

import asyncio
import logging

import zmq
import zmq.asyncio

from ..kv_wire import KvWireError, decode_batch, split_message
from .kv_index import NodeKvIndex

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
        """The last batch applied (live or replayed)."""
        self.last_live: int | None = None
        """The last batch received on the live socket."""
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
        restarted = self.last_live is not None and seq <= self.last_live
        self.last_live = seq
        if restarted:
            await self._restart(seq)
        elif self.last_seq is not None and seq > self.last_seq + 1:
            await self._recover(self.last_seq + 1, seq)
        if self.last_seq is not None and seq <= self.last_seq:
            return
        self._apply(seq, payload)

    async def _restart(self, seq: int) -> None:
        """The node's publisher started again at 0: drop the rank's index, and replay the new process's first
        batches if this one is not its first."""
        self.index.reset(self.rank)
        self.last_seq = -1
        replayed = seq > 0 and self.replay_endpoint is not None and await self._replay(0, seq)
        if seq > 0 and not replayed:  # what a partial replay applied may miss a removal: start from nothing
            self.index.clear(self.rank)
            self.last_seq = seq - 1
        log.warning(
            "node %s rank %d: KV-event numbers went back to %d: the engine restarted; its index is rebuilt from its "
            "new events%s",
            self.node,
            self.rank,
            seq,
            "" if seq == 0 else " (replayed from 0)" if replayed else f" (batches 0..{seq - 1} lost)",
        )

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
