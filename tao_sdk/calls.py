"""One session's requests to the coordinator and how their answers are read, shared by the sync and the async
router (`router.py`, which does the I/O).

Invariants: every request has the bounds of `SessionConfig` (`connect_timeout_s`, and `request_timeout_s` for the
whole answer, long polls included: an acquire asks the coordinator to answer within `request_timeout_s / 2`); a
5xx raises `Unreachable`, except the 503 `no_healthy_node`, which is an answer; each recovery of one acquire
(registering again, converging after a 409) is tried once, so an acquire never loops on refusals. What the session
has open lives in `SessionState.ledger` (`convergence.py`), shared by both routers of a session.

Refused model calls (`refusals.py`): a call a node refused is reported as such and retried once elsewhere —
`rerouted` reads the coordinator's answer to the retry's acquire (`avoid_nodes`), `fallback_after` picks the next
node of the fail-open list when the coordinator cannot say. An acquire answer that does not parse as the protocol
says (an admitted answer without its node, say) is the coordinator failing: `MalformedAnswer`, an `Unreachable`, so
the session fails open exactly as when the coordinator does not answer.

Several coordinator replicas (`replicas.py`): every request goes to the replica the session believes is the leader
(`SessionState.replicas`), and to the next while none answers as leader (`failover`); only when none has answered as
leader for `failover_wait_s` does the request fail, and the session fail open. With a single URL, the first failure
is final, as it always was.
"""

from __future__ import annotations

import hashlib
import logging
import time
import uuid
from dataclasses import dataclass, field, replace
from typing import Any

import httpx2
import pydantic

from .convergence import Ledger, session_view
from .errors import AuthenticationFailed, NoNodeAvailable
from .protocol import (
    ERROR_MAX_CHARS,
    MODEL_NOT_SERVED,
    NO_HEALTHY_NODE,
    NO_OTHER_NODE,
    AcquireResponse,
    LlmEndRequest,
    RegisterRequest,
    RegisterResponse,
    ToolHints,
    ToolStartRequest,
)
from .queue_state import QueueState, queue_state, tell
from .replicas import FAILOVER_PAUSE_S, Failover, NotLeader, Replicas
from .session_config import SessionConfig

log = logging.getLogger("tao_sdk")


@dataclass(frozen=True)
class Grant:
    node: str
    node_url: str
    lease_id: str | None
    detached: bool = False
    queued: QueueState | None = field(default=None, compare=False)
    """The first waiting answer of the acquire that got this grant; None when the call did not wait. Not part of
    what the grant is: two grants of the same place compare equal however they waited."""


@dataclass(frozen=True)
class Step:
    """What the agent says about the step its next model calls belong to, sent with each acquire (None: not said,
    the coordinator keeps what it has)."""

    step_id: str | None = None
    expected_next_tools: tuple[str, ...] | None = None


@dataclass
class SessionState:
    session_id: str
    session_token: str | None = None
    registered: bool = False
    detached_at: float | None = None
    retry_at: float = 0.0
    """While detached: when the coordinator may be tried again."""
    warned: bool = False
    last: Grant | None = None
    heartbeat_due: float = 0.0
    lease_ttl_s: float = 60.0
    token_refused: str | None = None
    """While detached because the coordinator refused the API token: what it answered."""
    fleet_down: bool = False
    """The coordinator said no node is healthy, and no call was granted since (the log said so once)."""
    ledger: Ledger = field(default_factory=Ledger)
    step: Step = field(default_factory=Step)
    """The step set by `Session.step`: every acquire carries it until it is set again."""
    replicas: Replicas = field(default_factory=lambda: Replicas(()))
    """The coordinator's replicas, and the one believed to be the leader."""
    retried_calls: int = 0
    """Model calls a node refused that were sent again to another node (`refusals.py`)."""
    refusers: set[str] = field(default_factory=set)
    """Nodes that refused a call of this session (the log said so once for each)."""
    queue: QueueState | None = None
    """While a model call waits for a place: the latest waiting answer (`queue_state.py`); None otherwise."""


class Unreachable(Exception):
    """The coordinator did not answer in time, or answered 5xx."""


class TokenRefused(Unreachable):
    """The coordinator answered registration with 401/403: the API token is missing or wrong."""


class MalformedAnswer(Unreachable):
    """The coordinator answered something the protocol does not allow (an admitted acquire without its node, say):
    it is failing, so the session fails open as if it had not answered."""


POLL, REGISTER, CONVERGE = "poll", "register", "converge"


@dataclass
class Attempt:
    """One acquire: each recovery is tried once."""

    started: float
    registered_again: bool = False
    converged: bool = False
    closing: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    queued: QueueState | None = None
    """The first waiting answer."""


def new_state(config: SessionConfig) -> SessionState:
    return SessionState(config.session_id or f"tao-{uuid.uuid4().hex}", replicas=Replicas(config.coordinators))


class Calls:
    """Requests and their interpretation, shared by both routers (which may serve one session together)."""

    def __init__(self, config: SessionConfig, state: SessionState | None = None) -> None:
        self.config = config
        self.state = state or new_state(config)

    def timeout(self) -> httpx2.Timeout:
        return httpx2.Timeout(self.config.request_timeout_s, connect=self.config.connect_timeout_s)

    def headers(self, api: bool = False) -> dict[str, str]:
        token = self.config.token if api else self.state.session_token
        return {"Authorization": f"Bearer {token}"} if token else {}

    def session_path(self, verb: str = "") -> str:
        return f"/v1/sessions/{self.state.session_id}" + (f"/{verb}" if verb else "")

    def register_body(self) -> dict[str, Any]:
        body = RegisterRequest(context=self.config.context, session_id=self.state.session_id)
        return body.model_dump(mode="json", exclude_none=True)

    def registered(self, status: int, body: Any) -> None:
        if status == 201:
            answer = RegisterResponse.model_validate(body)
            self.state.session_token = answer.session_token
            self.state.lease_ttl_s = answer.lease_ttl_s
        elif status in (401, 403):
            said = body.get("error") if isinstance(body, dict) else body
            raise TokenRefused(f"the coordinator refused the API token ({status}: {said})")
        elif status != 409:  # 409: still registered from before; a refusal then converges (convergence.py)
            raise Unreachable(f"register answered {status}: {body}")
        self.state.registered = True
        if self.state.detached_at is not None:
            log.info("tao: coordinator reachable again; session %s is scheduled again", self.state.session_id)
        self.state.detached_at = None
        self.state.token_refused = None
        self.state.warned = False

    @property
    def has_coordinator(self) -> bool:
        return bool(self.state.replicas.urls)

    def failover(self, trial: Failover, url: str, failure: BaseException | NotLeader) -> float:
        """After `url` did not answer as leader: the pause before the same request goes to the replica now believed
        leader (`replicas.Replicas.moved`). Raises, for the caller to fail open, at once with a single URL (unless
        the answer named the leader), after one round of the replicas while detached (a background retry), and
        once no replica has answered as leader for `failover_wait_s`."""
        replicas = self.state.replicas
        named = failure.leader if isinstance(failure, NotLeader) else None
        leader = replicas.moved(url, named)
        if len(replicas.urls) < 2 and leader == url:
            raise _final(failure)
        now = time.monotonic()
        since = replicas.failing(now)
        pause = trial.failed(len(replicas.urls))
        if self.state.detached_at is not None and trial.rounds > 0:
            raise _final(failure)
        if now - since >= self.config.failover_wait_s:
            last = describe(failure) if isinstance(failure, BaseException) else f"{failure.status} from {url}"
            waited = self.config.failover_wait_s
            raise Unreachable(f"no coordinator replica answered as leader for {waited:g} s (last: {last})")
        log.debug(
            "tao: session %s: %s did not answer as leader (%s); trying %s", self.state.session_id, url, failure, leader
        )
        return min(pause, since + self.config.failover_wait_s - now)

    def reached(self, url: str) -> None:
        """`url` answered as leader: a failover under way is over."""
        replicas = self.state.replicas
        since = replicas.failing_since
        replicas.answered()
        if since is not None:
            log.info(
                "tao: session %s follows the coordinator's leader at %s (after %.1f s)",
                self.state.session_id,
                url,
                time.monotonic() - since,
            )

    def retry_bound_s(self) -> float:
        """The longest a background retry takes: one try of each replica, and a pause."""
        one = self.config.connect_timeout_s + self.config.request_timeout_s
        return max(1, len(self.state.replicas.urls)) * one + FAILOVER_PAUSE_S + 1

    def retry_due(self, now: float) -> bool:
        """Detached and due for another try of the coordinator; claims it (the next is `retry_interval_s` away)."""
        if not self.has_coordinator or self.state.detached_at is None or now < self.state.retry_at:
            return False
        self.state.retry_at = now + self.config.retry_interval_s
        return True

    def detach(self, error: BaseException, now: float) -> None:
        if self.state.detached_at is None:
            self.state.detached_at = now
        self.state.retry_at = max(self.state.retry_at, now + self.config.retry_interval_s)
        self.state.registered = False
        refused = isinstance(error, TokenRefused)
        self.state.token_refused = str(error) if refused else None
        if self.state.warned:
            return
        self.state.warned = True
        if refused:
            log.error(
                "tao: %s; check token= or $TAO_TOKEN. Routing session %s on its own",
                error,
                self.state.session_id,
            )
        else:
            log.warning(
                "tao: coordinator unavailable (%s); routing session %s on its own",
                describe(error),
                self.state.session_id,
            )

    def fallback(self, cause: str = "the coordinator is unreachable") -> Grant:
        if self.state.last is not None:
            return Grant(self.state.last.node, self.state.last.node_url, None, detached=True)
        nodes = sorted(self.config.fallback_nodes)
        if not nodes:
            hint = "no fallback node is configured (fallback_nodes or $TAO_NODES)"
            if self.state.token_refused is not None:
                raise AuthenticationFailed(f"{self.state.token_refused}, and {hint}")
            raise NoNodeAvailable(f"{cause} and {hint}")
        return self._own_among(nodes)

    def _own_among(self, nodes: list[str]) -> Grant:
        """The session's fail-open node among `nodes` (sorted, not empty): the same one each time, for its cache."""
        digest = int.from_bytes(hashlib.sha256(self.state.session_id.encode()).digest()[:8], "big")
        url = nodes[digest % len(nodes)].rstrip("/")
        return Grant(url, url, None, detached=True)

    def acquire_body(
        self,
        expected_tokens: int | None,
        attempt: Attempt,
        step: Step | None = None,
        avoid: str | None = None,
        model: str | None = None,
    ) -> dict[str, Any] | None:
        """The next poll of an acquire, or None once `max_wait_s` is spent. Each poll is answered within half the
        request timeout, so a coordinator that stalls is noticed within one request timeout. `step` (else the
        session's) goes with it; `avoid`, for the retry of a refused call, names the node that refused it; `model`,
        the model the call names."""
        left = self.config.max_wait_s - (time.monotonic() - attempt.started)
        if left <= 0:
            return None
        body: dict[str, Any] = {
            "expected_input_tokens": expected_tokens,
            "wait_s": min(self.config.request_timeout_s / 2, left),
        }
        step = step or self.state.step
        if step.step_id is not None:
            body["step_id"] = step.step_id
        if step.expected_next_tools is not None:
            body["expected_next_tools"] = list(step.expected_next_tools)
        if avoid is not None:
            body["avoid_nodes"] = [avoid]
        if model is not None:
            body["model"] = model
        return body

    def answered(self, status: int, answer: Any, attempt: Attempt) -> Grant | str:
        """What an acquire does after one answer: a grant to route by, or the next step (POLL, REGISTER, CONVERGE:
        send `attempt.closing`, then poll again)."""
        if status == 200:
            return replace(self.granted(answer), queued=attempt.queued)
        if status == 202:
            waiting = _parsed(answer)
            if waiting.status != "waiting":
                raise MalformedAnswer("malformed acquire answer: 202 with an admitted answer")
            self.state.queue = queue_state(waiting)
            attempt.queued = attempt.queued or self.state.queue
            tell(self.config.on_queue, self.state.queue)
            return POLL
        if status == 503:  # `check` lets only the no-healthy-node answer through
            return self.no_healthy_node()
        if status in (401, 403, 404) and not attempt.registered_again:
            attempt.registered_again = True
            self.state.registered = False
            return REGISTER
        if status == 409 and not attempt.converged:
            attempt.converged = True
            attempt.closing = self.closing_reports(answer)
            if attempt.closing:
                return CONVERGE
        return self.refused(status, answer)

    def closing_reports(self, answer: Any) -> list[tuple[str, dict[str, Any]]]:
        """After a 409: the reports that close what the coordinator sees open and this client does not."""
        view = session_view(answer)
        if view is None:
            return []
        reports = self.state.ledger.closing_reports(view)
        if reports:
            log.warning(
                "tao: the coordinator still saw finished work of session %s (%s: %s); closing it",
                self.state.session_id,
                view.phase,
                ", ".join(body.get("call_id", "model call") for _, body in reports),
            )
        return reports

    def resend_after(self, path: str, status: int, answer: Any) -> list[tuple[str, dict[str, Any]]]:
        """For a refused tool_start: the reports to send before sending it once more (a lost llm_end, say)."""
        return self.closing_reports(answer) if status == 409 and path.endswith("/tool_start") else []

    def refused(self, status: int, body: Any) -> Grant:
        """The coordinator refused the acquire, and converging did not help (409: a tool of this client is running):
        this call is routed as if detached instead of asking again in a tight loop; the session stays registered."""
        log.warning(
            "tao: acquire for session %s answered %s (%s); routing this call on its own",
            self.state.session_id,
            status,
            body,
        )
        if isinstance(body, dict) and body.get("code") == MODEL_NOT_SERVED and isinstance(body.get("error"), str):
            return self.fallback(body["error"])  # names the model no node serves
        return self.fallback(f"the coordinator refused the call ({status})")

    def no_healthy_node(self) -> Grant:
        if not self.state.fleet_down:
            self.state.fleet_down = True
            log.warning(
                "tao: the coordinator has no healthy node; session %s routes its calls on its own until one is back",
                self.state.session_id,
            )
        return self.fallback("the coordinator has no healthy node")

    def granted(self, body: Any) -> Grant:
        answer = _parsed(body)
        if answer.status != "admitted" or answer.node is None or answer.node_url is None:
            raise MalformedAnswer("malformed acquire answer: 200 without admitting the call")
        grant = Grant(answer.node, answer.node_url, answer.lease_id)
        if answer.lease_id is not None:  # a side call (another model, no lease) is not where the session's calls go
            self.state.last = grant
        self.state.ledger.llm_granted()
        if self.state.fleet_down:
            self.state.fleet_down = False
            log.info("tao: the coordinator has a healthy node again; session %s is scheduled again", grant.node)
        return grant

    def llm_end_body(self, grant: Grant, usage: Any, duration_s: float) -> dict[str, Any]:
        """The report of a granted call's end; the call is no longer in flight from here on."""
        self.state.ledger.llm_ended()
        # Overlapping calls share the session's place, and the coordinator knows only the newest call's lease.
        last = self.state.last
        lease_id = last.lease_id if last is not None and last.node == grant.node and last.lease_id else grant.lease_id
        error = usage.error or ("refused" if usage.refused else None)
        body = LlmEndRequest(
            lease_id=lease_id,
            node=grant.node,
            prompt_tokens=usage.prompt_tokens,
            cached_tokens=usage.cached_tokens,
            completion_tokens=usage.completion_tokens,
            ttft_s=usage.ttft_s,
            duration_s=duration_s,
            error=None if error is None else error[:ERROR_MAX_CHARS],
            refused=usage.refused,
        )
        return body.model_dump(mode="json", exclude_none=True, exclude_defaults=True)

    def refusal_noted(self, grant: Grant, how: str) -> None:
        """A node refused a call of this session: said once per node in the log, at every call in the debug log."""
        if grant.node not in self.state.refusers:
            self.state.refusers.add(grant.node)
            log.warning("tao: node %s refused a call of session %s (%s)", grant.node, self.state.session_id, how)
        else:
            log.debug("tao: node %s refused a call of session %s (%s)", grant.node, self.state.session_id, how)

    def fallback_after(self, refused: Grant) -> Grant | None:
        """For a refused call the coordinator cannot place: the session's own fail-open node among the others than
        the refuser; None when the refuser is the only one."""
        url = refused.node_url.rstrip("/")
        others = sorted({node.rstrip("/") for node in self.config.fallback_nodes} - {url})
        return self._own_among(others) if others else None

    def rerouted(self, status: int, answer: Any, refused: Grant) -> Grant | None:
        """Where the coordinator sends a refused call (its answer to an acquire avoiding the refuser): its grant;
        None when it says no other node can take it (the caller gets the refusal); another fail-open node
        when it cannot say (no node healthy, the session unknown after a restart, …)."""
        if status == 200:
            return self.granted(answer)
        code = answer.get("code") if isinstance(answer, dict) else None
        if status == 503 and code == NO_OTHER_NODE:
            log.debug("tao: no node but %s can take the call of session %s", refused.node, self.state.session_id)
            return None
        return self.fallback_after(refused)

    def served_instead(self, grant: Grant) -> None:
        """The retry of a refused call was answered by `grant`'s node: routing on its own, the session sticks to it."""
        self.state.retried_calls += 1
        if grant.detached:
            self.state.last = grant

    def tool_start_body(self, call_id: str, tool: str, hints: ToolHints, program: str | None) -> Any:
        self.state.ledger.tool_started(call_id)
        body = ToolStartRequest(call_id=call_id, tool=tool, hints=hints, program=program)
        return body.model_dump(mode="json", exclude_none=True)

    def tool_end_body(self, call_id: str, duration_s: float | None, status: str) -> dict[str, Any]:
        body = {"call_id": call_id, "duration_s": duration_s, "status": status}
        self.state.ledger.tool_ended(call_id, body)
        return body


FLEET_CODES = frozenset({NO_HEALTHY_NODE, NO_OTHER_NODE})
"""The codes of a 503 that is an answer about the fleet, not the coordinator failing."""


def check(response: httpx2.Response) -> Any:
    """The answer's JSON body; a 5xx raises `Unreachable`, except the 503s about the fleet (no node is healthy, no
    other node can take a refused call: the coordinator is there, and answered)."""
    if response.status_code >= 500:
        if response.status_code == 503 and _fleet_answer(response):
            return response.json()
        raise Unreachable(f"{response.request.url.path} answered {response.status_code}")
    return response.json() if response.content else None


def _fleet_answer(response: httpx2.Response) -> bool:
    try:
        body = response.json()
    except ValueError:
        return False
    return isinstance(body, dict) and body.get("code") in FLEET_CODES


def _parsed(body: Any) -> AcquireResponse:
    """An acquire's answer as the protocol has it; `MalformedAnswer` naming the first fault when it is not one."""
    try:
        return AcquireResponse.model_validate(body)
    except pydantic.ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "body"
        raise MalformedAnswer(f"malformed acquire answer: {where}: {first['msg']}") from None


def _final(failure: BaseException | NotLeader) -> BaseException:
    if isinstance(failure, BaseException):
        return failure
    return Unreachable(f"the coordinator answered {failure.status}: it is not the leader, and named none")


REPORT_ERRORS = (httpx2.HTTPError, Unreachable, ValueError)


def describe(error: BaseException) -> str:
    text = str(error)
    return f"{type(error).__name__}: {text}" if text else type(error).__name__
