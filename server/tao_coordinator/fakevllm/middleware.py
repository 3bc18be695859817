"""The one middleware of a fake node: an `ApiError` becomes vLLM's error response (`errors.py`), any other exception
a 500 with its message, as vLLM answers rather than dropping the connection."""

from __future__ import annotations

import logging
from http import HTTPStatus

from aiohttp import web
from aiohttp.typedefs import Handler

from .errors import ApiError, compact, error_body, openai_error_body

log = logging.getLogger(__name__)


def error_response(error: ApiError) -> web.Response:
    return web.json_response(error_body(error), status=error.status, dumps=compact)


@web.middleware
async def api_error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except ApiError as error:
        return error_response(error)
    except web.HTTPException:
        raise
    except Exception as error:  # vLLM answers 500 with the message rather than dropping the connection
        log.exception("unhandled error in %s %s", request.method, request.path)
        body = openai_error_body(str(error), HTTPStatus.INTERNAL_SERVER_ERROR)
        return web.json_response(body, status=HTTPStatus.INTERNAL_SERVER_ERROR)
