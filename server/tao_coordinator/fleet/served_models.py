"""What one vLLM node serves, learned from its `GET /v1/models`: the base model's names and the LoRA adapters on it.

vLLM lists a card per served name of its base model (`--served-model-name A B`: two cards, `parent` null,
`max_model_len` set), then a card per LoRA adapter (`parent` = the base model's name it runs on). A call naming any of
these is served by the node; any other name is answered 404. `parse_models` reads that list into `ServedModels`;
`fetch_served_models` asks a node for it with the fleet's HTTP conventions (the caller's `aiohttp` session, one total
timeout per request, as `poller.py` scrapes `/metrics`).

Invariants: a `ServedModels` names at least one model, and every name once (a list that repeats a name, or names
none, is refused: a node's eligibility must not hang on which of two cards was read). Every failure is a
`ModelsUnknown` with a `kind` — a bounded label for counting, as the scrape failures of `poller.py` — and a reason
for people: "unreachable", "timeout", "connection" (the transport), "unauthorized" (401/403: the node wants an API
key the coordinator does not hold), "http" (another status), "malformed" (not JSON, or not a model list), "empty"
(a model list naming no model). Fields vLLM adds that are not read here (`root`, `permission`, ...) are ignored, so
another OpenAI-compatible server's list (no `parent`, no `max_model_len`) reads as base models of unknown length.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import aiohttp

MODELS_PATH = "/v1/models"
KEY_REQUIRED = frozenset({401, 403})


@dataclass(frozen=True, slots=True)
class LoraAdapter:
    name: str
    base: str
    """The card's `parent`: the base model's served name the adapter runs on."""


@dataclass(frozen=True, slots=True)
class ServedModels:
    base_names: tuple[str, ...]
    """The base model's served names in the node's order (vLLM's first is the one its metrics' `model_name` shows);
    more than one base model when a server lists several (vLLM lists one, under every name)."""
    adapters: tuple[LoraAdapter, ...] = ()
    max_model_len: int | None = None
    """The base model's context length (the longest listed), None when the node does not say."""

    @property
    def names(self) -> frozenset[str]:
        """Every name a call may use on this node."""
        return frozenset(self.base_names) | {adapter.name for adapter in self.adapters}


class ModelsUnknown(Exception):
    """The node's served models could not be learned: `kind` (see the module docstring) and `reason`."""

    def __init__(self, kind: str, reason: str) -> None:
        super().__init__(reason)
        self.kind, self.reason = kind, reason


def parse_models(body: bytes | str) -> ServedModels:
    """A `GET /v1/models` body as `ServedModels`; `ModelsUnknown` ("malformed" or "empty") when it is not one."""
    try:
        listed = json.loads(body)
    except (ValueError, UnicodeDecodeError) as error:  # JSONDecodeError is a ValueError
        raise ModelsUnknown("malformed", f"{MODELS_PATH} is not JSON: {error}") from None
    data = listed.get("data") if isinstance(listed, dict) else None
    if not isinstance(data, list):
        raise ModelsUnknown("malformed", f"{MODELS_PATH} is not a model list (no `data` array)")
    if not data:
        raise ModelsUnknown("empty", f"{MODELS_PATH} lists no model")
    bases: list[str] = []
    adapters: list[LoraAdapter] = []
    lengths: list[int] = []
    seen: set[str] = set()
    for index, card in enumerate(data):
        name, parent, length = _card(index, card)
        if name in seen:
            raise ModelsUnknown("malformed", f"{MODELS_PATH} lists the model {name!r} twice")
        seen.add(name)
        if parent is None:
            bases.append(name)
            if length is not None:
                lengths.append(length)
        else:
            adapters.append(LoraAdapter(name, parent))
    if not bases:
        raise ModelsUnknown("malformed", f"{MODELS_PATH} lists adapters but no base model")
    return ServedModels(tuple(bases), tuple(adapters), max(lengths, default=None))


def _card(index: int, card: Any) -> tuple[str, str | None, int | None]:
    """A card's `id`, `parent` (None: a base model) and `max_model_len` (None: not said), each checked."""
    where = f"{MODELS_PATH} card {index}"
    if not isinstance(card, dict):
        raise ModelsUnknown("malformed", f"{where} is not an object")
    name = card.get("id")
    if not isinstance(name, str) or not name:
        raise ModelsUnknown("malformed", f"{where} has no model name (`id`)")
    parent = card.get("parent")
    if parent is not None and (not isinstance(parent, str) or not parent):
        raise ModelsUnknown("malformed", f"{where} ({name!r}) has a `parent` that is not a model name: {parent!r}")
    length = card.get("max_model_len")
    if length is not None and (isinstance(length, bool) or not isinstance(length, int) or length <= 0):
        raise ModelsUnknown("malformed", f"{where} ({name!r}) has a `max_model_len` that is not a length: {length!r}")
    return name, parent, length


async def fetch_served_models(http: aiohttp.ClientSession, url: str, timeout_s: float) -> ServedModels:
    """What the node at `url` serves; `ModelsUnknown` naming why when it cannot be learned within `timeout_s`."""
    try:
        async with http.get(url + MODELS_PATH, timeout=aiohttp.ClientTimeout(total=timeout_s)) as reply:
            if reply.status in KEY_REQUIRED:
                raise ModelsUnknown("unauthorized", f"{MODELS_PATH} answered {reply.status}: the node wants an API key")
            if reply.status != 200:
                raise ModelsUnknown("http", f"{MODELS_PATH} answered {reply.status}")
            body = await reply.read()
    except TimeoutError:  # aiohttp's timeouts are TimeoutErrors too
        raise ModelsUnknown("timeout", f"no answer within {timeout_s:g} s") from None
    except aiohttp.ClientConnectorError as error:
        raise ModelsUnknown("unreachable", f"cannot connect: {error.os_error.strerror or error}") from None
    except aiohttp.ClientError as error:
        raise ModelsUnknown("connection", str(error) or type(error).__name__) from None
    return parse_models(body)
