"""The model a model call names: the `model` field of its JSON request body (OpenAI's and Anthropic's wire alike),
sent with the call's acquire so the coordinator places it on a node serving that model.

Invariant: a body that is not a JSON object, or whose `model` is not a name the protocol accepts (a string of 1–200
characters), names no model (None): the acquire then goes without one, as before models were sent, rather than
being refused for what the client put in its own request.
"""

from __future__ import annotations

import json

MODEL_NAME_MAX = 200


def call_model(body: bytes) -> str | None:
    if b'"model"' not in body:
        return None  # most bodies name it; the check spares parsing those that cannot
    try:
        parsed = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None
    return model_named(parsed)


def model_named(payload: object) -> str | None:
    """The model a parsed request body names (for a caller that parsed it already)."""
    model = payload.get("model") if isinstance(payload, dict) else None
    return model if isinstance(model, str) and 0 < len(model) <= MODEL_NAME_MAX else None
