"""Identifier rules shared by the wire protocol and the harness hooks (kept free of heavy imports: a hook process
starts for every tool call).

A session id is a single URL path segment (`/v1/sessions/{id}/…`), so it may not contain `/`, nor anything a URL
would have to escape, nor be a dot segment (`.`, `..`) that a URL would resolve away."""

SESSION_ID_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9._:@+-]{0,199}$"
SESSION_ID_RULE = (
    "1 to 200 characters, each a letter, a digit or one of . _ : @ + - (no '/'), the first a letter, a digit or _"
)
"""`SESSION_ID_PATTERN` in words, for error messages."""
