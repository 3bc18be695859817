"""vLLM's runtime LoRA routes (served only with `VLLM_ALLOW_RUNTIME_LORA_UPDATING`, here `allow_runtime_lora_updating`):
`POST /v1/load_lora_adapter {"lora_name", "lora_path", "load_inplace"}` and `POST /v1/unload_lora_adapter
{"lora_name"}`, answered as vLLM 0.33's `OpenAIServingModels` answers them: a plain-text 200 "Success: ...", a 400
`InvalidUserInput` for a missing name or path or an adapter loaded twice without `load_inplace`, a 404 `NotFoundError`
for unloading an adapter that is not loaded. The fake has no weights to read, so any path loads.

The node's catalog (`NodeService.models`) is replaced, never mutated: a request in flight keeps the name it was
admitted under. A name the base model is served under cannot become an adapter's (vLLM would accept it and then never
route to it, since a base name wins): refused as `InvalidUserInput` too.
"""

from __future__ import annotations

from aiohttp import web
from pydantic import BaseModel, ConfigDict

from .errors import BadRequest, ModelNotFound
from .http_common import NODE_SERVICE, read_request_model
from .model_cards import LoraModule


class InvalidUserInput(BadRequest):
    kind = "InvalidUserInput"


class LoadLoraAdapterRequest(BaseModel):
    model_config = ConfigDict(extra="allow")

    lora_name: str
    lora_path: str
    load_inplace: bool = False


class UnloadLoraAdapterRequest(BaseModel):
    model_config = ConfigDict(extra="allow")

    lora_name: str
    lora_int_id: int | None = None


async def load_lora_adapter(request: web.Request) -> web.Response:
    service = request.app[NODE_SERVICE]
    body = await read_request_model(request, LoadLoraAdapterRequest)
    name = body.lora_name
    if not name or not body.lora_path:
        raise InvalidUserInput("Both 'lora_name' and 'lora_path' must be provided.")
    if name in service.models.names:
        raise InvalidUserInput(f"The lora adapter '{name}' is a name the base model is served under.")
    loaded = any(adapter.name == name for adapter in service.models.adapters)
    if loaded and not body.load_inplace:
        raise InvalidUserInput(
            f"The lora adapter '{name}' has already been loaded. "
            "If you want to load the adapter in place, set 'load_inplace' to True."
        )
    service.models = service.models.with_adapter(LoraModule(name=name, path=body.lora_path))
    return web.Response(text=f"Success: LoRA adapter '{name}' added successfully.")


async def unload_lora_adapter(request: web.Request) -> web.Response:
    service = request.app[NODE_SERVICE]
    body = await read_request_model(request, UnloadLoraAdapterRequest)
    name = body.lora_name
    if not name:
        raise InvalidUserInput("'lora_name' needs to be provided to unload a LoRA adapter.")
    if not any(adapter.name == name for adapter in service.models.adapters):
        raise ModelNotFound(f"The lora adapter '{name}' cannot be found.")
    service.models = service.models.without_adapter(name)
    return web.Response(text=f"Success: LoRA adapter '{name}' removed successfully.")
