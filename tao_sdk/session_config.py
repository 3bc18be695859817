"""`SessionConfig`: everything a user sets about one session, validated once where it is built.

`tao_sdk.session(...)`, `tao proxy` and the integrations all build it from keywords (`connect_timeout_s=1.0`, …):
an unknown keyword or a value of the wrong type or range raises `ConfigurationError` naming the option, before
anything is sent. The model is frozen: a changed setting (the proxy's fail-open nodes, say) is a new copy
(`model_copy(update=…)`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, TypeVar

import pydantic

from .errors import ConfigurationError
from .protocol import AgentContext
from .queue_state import QueueCallback
from .replicas import coordinator_urls

__all__ = ["SessionConfig", "validated"]

Model = TypeVar("Model", bound=pydantic.BaseModel)


class SessionConfig(pydantic.BaseModel):
    """How one session reaches the coordinator, and how long it waits for it (`router.py` has the bounds)."""

    model_config = pydantic.ConfigDict(frozen=True, extra="forbid")

    coordinator: str | Sequence[str] | None = None
    """Base URL of the coordinator (e.g. http://127.0.0.1:8700), or the URLs of its replicas (comma-separated, or a
    sequence), whose leader the session follows; None: always detached."""
    token: str | None = None
    """The coordinator's API token (needed to register unless it runs with --insecure-no-auth)."""
    context: AgentContext = pydantic.Field(default_factory=AgentContext)
    """What the agent is (`AgentContext`), sent when the session registers."""
    session_id: str | None = None
    """The session's id; None: a fresh one."""
    fallback_nodes: tuple[str, ...] = ()
    """Root URLs of nodes to use when the coordinator is unreachable."""
    connect_timeout_s: Annotated[float, pydantic.Field(gt=0)] = 0.5
    """The longest a connection to the coordinator may take."""
    request_timeout_s: Annotated[float, pydantic.Field(gt=0)] = 2.0
    """The longest one request to the coordinator may take, its answer included."""
    max_wait_s: Annotated[float, pydantic.Field(ge=0)] = 300.0
    """The longest a model call waits for a place before it is routed on its own."""
    retry_interval_s: Annotated[float, pydantic.Field(ge=0)] = 5.0
    """While detached: how often the coordinator is tried again."""
    failover_wait_s: Annotated[float, pydantic.Field(ge=0)] = 10.0
    """With several replicas: how long no replica may answer as leader before the session routes on its own."""
    on_queue: QueueCallback | None = None
    """Called with each `QueueState` while a model call waits for a place (in the thread or event loop of the call);
    what it raises is logged and ignored."""

    @property
    def coordinators(self) -> tuple[str, ...]:
        """The coordinator's URLs, in the order given (`replicas.coordinator_urls`)."""
        return coordinator_urls(self.coordinator)

    @classmethod
    def of(cls, **options: Any) -> SessionConfig:
        """The configuration `options` describe; `ConfigurationError` naming the first bad one."""
        return validated(cls, options)


def validated(model: type[Model], fields: dict[str, Any]) -> Model:
    """`fields` as `model`; `ConfigurationError` naming the first bad field (an unknown one: "not an option")."""
    try:
        return model.model_validate(fields)
    except pydantic.ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        if first["type"] == "extra_forbidden":
            known = ", ".join(model.model_fields)
            raise ConfigurationError(f"{where}: not an option of {model.__name__} (its options: {known})") from None
        raise ConfigurationError(f"{where}: {first['msg']}") from None
