"""Router-side load bookkeeping shared by the per-request baselines: calls in flight per node, as a router counts them.

A router knows what it dispatched and what finished, nothing else: `dispatch` when it routes a call, and the
`LlmEnd` / `Close` events it observes. Overlapping calls of one session (which the coordinator routes to the running
call's node without asking the router) are not counted, as a router that only sees dispatches would not count them.

`InFlight` counts calls per node (least-loaded, SGLang). `OpenCalls` keeps what a router booked for each session's
call in flight (Dynamo's slot tracker, cost-model's calls): one per session, replaced by the session's next
dispatch, gone at its `LlmEnd` or `Close`.

Invariants: every count is ≥ 0; `open_calls[s]` is the number of calls of session s dispatched and not ended, all on
`node_of[s]`; `OpenCalls` holds at most one call per session, listed in the order the sessions were first booked.
"""

from __future__ import annotations

from typing import Generic, Protocol, TypeVar

from ..core.events import Close, Event, LlmEnd
from ..core.model import AgentSession, NodeId, SessionId


def prompt_tokens(session: AgentSession) -> int:
    """The prompt of the call being routed, as a router sizes it: announced, else the session's context so far."""
    return session.expected_input_tokens or session.context_tokens


class InFlight:
    def __init__(self) -> None:
        self.count: dict[NodeId, int] = {}
        self.processed: dict[NodeId, int] = {}
        """Calls dispatched to each node so far (SGLang's tie-break after load)."""
        self.node_of: dict[SessionId, NodeId] = {}
        self.open_calls: dict[SessionId, int] = {}

    def load(self, node: NodeId) -> int:
        return self.count.get(node, 0)

    def dispatch(self, session_id: SessionId, node: NodeId) -> None:
        self.count[node] = self.count.get(node, 0) + 1
        self.processed[node] = self.processed.get(node, 0) + 1
        self.node_of[session_id] = node
        self.open_calls[session_id] = self.open_calls.get(session_id, 0) + 1

    def observe(self, event: Event) -> None:
        """Count a call's end (or a closed session's open calls) off."""
        if isinstance(event, LlmEnd):
            self._end(event.session_id, 1)
        elif isinstance(event, Close):
            self._end(event.session_id, self.open_calls.get(event.session_id, 0))
            self.node_of.pop(event.session_id, None)
            self.open_calls.pop(event.session_id, None)

    def _end(self, session_id: SessionId, calls: int) -> None:
        open_calls = self.open_calls.get(session_id, 0)
        node = self.node_of.get(session_id)
        calls = min(calls, open_calls)
        if node is None or calls == 0:
            return
        self.open_calls[session_id] = open_calls - calls
        self.count[node] = max(0, self.count.get(node, 0) - calls)


class Booked(Protocol):
    @property
    def node(self) -> NodeId: ...


CallT = TypeVar("CallT", bound=Booked)


class OpenCalls(Generic[CallT]):
    def __init__(self) -> None:
        self._calls: dict[SessionId, CallT] = {}

    def __len__(self) -> int:
        return len(self._calls)

    def book(self, session_id: SessionId, call: CallT) -> None:
        self._calls[session_id] = call

    def on(self, node_id: NodeId) -> list[CallT]:
        return [call for call in self._calls.values() if call.node == node_id]

    def at(self, session_id: SessionId, node_id: NodeId) -> CallT | None:
        """The session's call if it runs on `node_id` (an event from another node is about another call)."""
        call = self._calls.get(session_id)
        return call if call is not None and call.node == node_id else None

    def end(self, session_id: SessionId) -> CallT | None:
        return self._calls.pop(session_id, None)
