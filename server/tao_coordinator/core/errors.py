"""Errors the pure core raises.

Every error leaves the coordinator's state exactly as it was before the offending event: handlers validate first and
mutate last. The live driver maps them to 4xx answers (`UnknownSession` → 404, the rest → 409/422).

    CoreError
    ├── InvalidEvent        a field of an event is out of range (names the field)
    ├── UnknownSession      the session id was never registered, or was closed and forgotten
    ├── UnknownNode         the node id is not part of the fleet
    ├── DuplicateSession    register with an id that is already live
    ├── IllegalTransition   the event is not allowed in the session's current phase
    │   └── NoOtherNode     a refused call's retry cannot be placed away from the nodes it must avoid
    └── ModelNotServed      an acquire names a model no healthy node serves
"""

from __future__ import annotations


class CoreError(Exception):
    """Base class of everything the core raises on bad input."""


class InvalidEvent(CoreError, ValueError):
    """An event carries a value that cannot be right (negative tokens, empty id, ...)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


class UnknownSession(CoreError, KeyError):
    """An event names a session the coordinator does not know."""

    def __init__(self, session_id: str) -> None:
        super().__init__(session_id)
        self.session_id = session_id

    def __str__(self) -> str:
        return f"unknown session {self.session_id!r}"


class UnknownNode(CoreError, KeyError):
    """An event names a node that is not part of the fleet."""

    def __init__(self, node_id: str) -> None:
        super().__init__(node_id)
        self.node_id = node_id

    def __str__(self) -> str:
        return f"unknown node {self.node_id!r}"


class DuplicateSession(CoreError):
    """A session id was registered twice while the first registration is still live."""

    def __init__(self, session_id: str) -> None:
        super().__init__(f"session {session_id!r} is already registered")
        self.session_id = session_id


class IllegalTransition(CoreError):
    """The event is not allowed in the session's current phase; the session is left unchanged."""

    def __init__(self, session_id: str, phase: str, event: str, detail: str = "") -> None:
        message = f"session {session_id!r}: {event} is not allowed in phase {phase}"
        super().__init__(f"{message} ({detail})" if detail else message)
        self.session_id = session_id
        self.phase = phase
        self.event = event


class NoOtherNode(IllegalTransition):
    """An acquire with `avoid_nodes` (the retry of a refused call) finds no usable node but those, or the session's
    other call runs on one of them; nothing changed, and the client keeps the refusal it had."""


class ModelNotServed(CoreError):
    """An acquire's model (or its session's main model) is served by no healthy node: the call is placed nowhere,
    and nothing changed."""

    def __init__(self, session_id: str, model: str) -> None:
        super().__init__(f"session {session_id!r}: no healthy node serves the model {model!r}")
        self.session_id = session_id
        self.model = model
