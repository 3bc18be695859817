"""A listening socket bound before a server starts, so a port in use is one clear line, not a traceback after
"started" (shared by `tao proxy` and `tao coordinator`)."""

from __future__ import annotations

import socket

BACKLOG = 128


def listen(host: str, port: int) -> socket.socket:
    """A socket listening on (host, port); raises OSError (address in use, unknown host) before anything starts."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(BACKLOG)
    except OSError:
        sock.close()
        raise
    return sock


def cannot_listen(command: str, host: str, port: int, error: OSError) -> str:
    return f"{command}: cannot listen on {host}:{port}: {error.strerror or error}"
