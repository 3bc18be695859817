"""One fake node's state behind its HTTP routes: the engine in real time, block ids, KV events, metrics, policy.

`NodeService.generate` is the single way a request enters the node: it applies vLLM's admission limit
(`--max-num-queued-reqs`: unfinished requests, checked before anything else, 503 beyond it), checks the context
length as vLLM does,
lays out the reply, hashes every cacheable block of prompt + reply, names the blocks with registry ids, registers
the sequence for KV-event translation and submits the request to the engine. The listener it gives the engine
driver publishes KV batches, observes finished requests in the metrics and releases their block ids.

Invariant: every request submitted to the engine has a registered sequence until its `Finished` event has been
handled, so every KV event can be expanded to hashes and tokens.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

from ..sim.node import Finished, FirstToken, NodeEngine, NodeEvent, NodeRequest, RequestRejected, cacheable_blocks
from ..sim.prompt import Prompt, runs_from_ids
from .block_ids import BlockIdRegistry
from .clock import ScaledClock
from .config import FakeNodeConfig
from .driver import EngineDriver, Ticket
from .errors import BadRequest, QueueFull
from .hashing import block_hashes
from .kv_events import KvTranslator, SequenceRecord
from .kv_publisher import KvEventPublisher
from .kv_wire import encode_batch
from .metrics import NodeMetrics
from .reply import Reply, ReplyLayout


@dataclass(frozen=True, slots=True)
class GenerationSpec:
    public_id: str
    prompt_tokens: list[int]
    reply: Reply
    max_tokens: int | None
    """As requested; None: up to max_model_len."""
    priority: int = 0
    cache_salt: str | None = None
    session_id: str | None = None


@dataclass(slots=True)
class Generation:
    public_id: str
    engine_id: str
    prompt_tokens: int
    layout: ReplyLayout
    ticket: Ticket
    created: int
    block_size: int

    @property
    def finished(self) -> Finished | None:
        return self.ticket.finished

    async def progress(self) -> AsyncIterator[tuple[int, int]]:
        """(tokens before, tokens now) each time the request generated more, and once when it finishes (maybe with
        nothing new); then the iteration ends."""
        sent = 0
        while True:
            await self.ticket.wait_change()
            if self.ticket.failed:
                raise RuntimeError("the fake node's engine loop failed")
            if self.ticket.generated > sent or self.ticket.finished is not None:
                yield sent, self.ticket.generated
                sent = self.ticket.generated
            if self.ticket.finished is not None:
                return


def context_error(max_model_len: int, prompt: int, max_tokens: int | None) -> BadRequest | None:
    """vLLM's 400 for a request that cannot fit in max_model_len, or None."""
    if max_tokens is None and prompt >= max_model_len:
        return BadRequest(
            f"This model's maximum context length is {max_model_len} tokens. However, your request has {prompt} "
            "input tokens. Please reduce the length of the input messages.",
            param="messages",
        )
    if max_tokens is not None and prompt + max_tokens > max_model_len:
        return BadRequest(
            f"This model's maximum context length is {max_model_len} tokens. However, you requested {max_tokens} "
            f"output tokens and your prompt contains {prompt} input tokens, for a total of {prompt + max_tokens} "
            "tokens. Please reduce the length of the input prompt or the number of requested output tokens.",
            param="max_tokens",
        )
    return None


class NodeService:
    def __init__(self, config: FakeNodeConfig) -> None:
        self.config = config
        self.profile = config.node_profile()
        self.policy = config.policy
        self.clock = ScaledClock(config.time_scale)
        engine = NodeEngine(self.profile, policy=config.scheduling_policy, start_time=self.clock.now())
        self.driver = EngineDriver(engine, self.clock, config.tick_seconds, self._on_events)
        self.registry = BlockIdRegistry()
        self.publisher = KvEventPublisher(config.kv_events) if config.kv_events is not None else None
        self._kv = KvTranslator(self.registry, self.profile.block_size, wire=self.publisher is not None)
        self.metrics = NodeMetrics(config.served_model_name, self.profile, config.cpu_kv_gib)
        self._max_tokens: dict[str, int] = {}
        self._cpu_reset = False
        self._ids = itertools.count()
        self.started = time.time()

    @property
    def max_model_len(self) -> int:
        return self.profile.model_len_limit

    async def start(self) -> None:
        if self.publisher is not None:
            self.publisher.start()
        self.driver.start()

    async def stop(self) -> None:
        await self.driver.stop()
        if self.publisher is not None:
            await self.publisher.close()

    def generate(self, spec: GenerationSpec) -> Generation:
        limit = self.config.max_num_queued_reqs
        if limit is not None and self.driver.in_flight + 1 > limit:
            self.metrics.reject("max_num_queued_reqs")
            raise QueueFull()
        prompt = len(spec.prompt_tokens)
        if not prompt:
            raise BadRequest("The prompt cannot be empty.", param="prompt")
        error = context_error(self.max_model_len, prompt, spec.max_tokens)
        if error is not None:
            raise error
        limit = spec.max_tokens if spec.max_tokens is not None else self.max_model_len - prompt
        layout = ReplyLayout(spec.reply, limit)
        engine_id = f"{spec.public_id}-{next(self._ids)}"
        request, record = self._node_request(engine_id, spec, layout)
        self._kv.register(engine_id, record)
        try:
            ticket = self.driver.submit(request)
        except RequestRejected as rejected:
            self._kv.forget(engine_id)
            raise BadRequest(str(rejected)) from None
        self._max_tokens[engine_id] = limit
        return Generation(spec.public_id, engine_id, prompt, layout, ticket, int(time.time()), self.profile.block_size)

    def abort(self, generation: Generation) -> None:
        self.driver.abort(generation.engine_id)

    def reset_prefix_cache(self, reset_external: bool = False) -> bool:
        """vLLM's /reset_prefix_cache; `reset_external` also empties the CPU tier (which publishes no events)."""
        done = self.driver.engine.reset_prefix_cache(self.clock.now(), reset_external=reset_external)
        self._cpu_reset = self._cpu_reset or reset_external
        self.driver.poke()
        return done

    def _node_request(
        self, engine_id: str, spec: GenerationSpec, layout: ReplyLayout
    ) -> tuple[NodeRequest, SequenceRecord]:
        size = self.profile.block_size
        tokens = [*spec.prompt_tokens, *layout.token_ids]
        blocks = cacheable_blocks(len(spec.prompt_tokens), layout.output_tokens, size)
        hashes = block_hashes(tokens, size, blocks, spec.cache_salt)
        ids = self.registry.acquire(hashes)
        prompt_blocks = len(spec.prompt_tokens) // size
        request = NodeRequest(
            request_id=engine_id,
            prompt=Prompt(len(spec.prompt_tokens), runs_from_ids(ids[:prompt_blocks])),
            output_tokens=layout.output_tokens,
            session_id=spec.session_id,
            priority=spec.priority,
            output_block_runs=runs_from_ids(ids[prompt_blocks:]),
            finish_reason="length" if layout.finish_reason == "length" else "stop",
        )
        return request, SequenceRecord(tokens, hashes, ids, spec.cache_salt)

    def _on_events(self, events: Sequence[NodeEvent]) -> None:
        if self.publisher is not None:
            for step_time, wire in self._kv.translate(events):
                payload = encode_batch(self.clock.epoch(step_time), wire, self.config.kv_events_encoding)
                self.publisher.publish(payload)
        else:
            self._kv.translate(events)
        if self._cpu_reset:
            self._cpu_reset = False
            runs = self.driver.engine.cpu_block_runs()
            self.registry.cpu_retain({block for first, count in runs for block in range(first, first + count)})
        for event in events:
            if isinstance(event, Finished):
                self.metrics.observe_finished(event, self._max_tokens.pop(event.request_id, 0))
                self._kv.forget(event.request_id)
        first_tokens = sum(isinstance(event, FirstToken) for event in events)
        self.metrics.update(self.driver.engine.counters(), first_tokens)
