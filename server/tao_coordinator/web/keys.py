"""Typed application keys."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

if TYPE_CHECKING:
    from .service import CoordinatorService

SERVICE: web.AppKey[CoordinatorService] = web.AppKey("service")
