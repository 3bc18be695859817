"""`GET /v1/sessions`, a page at a time: `?limit=N&cursor=C`.

Sessions are listed in the order of their ids. A page holds at most `limit` of them (`DEFAULT_LIMIT` when not
given, at most `MAX_LIMIT`), those whose ids come after `cursor` (from the start without one), and says where the
next page starts: `next_cursor`, the last id of this page, or null on the last page. The same on a standby replica,
which lists the leader's sessions as stored in Redis.

Invariants: a session live from the first page to the last is listed exactly once, whatever registers or closes in
between (a session registered meanwhile is listed if its id comes after the cursor); a page is built from the ids
alone (a partial sort of the live ids), so its cost grows with the page, not with the square of the sessions; a
`limit` or `cursor` that is not valid is a 422 naming it.
"""

from __future__ import annotations

import heapq
import re
from collections.abc import Iterable

from aiohttp import web

from tao_sdk.ids import SESSION_ID_PATTERN, SESSION_ID_RULE

from .errors import RequestError

DEFAULT_LIMIT = 100
MAX_LIMIT = 1000
_SESSION_ID = re.compile(SESSION_ID_PATTERN)


def page_query(request: web.Request) -> tuple[int, str | None]:
    """`limit` and `cursor` of the query, checked."""
    text = request.query.get("limit")
    limit = DEFAULT_LIMIT
    if text is not None:
        if not text.isdigit() or not 1 <= int(text) <= MAX_LIMIT:
            raise RequestError(422, f"limit: must be a whole number from 1 to {MAX_LIMIT}", "limit")
        limit = int(text)
    cursor = request.query.get("cursor")
    if cursor is not None and not _SESSION_ID.fullmatch(cursor):
        raise RequestError(422, f"cursor: must be a session id ({SESSION_ID_RULE}), as next_cursor gives", "cursor")
    return limit, cursor or None


def page_ids(ids: Iterable[str], limit: int, cursor: str | None) -> tuple[list[str], str | None]:
    """The ids of one page, and the cursor of the next (None when nothing follows)."""
    after = ids if cursor is None else (i for i in ids if i > cursor)
    chosen = heapq.nsmallest(limit + 1, after)
    more = len(chosen) > limit
    page = chosen[:limit]
    return page, page[-1] if more else None
