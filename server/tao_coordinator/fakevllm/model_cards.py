"""The models one fake node serves, as vLLM 0.33 serves them: one base model under one or more names, and LoRA
adapters on it.

vLLM's `--served-model-name A B` serves the base model under both names: the first is the one `/metrics` labels
(`model_name`) and the one a call to the base model is answered with, whichever name it used (vLLM's
`OpenAIServingModels.model_name`). `--lora-modules name=path` adds an adapter; a call naming it is answered with its
name. `GET /v1/models` lists a card per base name (`root` = the model path, `--model`; `max_model_len` set), then a
card per adapter (`root` = its path, `parent` = its base model, `max_model_len` null), in that order, as
`OpenAIServingModels.show_available_models` builds them. Any other name is answered 404 (`not_found_message`).

With `allow_runtime_lora_updating` (vLLM's `VLLM_ALLOW_RUNTIME_LORA_UPDATING`) adapters are loaded and unloaded
while the node runs (`lora_api.py`); a restart forgets those, as a new vLLM process would.

Invariants: base names and adapter names are all distinct (`FakeNodeConfig` refuses a repeated one), so a name
resolves to at most one model; a node with one name and no adapter lists one card, `root` = its name unless
`--model` says otherwise.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class LoraModule(BaseModel):
    """One of vLLM's `--lora-modules`: an adapter served under its own name."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    name: str = Field(min_length=1)
    """The name calls use to ask for the adapter."""
    path: str = Field(min_length=1)
    """Where the adapter was loaded from: its card's `root`."""
    base_model_name: str | None = None
    """The base model's served name: its card's `parent`. None, or a name the node does not serve (vLLM ignores
    it then): the first served name."""


def parse_lora_module(text: str) -> LoraModule:
    """One `--lora-modules` item as vLLM reads it: `name=path`, or JSON `{"name", "path", "base_model_name"}`."""
    text = text.strip()
    if text.startswith("{"):
        return LoraModule.model_validate(json.loads(text))
    name, equals, path = text.partition("=")
    if not equals:
        raise ValueError(f"--lora-modules {text!r}: expected name=path or a JSON object")
    return LoraModule(name=name, path=path)


@dataclass(frozen=True, slots=True)
class ModelCatalog:
    """What one node serves: `names[0]` is the base model's main name, the rest its aliases."""

    names: tuple[str, ...]
    root: str
    """The base model's path (vLLM's `--model`), `root` of every base card."""
    adapters: tuple[LoraModule, ...] = ()

    def answer_name(self, requested: str) -> str | None:
        """The model name a call for `requested` is answered with; None: the node does not serve it."""
        if requested in self.names:
            return self.names[0]
        if any(adapter.name == requested for adapter in self.adapters):
            return requested
        return None

    def with_adapter(self, adapter: LoraModule) -> ModelCatalog:
        """The catalog with `adapter` added, or in place of the adapter of its name."""
        kept = tuple(a for a in self.adapters if a.name != adapter.name)
        if len(kept) == len(self.adapters):
            return replace(self, adapters=(*self.adapters, adapter))
        return replace(self, adapters=tuple(adapter if a.name == adapter.name else a for a in self.adapters))

    def without_adapter(self, name: str) -> ModelCatalog:
        return replace(self, adapters=tuple(a for a in self.adapters if a.name != name))

    def not_found_message(self, requested: str) -> str:
        return f"The model `{requested}` does not exist. Valid aliases: {', '.join(self.names)}."

    def parent(self, adapter: LoraModule) -> str:
        return adapter.base_model_name if adapter.base_model_name in self.names else self.names[0]

    def model_list(self, created: int, max_model_len: int) -> dict[str, Any]:
        """The body of `GET /v1/models`."""
        base = [self._card(name, self.root, None, max_model_len, created) for name in self.names]
        loras = [self._card(a.name, a.path, self.parent(a), None, created) for a in self.adapters]
        return {"object": "list", "data": base + loras}

    @staticmethod
    def _card(name: str, root: str, parent: str | None, max_model_len: int | None, created: int) -> dict[str, Any]:
        permission = {
            "id": f"modelperm-{name}",
            "object": "model_permission",
            "created": created,
            "allow_create_engine": False,
            "allow_sampling": True,
            "allow_logprobs": True,
            "allow_search_indices": False,
            "allow_view": True,
            "allow_fine_tuning": False,
            "organization": "*",
            "group": None,
            "is_blocking": False,
        }
        return {
            "id": name,
            "object": "model",
            "created": created,
            "owned_by": "vllm",
            "root": root,
            "parent": parent,
            "max_model_len": max_model_len,
            "permission": [permission],
        }
