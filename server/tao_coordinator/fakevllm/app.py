"""The aiohttp application of one fake node: vLLM's routes, plus `/fake/policy` to script behaviour at run time.

Routes (§2, §4, §5 of the vLLM reference): `POST /v1/chat/completions`, `/v1/completions`, `/v1/messages`,
`/v1/messages/count_tokens`, `/tokenize`, `/reset_prefix_cache`; `GET /v1/models`, `/health` (empty 200),
`/ping` (also POST), `/version`, `/load`, `/metrics`, `/kv_event_sources`. `GET /fake/policy` returns the scripted
behaviour, `PUT /fake/policy` replaces it (400 naming the problem when invalid); `GET`/`PUT /fake/faults` and
`POST /fake/restart` do the same for injected faults (`faults.py`). `POST /v1/load_lora_adapter` and
`/v1/unload_lora_adapter` exist only with `allow_runtime_lora_updating` (`lora_api.py`). The service starts and
stops with the application (`cleanup_ctx`).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from aiohttp import web
from pydantic import ValidationError

from .anthropic_api import count_tokens, messages
from .config import VLLM_VERSION, FakeNodeConfig
from .errors import BadRequest
from .faults import Faults, faulty_metrics
from .http_common import NODE_SERVICE, check_model, dumps
from .lora_api import load_lora_adapter, unload_lora_adapter
from .metrics import CONTENT_TYPE
from .middleware import api_error_middleware
from .openai_api import chat_completions, completions
from .policy import ReplyPolicy
from .schemas import ChatCompletionRequest, TokenizeRequest, parse_body
from .service import NodeService
from .template import render_chat
from .tokenizer import encode


class FaultSwitch:
    """The faults in force on one node (the application's state is frozen once it runs: this holder is not)."""

    def __init__(self, faults: Faults | None = None) -> None:
        self.faults = faults or Faults()


FAULTS = web.AppKey("faults", FaultSwitch)


async def health(request: web.Request) -> web.Response:
    """Empty 200 while the engine loop runs; 503 once it died (vLLM: EngineDeadError)."""
    return web.Response(status=200 if request.app[NODE_SERVICE].driver.alive else 503)


async def version(request: web.Request) -> web.Response:
    return web.json_response({"version": VLLM_VERSION})


async def load(request: web.Request) -> web.Response:
    return web.json_response({"server_load": request.app[NODE_SERVICE].driver.in_flight})


async def models(request: web.Request) -> web.Response:
    service = request.app[NODE_SERVICE]
    listed = service.models.model_list(int(service.started), service.max_model_len)
    return web.json_response(listed, dumps=dumps)


async def metrics(request: web.Request) -> web.Response:
    faults = request.app[FAULTS].faults
    if faults.metrics_delay_s > 0:
        await asyncio.sleep(faults.metrics_delay_s)
    body = faulty_metrics(faults, request.app[NODE_SERVICE].metrics.render())
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE})


async def kv_event_sources(request: web.Request) -> web.Response:
    """vLLM ≥ 0.31: an object keyed by data-parallel rank (`"0"`: the fake's one rank), empty without KV events."""
    publisher = request.app[NODE_SERVICE].publisher
    if publisher is None:
        return web.json_response({})
    source = {
        "endpoint": publisher.endpoint,
        "replay_endpoint": publisher.replay_endpoint,
        "topic": publisher.config.topic,
    }
    return web.json_response({"0": source})


async def reset_prefix_cache(request: web.Request) -> web.Response:
    reset_external = request.query.get("reset_external", "false").lower() == "true"
    if not request.app[NODE_SERVICE].reset_prefix_cache(reset_external):
        raise BadRequest("Failed to reset prefix cache: some blocks are still in use by running requests")
    return web.Response(status=200)


async def tokenize(request: web.Request) -> web.Response:
    service = request.app[NODE_SERVICE]
    body = parse_body(await request.read(), TokenizeRequest)
    check_model(service, body.model)
    if body.messages is not None:
        chat = ChatCompletionRequest.model_validate({"messages": body.messages, "tools": body.tools})
        text = render_chat(chat.messages, chat.tools)
    elif body.prompt is not None:
        text = body.prompt
    else:
        raise BadRequest("tokenize: give either 'prompt' or 'messages'")
    tokens = encode(text)
    return web.json_response({"count": len(tokens), "max_model_len": service.max_model_len, "tokens": tokens})


async def get_policy(request: web.Request) -> web.Response:
    return web.json_response(request.app[NODE_SERVICE].policy.model_dump(exclude_none=True))


async def put_policy(request: web.Request) -> web.Response:
    try:
        policy = ReplyPolicy.model_validate_json(await request.read())
    except ValidationError as error:
        raise BadRequest(f"invalid policy: {error}") from None
    request.app[NODE_SERVICE].policy = policy
    return web.json_response(policy.model_dump(exclude_none=True))


async def get_faults(request: web.Request) -> web.Response:
    return web.json_response(request.app[FAULTS].faults.model_dump())


async def put_faults(request: web.Request) -> web.Response:
    try:
        faults = Faults.model_validate_json(await request.read())
    except ValidationError as error:
        raise BadRequest(f"invalid faults: {error}") from None
    request.app[FAULTS].faults = faults
    return web.json_response(faults.model_dump())


async def restart(request: web.Request) -> web.Response:
    request.app[NODE_SERVICE].restart()
    return web.Response(status=200)


def create_node_app(config: FakeNodeConfig) -> web.Application:
    app = web.Application(middlewares=[api_error_middleware], client_max_size=256 * 1024 * 1024)
    app[NODE_SERVICE] = NodeService(config)
    app[FAULTS] = FaultSwitch()

    async def lifecycle(app: web.Application) -> AsyncIterator[None]:
        await app[NODE_SERVICE].start()
        yield
        await app[NODE_SERVICE].stop()

    app.cleanup_ctx.append(lifecycle)
    routes = app.router
    routes.add_post("/v1/chat/completions", chat_completions)
    routes.add_post("/v1/completions", completions)
    routes.add_post("/v1/messages", messages)
    routes.add_post("/v1/messages/count_tokens", count_tokens)
    routes.add_post("/tokenize", tokenize)
    routes.add_post("/reset_prefix_cache", reset_prefix_cache)
    routes.add_get("/v1/models", models)
    routes.add_get("/health", health)
    routes.add_get("/ping", health)
    routes.add_post("/ping", health)
    routes.add_get("/version", version)
    routes.add_get("/load", load)
    routes.add_get("/metrics", metrics)
    routes.add_get("/kv_event_sources", kv_event_sources)
    routes.add_get("/fake/policy", get_policy)
    routes.add_put("/fake/policy", put_policy)
    routes.add_get("/fake/faults", get_faults)
    routes.add_put("/fake/faults", put_faults)
    routes.add_post("/fake/restart", restart)
    if config.allow_runtime_lora_updating:
        routes.add_post("/v1/load_lora_adapter", load_lora_adapter)
        routes.add_post("/v1/unload_lora_adapter", unload_lora_adapter)
    return app
