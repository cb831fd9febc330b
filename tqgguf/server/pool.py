"""Parallel slots for ``tqgguf serve``: N independent llama.cpp contexts, handed out by a pool.

``-np N`` opens the model N times (the weights are memory-mapped, so the pages are
shared); each slot has its own context of ``-c`` tokens and its own KV cache, so N
requests decode concurrently and cannot see each other's tokens. A request waits (FIFO)
when every slot is busy. Among free slots, the one whose cached tokens share the longest
prefix with the new prompt is chosen, so a chat's next turn reuses its KV cache.

Keep-alive (Ollama semantics): when every slot has been idle for ``keep_alive`` seconds
the contexts and weights are freed (0: right after each request; negative: never); the
next request loads them again. The tokenizer (:class:`~.textgen.Vocab`) stays loaded.

The pool's async methods run on the server's event loop; ``release`` may be called from
any thread.
"""
from __future__ import annotations

import asyncio
import os
import threading
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, AsyncIterator, Callable

from ..config import Settings
from .textgen import Job, Result, Vocab, generate


@dataclass
class ServeConfig:
    """Everything ``tqgguf serve`` needs besides the HTTP address.

    model_path: the GGUF file; alias: the model name clients use (default: file stem);
    settings: resolved :class:`~tqgguf.config.Settings`; n_gpu_layers: ``-ngl``;
    n_threads: CPU threads per slot (None: cores // slots, at least 1); verbose: echo
    llama.cpp's log.
    """

    model_path: Path
    alias: str
    settings: Settings
    n_gpu_layers: int = 0
    n_threads: int | None = None
    verbose: bool = False

    @property
    def threads_per_slot(self) -> int:
        if self.n_threads:
            return self.n_threads
        return max(1, (os.cpu_count() or 1) // self.settings.num_parallel)


@dataclass
class Slot:
    """One llama.cpp context. ``engine`` is None while unloaded; ``cached`` holds the
    tokens its KV cache had after its last request (for prefix-aware slot choice)."""

    id: int
    engine: Any = None
    cached: list[int] = field(default_factory=list)
    busy: bool = False
    requests: int = 0


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


class SlotPool:
    """N slots over one model; see the module docstring.

    Args:
        config: ServeConfig.
        opener: function (model_path, **kwargs) -> tqgguf.runtime.Engine; defaults to
            ``tqgguf.runtime.open_model`` (tests may inject another).
        log: function taking one line of text (startup/reload messages).
    """

    def __init__(self, config: ServeConfig, opener: Callable[..., Any] | None = None,
                 log: Callable[[str], None] = print):
        self.config = config
        self.settings = config.settings
        self._opener = opener
        self.log = log
        self.slots = [Slot(i) for i in range(config.settings.num_parallel)]
        self.vocab: Vocab | None = None
        self.report = None  # KVReport of the first load
        self.n_ctx = config.settings.context_length
        self._free: list[Slot] = list(self.slots)
        self._waiters: deque[asyncio.Future] = deque()
        self._load_lock = threading.Lock()
        self._state_lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self.executor = ThreadPoolExecutor(max_workers=len(self.slots), thread_name_prefix="tqgguf-slot")
        self.keep_alive = float(config.settings.keep_alive)
        self.last_active = time.monotonic()
        self.loads = 0

    # -- loading ---------------------------------------------------------------------

    def _open(self):
        opener = self._opener
        if opener is None:
            from ..runtime import open_model as opener
        s = self.settings
        return opener(self.config.model_path, ctk=s.cache_type_k, ctv=s.cache_type_v, n_ctx=s.context_length,
                      flash_attn=s.flash_attention, rotation=s.attn_rotation, n_gpu_layers=self.config.n_gpu_layers,
                      n_threads=self.config.threads_per_slot, verbose=self.config.verbose, k_center=s.k_center,
                      kv_boundary=s.kv_boundary, kv_swa=s.kv_swa, kv_plan=s.kv_plan)

    def load(self) -> None:
        """Load the tokenizer and every slot (blocking; used at startup). Raises what
        ``open_model`` raises (EngineError, EngineNotBuiltError, CacheTypeError, ValueError)."""
        if self.vocab is None:
            self.vocab = Vocab(str(self.config.model_path))
        for slot in self.slots:
            self._load_slot(slot)

    def _load_slot(self, slot: Slot) -> float:
        """Open ``slot`` if it is unloaded; returns the seconds spent (0 if it was loaded)."""
        if slot.engine is not None:
            return 0.0
        with self._load_lock:  # open_model parses the shared llama.cpp log: one at a time
            if slot.engine is not None:
                return 0.0
            t0 = time.perf_counter()
            engine = self._open()
            slot.engine = engine
            slot.cached = []
            self.loads += 1
            if self.report is None:
                self.report = engine.report
                n = engine.llama.n_ctx()
                self.n_ctx = n
            return time.perf_counter() - t0

    def loaded(self) -> bool:
        """True when every slot has its context."""
        return all(s.engine is not None for s in self.slots)

    def unload(self) -> int:
        """Free every idle slot's context and weights; returns how many were freed."""
        n = 0
        with self._state_lock:
            for slot in self.slots:
                if slot.engine is not None and not slot.busy:
                    slot.engine.close()
                    slot.engine = None
                    slot.cached = []
                    n += 1
        return n

    def close(self) -> None:
        """Unload everything and stop the worker threads."""
        self.unload()
        self.executor.shutdown(wait=False, cancel_futures=True)

    # -- slot hand-out ---------------------------------------------------------------

    def bind_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        """Attach the event loop whose coroutines call acquire()."""
        self._loop = loop

    def busy_count(self) -> int:
        return sum(s.busy for s in self.slots)

    async def acquire(self, tokens: list[int]) -> Slot:
        """Wait for a free slot (FIFO) and take it; prefers the slot whose cached tokens
        share the longest prefix with ``tokens``. Cancellation-safe."""
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        if self._free and not self._waiters:
            return self._take(self._best(tokens))
        fut = self._loop.create_future()
        self._waiters.append(fut)
        try:
            slot = await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self._give_back(fut.result())
            else:
                try:
                    self._waiters.remove(fut)
                except ValueError:
                    pass
            raise
        return slot

    def _best(self, tokens: list[int]) -> Slot:
        return max(self._free, key=lambda s: (_common_prefix(s.cached, tokens), s.engine is not None, -s.id))

    def _take(self, slot: Slot) -> Slot:
        self._free.remove(slot)
        slot.busy = True
        self.last_active = time.monotonic()
        return slot

    def _give_back(self, slot: Slot) -> None:
        """On the loop thread: hand the slot to the oldest live waiter, else free it."""
        self.last_active = time.monotonic()
        while self._waiters:
            fut = self._waiters.popleft()
            if not fut.done():
                slot.busy = True
                fut.set_result(slot)
                return
        slot.busy = False
        self._free.append(slot)

    def release(self, slot: Slot) -> None:
        """Return a slot (thread-safe)."""
        if self._loop is None:
            slot.busy = False
            self._free.append(slot)
            return
        self._loop.call_soon_threadsafe(self._give_back, slot)

    # -- running jobs ----------------------------------------------------------------

    async def run(self, job: Job, cancel: threading.Event) -> AsyncIterator[tuple[str, Any]]:
        """Run ``job`` on a slot; yields ("text", str) pieces, then ("done", Result) or
        ("error", exception). Leaving the iteration early (client gone) sets ``cancel``;
        the worker then stops at the next token and frees the slot."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue = asyncio.Queue()
        t_queue = time.perf_counter()
        slot = await self.acquire(job.prompt.tokens)
        queued = time.perf_counter() - t_queue

        def put(item: tuple[str, Any]) -> None:
            loop.call_soon_threadsafe(queue.put_nowait, item)

        def work() -> None:
            try:
                load_s = self._load_slot(slot)
                if load_s:
                    self.log(f"slot {slot.id}: model reloaded in {load_s:.2f} s")
                res: Result = generate(slot.engine.llama, self.vocab, job, cancel,
                                       on_text=lambda t: put(("text", t)))
                res.load_seconds, res.queue_seconds, res.slot = load_s, queued, slot.id
                if job.max_new > 0:
                    slot.cached = job.prompt.tokens + res.tokens[:-1]
                slot.requests += 1
                if res.finish == "cancelled":
                    self.log(f"slot {slot.id}: client gone after {len(res.tokens)} tokens; generation stopped, "
                             "slot freed")
                put(("done", res))
            except BaseException as e:  # noqa: BLE001 - reported to the request, server stays up
                slot.cached = []
                put(("error", e))
            finally:
                self.release(slot)

        try:
            loop.run_in_executor(self.executor, work)
        except BaseException:
            self.release(slot)
            raise
        try:
            while True:
                kind, value = await queue.get()
                yield kind, value
                if kind in ("done", "error"):
                    return
        finally:
            cancel.set()

    # -- keep-alive ------------------------------------------------------------------

    def expires_in(self) -> float | None:
        """Seconds until an idle unload, None when it never happens (or a slot is busy)."""
        if self.keep_alive < 0 or self.busy_count():
            return None
        return max(0.0, self.last_active + self.keep_alive - time.monotonic())

    def set_keep_alive(self, seconds: float | None) -> None:
        """Per-request keep-alive (Ollama's ``keep_alive`` field): applies from now on."""
        if seconds is not None:
            self.keep_alive = float(seconds)

    async def reaper(self, period: float = 0.5) -> None:
        """Background task: unload the model once it has been idle for keep_alive."""
        while True:
            await asyncio.sleep(period)
            left = self.expires_in()
            if left is not None and left <= 0 and any(s.engine is not None for s in self.slots):
                n = self.unload()
                if n:
                    self.log(f"keep-alive: idle for {self.keep_alive:g} s, unloaded {n} slot(s); "
                             "the next request loads the model again")
