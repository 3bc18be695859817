"""Identifier rules shared by the wire protocol and the harness hooks (kept free of heavy imports: a hook process
starts for every tool call)."""

SESSION_ID_PATTERN = r"^[A-Za-z0-9._:@/+-]{1,200}$"
