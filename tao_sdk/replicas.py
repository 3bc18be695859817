"""Which coordinator replica a session talks to, and where it goes when that one stops answering as the leader.

Several coordinator replicas share one fleet; one is the leader and serves writes, the others answer them with 421
naming the leader (a replica that is stepping down answers 503 the same way). A client is given their URLs
(`coordinator_urls`: a comma-separated string or a sequence) and follows the leader:

- `Replicas.leader` is the replica the session believes is the leader; every request goes there.
- When it does not answer as leader (a connection error, a timeout, a 421, or a stepping-down 503: `not_leader`),
  `Replicas.moved` makes the leader the replica the answer named, else the URL after it in the given order, and the
  caller sends the same request again (`Failover` paces the tries of one request).
- A failover starts at the first request that found no leader and ends when a replica answers as leader
  (`Replicas.answered`); the caller gives up, and the session fails open as with a single coordinator that is down,
  once it has lasted `failover_wait_s`.

Invariants: `moved` only moves from the replica that failed, so two threads failing on one replica move once, not
twice; the leader is always a URL given, or one a replica named; with a single URL and no named leader there is no
failover at all: the first failure is final, exactly as before replicas existed.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

import httpx2

from .errors import ConfigurationError
from .protocol import LEADER_HEADER, NOT_LEADER

__all__ = ["FAILOVER_PAUSE_S", "LEADER_HEADER", "Failover", "NotLeader", "Replicas", "coordinator_urls", "not_leader"]

NOT_LEADER_TYPES = frozenset({NOT_LEADER, "stepping_down"})
"""The error types (`error.type`, or `code`) by which a replica says it does not serve writes."""
FAILOVER_PAUSE_S = 0.2
"""The pause after every replica failed in turn, before the next round: no tight loop on refused connections."""


def coordinator_urls(value: str | Sequence[str] | None) -> tuple[str, ...]:
    """The coordinator URLs of a setting: a comma-separated string or a sequence of URLs (each without its trailing
    slash; duplicates dropped, order kept). Raises `ConfigurationError` naming a URL that is not http(s)."""
    if value is None:
        return ()
    parts = value.split(",") if isinstance(value, str) else [part for item in value for part in item.split(",")]
    urls: list[str] = []
    for part in parts:
        url = part.strip().rstrip("/")
        if not url:
            continue
        if not url.startswith(("http://", "https://")):
            raise ConfigurationError(f"coordinator: expected an http(s) URL, got {part.strip()!r}")
        if url not in urls:
            urls.append(url)
    return tuple(urls)


@dataclass(frozen=True)
class NotLeader:
    """A replica's answer that it does not serve writes (421, or 503 while stepping down), and whom it names."""

    status: int
    leader: str | None


def not_leader(response: httpx2.Response) -> NotLeader | None:
    """The replica's refusal to serve the request as leader, or None when it answered as leader."""
    if response.status_code not in (421, 503):
        return None
    error = _error(response)
    kind = error.get("type") or error.get("code")
    header = response.headers.get(LEADER_HEADER)
    if response.status_code == 503 and kind not in NOT_LEADER_TYPES and header is None:
        return None  # a 503 about the fleet (no healthy node), or a coordinator in trouble: not a leader change
    named = error.get("leader") or header
    leader = named.strip().rstrip("/") if isinstance(named, str) else None
    return NotLeader(response.status_code, leader if leader and leader.startswith(("http://", "https://")) else None)


def _error(response: httpx2.Response) -> dict[str, object]:
    """The fields of an error body, whether shaped `{"error": {...}}` (the 421) or `{"error": "...", "code": ...}`."""
    try:
        body = response.json()
    except ValueError:
        return {}
    if not isinstance(body, dict):
        return {}
    nested = body.get("error")
    return nested if isinstance(nested, dict) else body


@dataclass
class Replicas:
    """One session's belief about the leader, shared by its routers and their threads."""

    urls: tuple[str, ...]
    leader: str = ""
    failing_since: float | None = None
    """When the current failover began (the first request that found no leader); None while a leader answers."""
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        if not self.leader and self.urls:
            self.leader = self.urls[0]

    def answered(self) -> None:
        self.failing_since = None

    def failing(self, now: float) -> float:
        """The failover's start, starting it now if none is under way."""
        with self._lock:
            if self.failing_since is None:
                self.failing_since = now
            return self.failing_since

    def moved(self, failed: str, named: str | None) -> str:
        """The leader after `failed` did not answer as one: `named` when the answer named a leader, else the URL after
        `failed` in the given order. Unchanged when another request has moved on from `failed` already."""
        with self._lock:
            if self.leader == failed:
                if named is not None and named != failed:
                    self.leader = named
                elif self.urls:
                    at = self.urls.index(failed) if failed in self.urls else -1
                    self.leader = self.urls[(at + 1) % len(self.urls)]
            return self.leader


@dataclass
class Failover:
    """The tries of one request: how many replicas failed it since the last pause."""

    tries: int = 0
    rounds: int = 0

    def failed(self, replicas: int) -> float:
        """Count one failed try; the pause before the next (after a whole round of failures, `FAILOVER_PAUSE_S`)."""
        self.tries += 1
        if self.tries < replicas:
            return 0.0
        self.tries = 0
        self.rounds += 1
        return FAILOVER_PAUSE_S
