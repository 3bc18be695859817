"""Caps per API token on what its holder may make the coordinator hold: live sessions, and registrations per second.

Each API token (`auth.require_api` names it; `anonymous` without auth) has at most `max_live_sessions` live sessions
and registers at most `registrations_per_s` sustained, `registration_burst` at once (a token bucket). A
registration past either is refused with 429, an `ErrorBody` whose `code` names the cap (`max_live_sessions` or
`registrations_per_s`) and a `Retry-After` header, so one holder flooding registrations cannot crowd out another's
sessions or swell the planner's pool past what its caps allow.

Invariants:
- a refused registration changes nothing: it takes no place in the bucket and no session is made;
- a session counts against the token that registered it from its registration until it closes or expires
  (`release`); sessions restored from Redis by a new leader count against none (their token is not stored);
- the log says when a token starts being refused, and when it registers again `QUIET_S` after its last refusal
  (with how many were refused): one line per change, however many requests; every refusal counts in
  `tao_registrations_refused_total{token, cap}`.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field

from aiohttp import web

from ..config import CoordinatorConfig, LimitsConfig

log = logging.getLogger("tao.coordinator.caps")

LIVE_SESSIONS = "max_live_sessions"
RATE = "registrations_per_s"
LIVE_RETRY_AFTER_S = 5
"""Retry-After of a refusal for live sessions: when one closes is not known; the SDK retries as often."""
QUIET_S = 30.0
"""A refused token is logged as registering again once it registers this long after its last refusal."""


@dataclass(frozen=True)
class Caps:
    max_live_sessions: int
    registrations_per_s: float
    registration_burst: int


class CapReached(Exception):
    """A registration refused by one of its token's caps: 429 with `Retry-After` (the handlers answer it; not a
    `RequestError`, which would make this module import the service's)."""

    status = 429

    def __init__(self, cap: str, message: str, retry_after_s: int) -> None:
        super().__init__(message)
        self.cap, self.message, self.retry_after_s = cap, message, retry_after_s

    def response(self) -> web.Response:
        """The 429: an `ErrorBody` (built without validation: a flood gets many of these) and `Retry-After`."""
        body = json.dumps({"error": self.message, "code": self.cap})
        headers = {"Retry-After": str(self.retry_after_s)}
        return web.Response(text=body, status=429, content_type="application/json", headers=headers)


@dataclass
class _Holder:
    caps: Caps
    bucket: float
    filled_at: float
    live: int = 0
    refused_since: float | None = None
    """While refused: when the first refusal of this spell came."""
    last_refused: float = 0.0
    refused: dict[str, int] = field(default_factory=dict)
    """Refusals of this spell, by cap."""

    def fill(self, now: float) -> None:
        rate = self.caps.registrations_per_s
        self.bucket = min(float(self.caps.registration_burst), self.bucket + max(0.0, now - self.filled_at) * rate)
        self.filled_at = now


def caps_of(config: CoordinatorConfig) -> tuple[Caps, dict[str, Caps]]:
    """The default caps (`[limits]`: `default`, `anonymous`), and each named token's (`[[tokens]]`)."""
    limits: LimitsConfig = config.limits
    default = Caps(limits.max_live_sessions, limits.registrations_per_s, limits.registration_burst)
    named = {
        token.name: Caps(
            token.max_live_sessions or default.max_live_sessions,
            token.registrations_per_s or default.registrations_per_s,
            token.registration_burst or default.registration_burst,
        )
        for token in config.tokens
    }
    return default, named


class RegistrationCaps:
    def __init__(self, config: CoordinatorConfig, refused: Callable[[str, str], None]) -> None:
        """`refused(token, cap)` counts each refusal (a Prometheus counter, `metrics.py`)."""
        self.default, self.named = caps_of(config)
        self._count = refused
        self._holders: dict[str, _Holder] = {}
        self._owner: dict[str, str] = {}
        """Session id → the name of the token that registered it."""

    def _holder(self, token: str, now: float) -> _Holder:
        holder = self._holders.get(token)
        if holder is None:
            caps = self.named.get(token, self.default)
            holder = self._holders[token] = _Holder(caps, float(caps.registration_burst), now)
        holder.fill(now)
        return holder

    def check(self, token: str, now: float) -> None:
        """Raise `CapReached` if `token` may not register a session now."""
        holder = self._holder(token, now)
        caps = holder.caps
        if holder.live >= caps.max_live_sessions:
            message = (
                f"API token {token!r} holds {holder.live:,} live sessions, its cap ({LIVE_SESSIONS} "
                f"{caps.max_live_sessions:,}); close one first or retry later"
            )
            self._refuse(token, holder, LIVE_SESSIONS, message, LIVE_RETRY_AFTER_S, now)
        if holder.bucket < 1.0:
            wait = max(1, math.ceil((1.0 - holder.bucket) / caps.registrations_per_s))
            message = (
                f"API token {token!r} registers faster than its cap ({RATE} {caps.registrations_per_s:g}, "
                f"registration_burst {caps.registration_burst:,}); retry in {wait} s"
            )
            self._refuse(token, holder, RATE, message, wait, now)

    def admitted(self, token: str, session_id: str, now: float) -> None:
        """`session_id` was registered by `token` (after `check` let it through)."""
        holder = self._holder(token, now)
        holder.bucket -= 1.0
        holder.live += 1
        self._owner[session_id] = token
        if holder.refused_since is not None and now - holder.last_refused >= QUIET_S:
            by_cap = ", ".join(f"{cap} {count:,}" for cap, count in sorted(holder.refused.items()))
            log.info(
                "API token %r registers again, after %s refusals (429) over %.0f s (%s)",
                token,
                f"{sum(holder.refused.values()):,}",
                holder.last_refused - holder.refused_since,
                by_cap,
            )
            holder.refused_since, holder.refused = None, {}

    def release(self, session_id: str) -> None:
        """The session closed or expired: it no longer counts against its token."""
        token = self._owner.pop(session_id, None)
        if token is not None and (holder := self._holders.get(token)) is not None:
            holder.live -= 1

    def clear(self) -> None:
        """Every session forgotten at once (a replica that stopped leading); buckets and spells are kept."""
        self._owner.clear()
        for holder in self._holders.values():
            holder.live = 0

    def live(self) -> dict[str, int]:
        """Live sessions by the token that registered them (tokens that never registered are absent)."""
        return {token: holder.live for token, holder in sorted(self._holders.items())}

    def _refuse(self, token: str, holder: _Holder, cap: str, message: str, retry_after_s: int, now: float) -> None:
        self._count(token, cap)
        if holder.refused_since is None:
            holder.refused_since = now
            log.warning("registrations refused (429) from now on: %s", message)
        holder.last_refused = now
        holder.refused[cap] = holder.refused.get(cap, 0) + 1
        raise CapReached(cap, message, retry_after_s)
