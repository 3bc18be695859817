"""The fleet's run-time membership in Redis (`P:nodes`): what the leader changed of the configured nodes, so that a
replica that takes over knows the nodes added, drained and removed since the fleet started.

One hash field per node name, its value the JSON the service stores (`web/membership.py`, `StoredNode`): the node's
configuration (null once removed), its origin and its drain. As with the sessions (`store.py`), every write is one Lua
call that first checks `P:leader` holds exactly our leadership's value, so a deposed leader cannot write.

Invariants: a write is all or nothing and fenced; a value this module cannot read as a JSON object is left out of
`load` (and logged once), never stops a replica.
"""

from __future__ import annotations

import json
import logging

from redis.asyncio import Redis

from .lease import LeaderElection
from .store import Fenced

log = logging.getLogger("tao.ha.membership")

WRITE_NODE = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
    return 0
end
redis.call('HSET', KEYS[2], ARGV[2], ARGV[3])
return 1
"""
"""KEYS: leader, nodes. ARGV: our leader value, the node's name, its JSON. → 1 written, 0 fenced."""


class MembershipStore:
    def __init__(self, redis: Redis, prefix: str, election: LeaderElection) -> None:
        self.redis = redis
        self.election = election
        self.leader_key = f"{prefix}:leader"
        self.nodes_key = f"{prefix}:nodes"
        self._write = redis.register_script(WRITE_NODE)
        self._reported: set[str] = set()

    async def write(self, name: str, entry: str) -> None:
        """Store `entry` (a JSON object) for node `name`; `Fenced` when we do not lead."""
        value = self.election.value
        if value is None:
            raise Fenced("not the leader")
        if not await self._write(keys=[self.leader_key, self.nodes_key], args=[value, name, entry]):
            self.election.step_down("a write found another replica's lease")
            raise Fenced(f"{self.leader_key} no longer holds {value!r}")

    async def load(self) -> dict[str, dict[str, object]]:
        """Every stored node by name, as the JSON object stored."""
        stored: dict[str, dict[str, object]] = {}
        for key, data in (await self.redis.hgetall(self.nodes_key)).items():
            name = key.decode() if isinstance(key, bytes) else str(key)
            try:
                entry = json.loads(data)
            except ValueError:
                entry = None
            if isinstance(entry, dict):
                stored[name] = entry
            elif name not in self._reported:
                self._reported.add(name)
                log.warning("%s: the entry of node %r is not a JSON object; left out", self.nodes_key, name)
        return stored
