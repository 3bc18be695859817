"""Session tokens that carry their own proof of which session they were issued for.

A token is `nonce.mac`, mac = HMAC-SHA256(key, nonce + "/" + session id), both base64url. Only a session's live
token acts on it (`auth.py`); the MAC only tells apart, for a session that is not live, a caller who once held it
(answered 404, so a client registers it again after an expiry or a restart) from everyone else (answered exactly as
for another session's id: unknown and foreign sessions are indistinguishable without the session's token).

Invariants: the key is 32 random bytes kept in the state directory (mode 0600), so tokens issued before a restart
still prove their session after it; a token proves exactly one session id; checking is constant-time.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
from pathlib import Path

KEY_FILE = "session-token.key"


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


class SessionTokens:
    def __init__(self, key: bytes) -> None:
        self._key = key

    @classmethod
    def in_state_dir(cls, state_dir: Path) -> SessionTokens:
        path = state_dir.expanduser() / KEY_FILE
        try:
            key = path.read_bytes()
        except FileNotFoundError:
            key = b""
        if len(key) != 32:
            key = secrets.token_bytes(32)
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "wb") as file:
                file.write(key)
        return cls(key)

    def _mac(self, session_id: str, nonce: str) -> str:
        message = f"{nonce}/{session_id}".encode("utf-8", "surrogateescape")
        return _b64(hmac.new(self._key, message, hashlib.sha256).digest())

    def issue(self, session_id: str) -> str:
        nonce = secrets.token_urlsafe(12)
        return f"{nonce}.{self._mac(session_id, nonce)}"

    def proves(self, session_id: str, token: str) -> bool:
        nonce, _, mac = token.partition(".")
        return bool(nonce) and hmac.compare_digest(mac.encode(), self._mac(session_id, nonce).encode())
