"""Reading a request body: within a time bound, as strict JSON, into one of the protocol's pydantic models.

Invariants: a body is read in at most `server.body_timeout_s` (else 408, and the connection is closed) and is at
most `server.max_body_bytes` long (else 413, enforced by aiohttp); every JSON number is finite and every integer has
at most `MAX_INT_DIGITS` digits, so no value reaches validation that Python cannot hold or compare cheaply; whatever
is wrong with a body is a `RequestError` naming it — a body never causes a 5xx.
"""

from __future__ import annotations

import asyncio
import json
import math
from typing import TypeVar

from aiohttp import ClientPayloadError, web
from aiohttp.http_exceptions import HttpProcessingError
from pydantic import BaseModel, ValidationError

from .errors import RequestError, validation_error
from .keys import SERVICE

Body = TypeVar("Body", bound=BaseModel)

MAX_INT_DIGITS = 20
"""Digits of a JSON integer at most: every integer field of the protocol is far below 10**20."""


class _Unfit(ValueError):
    """A JSON value the protocol cannot hold."""


def _integer(text: str) -> int:
    digits = len(text.lstrip("-"))
    if digits > MAX_INT_DIGITS:
        raise _Unfit(f"an integer of {digits} digits is out of range (at most {MAX_INT_DIGITS} digits)")
    return int(text)


def _number(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _Unfit(f"the number {text[:30]}{'…' if len(text) > 30 else ''} is out of range")
    return value


def _constant(name: str) -> float:
    raise _Unfit(f"{name} is not a JSON number")


def parse_json(raw: bytes) -> object:
    try:
        return json.loads(raw, parse_int=_integer, parse_float=_number, parse_constant=_constant)
    except _Unfit as error:
        raise RequestError(400, f"not valid JSON for this API: {error}", "body") from None
    except ValueError as error:  # JSONDecodeError, UnicodeDecodeError
        raise RequestError(400, f"not valid JSON: {error}", "body") from None
    except RecursionError:
        raise RequestError(400, "JSON nested too deeply", "body") from None


async def read_body(request: web.Request, kind: type[Body], required: bool = True) -> Body:
    timeout = request.app[SERVICE].config.server.body_timeout_s
    try:
        async with asyncio.timeout(timeout):  # no Task per request, as wait_for makes on 3.11
            raw = await request.read()
    except TimeoutError:
        raise RequestError(408, f"the request body did not arrive within {timeout:g} s", "body") from None
    except (ConnectionError, ClientPayloadError, HttpProcessingError):  # the client went away mid-body
        raise RequestError(400, "the request body ended before its announced length", "body") from None
    if not raw.strip():
        if required:
            raise RequestError(400, "a JSON body is required", "body")
        return kind()
    data = parse_json(raw)
    try:
        return kind.model_validate(data)
    except ValidationError as error:
        raise validation_error(error) from None
