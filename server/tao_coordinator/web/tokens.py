"""Session tokens that carry their own proof of which session they were issued for.

A token is `nonce.mac`, mac = HMAC-SHA256(key, nonce + "/" + session id), both base64url. Only a session's live
token acts on it (`auth.py`); the MAC only tells apart, for a session that is not live, a caller who once held it
(answered 404, so a client registers it again after an expiry or a restart) from everyone else (answered exactly as
for another session's id: unknown and foreign sessions are indistinguishable without the session's token).

Invariants: the key is 32 random bytes kept in the state directory, so tokens issued before a restart still prove
their session after it; the key file is the user's alone (0600, `private_files.py`): a looser mode found at start-up
is tightened and logged before the key is read, and a key written anew is a new file of mode 0600; a token proves
exactly one session id; checking is constant-time.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from pathlib import Path

from ..private_files import log_tightened, make_directory, tighten, write_private

KEY_FILE = "session-token.key"


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


class SessionTokens:
    def __init__(self, key: bytes) -> None:
        self._key = key

    @classmethod
    def in_state_dir(cls, state_dir: Path) -> SessionTokens:
        """The key kept in `state_dir`, made first if there is none (or not a key). Raises `OSError` when the key
        cannot be read, written or made private."""
        directory = state_dir.expanduser()
        path = directory / KEY_FILE
        make_directory(directory)
        log_tightened(directory, tighten([path]))
        try:
            key = path.read_bytes()
        except FileNotFoundError:
            key = b""
        if len(key) != 32:
            key = secrets.token_bytes(32)
            write_private(path, key)
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
