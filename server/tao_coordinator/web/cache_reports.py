"""Noticing a node whose calls never report cached tokens, and saying why once.

Cache credit (docs/design.md#cache-credit) learns from `cached_tokens` in each call's usage. Real vLLM sends it only
when it runs with `--enable-prompt-tokens-details` (off by default; the fake server always sends it), so a fleet started
without the flag gives TAO no cache evidence at all, silently. Per node, this counts the successful calls with a prompt
whose report carried no `cached_tokens`; once `SILENT_CALLS` of them arrive before any call that carried it, it logs one
warning naming the node and the flag.

Invariants: at most one warning per node for the life of the process; a node that reported `cached_tokens` once is
never warned about (a later call without it is a client that could not read usage, not a server without the flag);
state is one counter or flag per node that ever served a call.
"""

from __future__ import annotations

import logging

from ..core.events import LlmEnd

SILENT_CALLS = 20
"""Calls without `cached_tokens` before the warning: enough that one client without usage cannot trigger it."""

log = logging.getLogger("tao.coordinator")


class CacheReports:
    def __init__(self, silent_calls: int = SILENT_CALLS) -> None:
        self.silent_calls = silent_calls
        self._silent: dict[str, int] = {}
        self._reporting: set[str] = set()
        self.warned: set[str] = set()

    def observe(self, call: LlmEnd) -> None:
        node = call.node_id
        if node in self._reporting or call.error is not None or not call.prompt_tokens:
            return
        if call.cached_tokens is not None:
            self._reporting.add(node)
            self._silent.pop(node, None)
            return
        self._silent[node] = count = self._silent.get(node, 0) + 1
        if count >= self.silent_calls and node not in self.warned:
            self.warned.add(node)
            log.warning(
                "node %s: %d calls reported no cached_tokens; cache credit has no evidence there. Start vLLM with "
                "--enable-prompt-tokens-details (off by default) so usage carries prompt_tokens_details",
                node,
                count,
            )
