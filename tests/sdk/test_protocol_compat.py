"""Rolling upgrades: a client reads the answers of a coordinator newer than itself (fields it does not know are
ignored), while a request with a field the coordinator does not know is still refused, naming it."""

import pytest
from pydantic import BaseModel, ValidationError

from tao_sdk import protocol

ANSWERS = [
    (protocol.AcquireResponse, {"status": "admitted", "node": "a", "node_url": "http://127.0.0.1:9"}),
    (protocol.AcquireResponse, {"status": "waiting", "queue_position": 3, "estimated_wait_s": 4.5}),
    (
        protocol.NodeInfo,
        {"name": "a", "url": "http://127.0.0.1:9", "healthy": True, "capacity_tokens": 1, "used_tokens": 0}
        | {"prefix_hit_rate": 0.5, "sessions": 0},
    ),
    (protocol.ErrorBody, {"error": "no"}),
    (protocol.RegisterResponse, {"session_id": "s", "session_token": "t", "lease_ttl_s": 60}),
    (protocol.EventsResponse, {"results": []}),
]


@pytest.mark.parametrize(("model", "body"), ANSWERS, ids=lambda v: getattr(v, "__name__", ""))
def test_an_answer_with_a_field_from_a_newer_coordinator_is_read(model: type[BaseModel], body: dict) -> None:
    read = model.model_validate({**body, "a_field_from_the_future": {"nested": [1, 2]}})
    assert read.model_dump(include=set(body)) == model.model_validate(body).model_dump(include=set(body))


def test_a_request_with_an_unknown_field_is_refused_naming_it() -> None:
    with pytest.raises(ValidationError, match="avoid_node"):
        protocol.AcquireRequest.model_validate({"avoid_node": ["a"]})


def test_every_body_is_either_a_strict_request_or_a_lenient_answer() -> None:
    models = [v for v in vars(protocol).values() if isinstance(v, type) and issubclass(v, BaseModel)]
    kinds = {m.__name__: m.model_config.get("extra") for m in models if m.__module__ == protocol.__name__}
    assert set(kinds.values()) == {"forbid", "ignore"}
    assert kinds["AcquireRequest"] == kinds["LlmEndRequest"] == kinds["BatchedEvent"] == "forbid"
    assert kinds["AcquireResponse"] == kinds["NodeInfo"] == kinds["SessionTimeline"] == "ignore"
