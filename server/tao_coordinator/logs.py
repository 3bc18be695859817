"""Logging set-up for the long-running commands: plain text for people, or one JSON object per line for machines."""

from __future__ import annotations

import json
import logging
import time

LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}
"""`--log-level` and `server.log_level`: the level names an operator may give."""


class JsonFormatter(logging.Formatter):
    """One JSON object per line. A record with a `decision` (the decision log, `web/decisions.py`) is that object,
    with the time, level and logger in front, in place of the message."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "ts": round(record.created, 3),
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)),
            "level": record.levelname.lower(),
            "logger": record.name,
        }
        decision = getattr(record, "decision", None)
        if isinstance(decision, dict):
            entry.update(decision)
        else:
            entry["message"] = record.getMessage()
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry)


class MalformedRequests(logging.Filter):
    """Drops aiohttp's traceback for a request it could not parse (bad header bytes, a line too long, conflicting
    lengths): the client is at fault and answered 400, and a hostile one could otherwise flood the log with 20 lines
    a request. Kept when debugging."""

    def filter(self, record: logging.LogRecord) -> bool:
        from aiohttp.http_exceptions import HttpProcessingError

        error = record.exc_info[1] if record.exc_info else None
        return not isinstance(error, HttpProcessingError) or logging.getLogger().isEnabledFor(logging.DEBUG)


def configure(log_format: str = "text", level: str = "info") -> None:
    handler = logging.StreamHandler()
    if log_format == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(LEVELS[level])
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    server = logging.getLogger("aiohttp.server")
    if not any(isinstance(f, MalformedRequests) for f in server.filters):
        server.addFilter(MalformedRequests())
