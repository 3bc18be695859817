"""One fake node's state behind its HTTP routes: the engine in real time, block ids, KV events, metrics, policy.

`NodeService.generate` is the single way a request enters the node, with vLLM 0.33's checks in vLLM's order: the
admission limit (`--max-num-queued-reqs`: unfinished requests, 503 beyond it); the output limit (`output_budget`:
a 400 only when `max_tokens` alone or the prompt alone exceeds max_model_len, else `max_tokens` clamped to what the
context leaves, the generation then stopping there with finish reason `length`); the engine client's input checks
(`engine_input_error`: the data-parallel rank, an empty prompt). Then it chooses the reply within the budget, lays it
out, hashes every cacheable block of prompt + reply, names the blocks with registry ids, registers the sequence for
KV-event translation and submits the request to the engine. The listener it gives the engine driver publishes KV
batches, observes finished requests in the metrics and releases their block ids.

Invariant: every request submitted to the engine has a registered sequence until its `Finished` event has been
handled, so every KV event can be expanded to hashes and tokens.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

from ..kv_wire import encode_batch
from ..sim.node import Finished, FirstToken, NodeEngine, NodeEvent, NodeRequest, RequestRejected, cacheable_blocks
from ..sim.prompt import Prompt, ids_of_runs, runs_from_ids
from .block_ids import BlockIdRegistry
from .clock import ScaledClock
from .config import FakeNodeConfig
from .driver import EngineDriver, Ticket
from .errors import BadRequest, EngineInputError, QueueFull, invalid_parameter
from .hashing import block_hashes
from .kv_events import KvTranslator, SequenceRecord
from .kv_publisher import KvEventPublisher
from .metrics import MetricsExporter
from .policy import Conversation, choose_reply
from .reply import ReplyLayout

DATA_PARALLEL_RANKS = 1
"""The fake serves one data-parallel rank, rank 0."""


@dataclass(frozen=True, slots=True)
class GenerationSpec:
    public_id: str
    prompt_tokens: list[int]
    conversation: Conversation
    """What the policy answers."""
    max_tokens: int | None
    """As requested; None: up to max_model_len."""
    priority: int = 0
    cache_salt: str | None = None
    session_id: str | None = None
    max_tokens_param: str = "max_tokens"
    """The request field vLLM names when `max_tokens` alone exceeds max_model_len."""
    prompt_from_text: bool = True
    """The prompt came as text: vLLM's tokenizer stops counting at max_model_len + 1 tokens."""
    data_parallel_rank: int | None = None


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


def output_budget(
    max_model_len: int,
    prompt: int,
    max_tokens: int | None,
    *,
    param: str = "max_tokens",
    prompt_from_text: bool = True,
) -> int:
    """The output tokens vLLM 0.33 grants a request (`get_max_tokens`): `max_tokens` clamped to what the context
    leaves. A 400 only when `max_tokens` alone exceeds max_model_len (`TokenizeParams`), when the prompt alone does
    (the post-tokenization length check), or when nothing is left (`SamplingParams`: at least 1)."""
    if max_tokens is not None and max_tokens > max_model_len:
        raise invalid_parameter(
            f"{param}={max_tokens} cannot be greater than max_model_len={max_model_len}. "
            "Please request fewer output tokens.",
            parameter=param,
            value=max_tokens,
        )
    if prompt > max_model_len:
        counted = min(prompt, max_model_len + 1) if prompt_from_text else prompt
        at_least = "at least " if counted == max_model_len + 1 else ""
        raise invalid_parameter(
            f"This model's maximum context length is {max_model_len} tokens. However, your prompt contains "
            f"{at_least}{counted} input tokens, which exceeds this limit even without any output tokens. "
            "Please reduce the length of the input prompt.",
            parameter="input_tokens",
            value=counted,
        )
    budget = max_model_len - prompt if max_tokens is None else min(max_tokens, max_model_len - prompt)
    if budget < 1:
        raise invalid_parameter(f"max_tokens must be at least 1, got {budget}.", parameter="max_tokens", value=budget)
    return budget


def engine_input_error(prompt: int, data_parallel_rank: int | None) -> EngineInputError | None:
    """What vLLM 0.33's engine client refuses once the request reaches it (`InputProcessor`), or None."""
    if data_parallel_rank is not None and not 0 <= data_parallel_rank < DATA_PARALLEL_RANKS:
        return EngineInputError(f"data_parallel_rank {data_parallel_rank} is out of range [0, {DATA_PARALLEL_RANKS}).")
    if not prompt:
        return EngineInputError("The decoder prompt cannot be empty")
    return None


class NodeService:
    def __init__(self, config: FakeNodeConfig) -> None:
        self.config = config
        self.profile = config.node_profile()
        self.policy = config.policy
        self.clock = ScaledClock(config.time_scale)
        self.publisher = KvEventPublisher(config.kv_events) if config.kv_events is not None else None
        self.driver = EngineDriver(self._new_process(), self.clock, config.tick_seconds, self._on_events)
        self._ids = itertools.count()
        self.started = time.time()

    def _new_process(self) -> NodeEngine:
        """What a vLLM process starts with: an empty engine, block ids, counters; the engine is returned."""
        self.registry = BlockIdRegistry()
        self._kv = KvTranslator(self.registry, self.profile.block_size, wire=self.publisher is not None)
        self.metrics = MetricsExporter(self.config.served_model_name, self.profile, self.config.cpu_kv_gib)
        self.models = self.config.catalog()
        self._max_tokens: dict[str, int] = {}
        self._cpu_reset = False
        return NodeEngine(self.profile, policy=self.config.scheduling_policy, start_time=self.clock.now())

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
        limit = output_budget(
            self.max_model_len,
            prompt,
            spec.max_tokens,
            param=spec.max_tokens_param,
            prompt_from_text=spec.prompt_from_text,
        )
        error = engine_input_error(prompt, spec.data_parallel_rank)
        if error is not None:
            raise error
        reply = choose_reply(self.policy, spec.conversation, None if spec.max_tokens is None else limit)
        layout = ReplyLayout(reply, limit)
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

    def restart(self) -> None:
        """As the process would after a crash and a restart (`faults.py`): the requests in flight fail; the engine,
        its caches, block ids and counters start afresh; KV-event numbers start again at 0."""
        self.driver.replace_engine(self._new_process())
        if self.publisher is not None:
            self.publisher.restart()

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
            self.registry.cpu_retain(set(ids_of_runs(runs)))
        for event in events:
            if isinstance(event, Finished):
                self.metrics.observe_finished(event, self._max_tokens.pop(event.request_id, 0))
                self._kv.forget(event.request_id)
        first_tokens = sum(isinstance(event, FirstToken) for event in events)
        self.metrics.update(self.driver.engine.counters(), first_tokens)
