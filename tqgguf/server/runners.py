"""Which models are loaded in ``tqgguf serve``: one llama-server child per (model, kind).

A :class:`Runner` is one model served by one child: ``chat`` (completions, chat, tools,
structured output; ``-np`` slots with continuous batching) or ``embed`` (an
embeddings-only child, started on the first embeddings request). The :class:`Manager`
resolves request model names, starts runners on demand, keeps at most
``max_loaded_models`` models loaded (the least recently used idle one is unloaded for a
new one), applies keep-alive per request as Ollama does, reloads a model when a request's
effective load options (``num_ctx``, ``num_thread``, ... : what the request sets, serve's
settings for what it leaves out) differ from the loaded ones (larger or smaller: Ollama's
scheduler compares them), and restarts a child that dies.

Ollama's rules followed here (docs/api.md, docs/faq.md of the Ollama repository):
``keep_alive`` sent with a request sets how long the model stays loaded after *that*
request (0 unloads it at once, negative keeps it); a later request without it gets the
server default (``OLLAMA_KEEP_ALIVE``) again.
"""
from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import re
import logging
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, AsyncIterator, Callable

import aiohttp

from ..config import MIN_CONTEXT, Settings
from ..runtime import training_context_warning
from .child import (LLAMA_DEFAULT_N_BATCH, SHUTDOWN_STOP_S, STOP_GRACE_S, Child, ChildError, ChildSpec, DraftSpec,
                    describe_exit, gpu_devices)
from .modelfile import POOLING_RANK, ModelFile

log = logging.getLogger("tqgguf.server")

#: Restarts of a crashed child within RESTART_WINDOW_S before serve gives up on that model.
MAX_RESTARTS = 3
RESTART_WINDOW_S = 60.0


class ModelNotFound(LookupError):
    """A request named a model this server cannot serve."""


class ContextTooLarge(ValueError):
    """A request's num_ctx is above the configured maximum."""


class Unavailable(RuntimeError):
    """The model's llama-server is not running (failed to load, or crashed and gave up)."""


class ModelRefused(ChildError):
    """A request named a model that cannot be served at all (no vocabulary: every request
    would abort its llama-server); a 400 naming why."""


def check_model(model: ModelFile) -> None:
    """Refuse, before any llama-server starts, a model every request would kill (ModelRefused):
    one without a vocabulary (tqgguf.models.vocabulary_error)."""
    from ..models import vocabulary_error

    if (why := vocabulary_error(model.path, "`tqgguf serve` tokenizes every request")) is not None:
        raise ModelRefused(why)


class LoadOptionRefused(ValueError):
    """A request's load-time option differs from what the model runs with and cannot be
    applied by reloading it. ``option`` is the Ollama option name."""

    def __init__(self, option: str, message: str):
        super().__init__(message)
        self.option = option


@dataclass(frozen=True)
class LoadParams:
    """How a runner's llama-server is loaded besides its context: what Ollama's load-time
    options may change by reloading the model (:meth:`Manager.plan_load`).

    n_batch: ``-b`` (None: llama-server's default, ``LLAMA_DEFAULT_N_BATCH``); n_threads:
    ``-t`` (None: llama-server's default); n_gpu_layers: ``-ngl`` (-1: all; None: as many as
    fit, llama-server's default); use_mmap: False passes ``--no-mmap``.
    """

    n_batch: int | None = None
    n_threads: int | None = None
    n_gpu_layers: int | None = None
    use_mmap: bool = True


def default_load(config: "ServeConfig") -> LoadParams:
    """The load serve's own settings give (``-t``, ``-ngl``; llama-server's ``-b``, mmap): what a
    request that sets no load-time option runs with."""
    return LoadParams(n_threads=config.n_threads, n_gpu_layers=config.n_gpu_layers)


#: The LoadParams field of each "reload" option of LOAD_OPTIONS.
_LOAD_FIELD = {"num_batch": "n_batch", "num_thread": "n_threads", "num_gpu": "n_gpu_layers", "use_mmap": "use_mmap"}

#: Ollama's load-time options (``api.Runner`` in Ollama's api/types.go, plus the ones older
#: Ollama versions had and clients still send) and what ``tqgguf serve`` does with each:
#: "reload" (a different value reloads the model with it, as Ollama's scheduler does in
#: ``needsReload``: it compares the loaded runner's options with the request's, num_ctx
#: included, and reloads on any difference), "context" (num_ctx: the same, larger or smaller,
#: within MIN_CONTEXT and the maximum; handled by ``Manager.runner``), "fixed" (a different
#: value is refused: it cannot change per request here). An option a request leaves out gets
#: serve's setting (a model reloaded for one request's options gets its defaults back on the next
#: request that leaves them out, as Ollama fills a request's missing options with the defaults
#: before comparing). Value types: int or bool, as Ollama parses them (``Options.FromMap``).
LOAD_OPTIONS: dict[str, tuple[str, type]] = {
    "num_ctx": ("context", int), "num_batch": ("reload", int), "num_thread": ("reload", int),
    "num_gpu": ("reload", int), "use_mmap": ("reload", bool), "main_gpu": ("fixed", int),
    "use_mlock": ("fixed", bool), "numa": ("fixed", bool), "low_vram": ("fixed", bool), "f16_kv": ("fixed", bool),
    "logits_all": ("fixed", bool), "vocab_only": ("fixed", bool), "embedding_only": ("fixed", bool),
    "num_gqa": ("fixed", int),
}


@dataclass
class ServeConfig:
    """Everything ``tqgguf serve`` needs besides the HTTP address.

    model_path: the GGUF file served by default; alias: the name clients use for it;
    settings: resolved :class:`~tqgguf.config.Settings`; llama_server: the binary;
    n_gpu_layers: ``-ngl`` (None: auto, as many as fit); offload: the ``--rpc``/``-sm``/``-ts``/``-mg``/``-dev``
    settings (tqgguf.devices.Offload, None: none); n_threads: ``-t`` for llama-server (None: its default, every
    core); verbose: echo every llama-server log line (otherwise only warnings, errors and
    load/exit lines); engine_env: the engine variables (LLAMA_*) of the default model's
    child; engine_env_for: the same for any model path (``--k-center auto`` and layer plans
    depend on the model; None: engine_env for every model), raising ValueError for a model
    the settings do not fit; engine_notes: startup lines saying what was chosen and why;
    draft: the default model's draft model for speculative decoding (``-md``, ``-ctkd``/``-ctvd``,
    ...; None: none); spec_type: ``--spec-type`` without a draft model (None: none); mmproj: the
    default model's multimodal projector (``--mmproj``; None: text only). The three apply to the
    model ``serve`` was started with (a draft shares its vocabulary, a projector its embedding
    width); a model loaded by name runs without them.
    """

    model_path: Path
    alias: str
    settings: Settings
    llama_server: Path
    n_gpu_layers: int | None = None
    offload: Any = None
    n_threads: int | None = None
    verbose: bool = False
    engine_env: dict[str, str] = field(default_factory=dict)
    engine_env_for: Callable[[Path], dict[str, str]] | None = None
    engine_notes: list[str] = field(default_factory=list)
    draft: DraftSpec | None = None
    spec_type: str | None = None
    mmproj: Path | None = None


#: Seconds an idle connection to llama-server is kept for reuse. llama-server (cpp-httplib,
#: CPPHTTPLIB_KEEPALIVE_TIMEOUT_SECOND in its vendored httplib.h) closes a connection that has
#: been idle for 5 s; a client that reuses one at that moment gets a disconnect, and a POST is
#: not retried (aiohttp's default keep-alive is 15 s, which is what made reuse fail before).
#: Well under 5 s, the front's side always gives a connection up first.
CHILD_KEEPALIVE_S = 2.0


def _child_session(base_url: str, n_parallel: int) -> aiohttp.ClientSession:
    """The front's HTTP client to one llama-server child: kept-alive connections, at most
    ``2 * n_parallel + 8`` at once (each slot's request plus the short calls that go with
    it: /tokenize, /apply-template, /health, /metrics; beyond that llama-server would only
    queue them), no total timeout (a generation takes as long as it takes).

    aiohttp rather than httpx on this path: at 32 concurrent requests httpx cost ~2 ms of
    CPU per request (~8 ms with idle connections kept: httpcore's pool checks every idle
    socket on each request), aiohttp ~0.9 ms (measured on this project's 2-core CI machine).
    Reusing connections instead of one per request (connect + close on both sides) cut the
    front's CPU per request further; docs/SERVING.md has the numbers.
    """
    return aiohttp.ClientSession(
        base_url=base_url, timeout=aiohttp.ClientTimeout(total=None, sock_connect=10),
        connector=aiohttp.TCPConnector(limit=2 * n_parallel + 8, keepalive_timeout=CHILD_KEEPALIVE_S),
        read_bufsize=1 << 20)


#: The child's load lines kept in ``Runner.load_lines``: placement (buffers, layers per device), each KV
#: cache as llama.cpp made it (size, cells, layers, types, rotation; tqgguf.runtime.parse_kv_report), and
#: llama.cpp's own note that a LLAMA_ARG_* variable is overridden by a flag serve passes (common/arg.cpp).
_PLACEMENT_LINE = re.compile(r"model buffer size|KV buffer size|offloaded \d+/\d+ layers|assigned to device"
                             r"|llama_kv_cache(?:_iswa)?: (?:size =|attn_rot_|creating)"
                             r"|environment variable is set, but will be overwritten"
                             r"|Flash Attention|flash_attn")  # what flash attention became (run.flash_attention_applied)
_OVERRIDDEN_ENV = re.compile(r"warn: (\S+) environment variable is set, but will be overwritten by command line "
                             r"argument (\S+)")
# llama-server's per-request speculative decoding line (server-context.cpp, print_timing):
# "draft acceptance = 0.70000 (   21 accepted /    30 generated), mean len =  3.10"
_DRAFT_LINE = re.compile(r"draft acceptance = [0-9.]+ \(\s*(\d+) accepted /\s*(\d+) generated\)")


def offload_args(offload) -> list[str]:
    """llama-server's flags for a tqgguf.devices.Offload (``--rpc``, ``-sm``, ``-ts``, ``-mg``, ``-dev``;
    only those that differ from llama-server's defaults), [] for None."""
    if offload is None:
        return []
    a = []
    if offload.rpc:
        a += ["--rpc", offload.rpc]
    if offload.split_mode != "layer":
        a += ["-sm", offload.split_mode]
    if offload.tensor_split:
        a += ["-ts", ",".join(f"{x:g}" for x in offload.tensor_split)]
    if offload.main_gpu:
        a += ["-mg", str(offload.main_gpu)]
    if offload.device:
        a += ["-dev", offload.device]
    return a


def _layers(n_gpu_layers: int | None, n_layer: int) -> int:
    """Layers a ``-ngl`` value offloads for a model of ``n_layer`` blocks: a negative value
    (``-ngl all``) or one above ``n_layer + 1`` is every block plus the output layer
    (llama.cpp counts the output as one more layer); 0 when the block count is unknown and
    ``-ngl`` is 0, else the value itself."""
    if n_gpu_layers is None:
        return 0
    if n_layer <= 0:
        return n_gpu_layers
    return n_layer + 1 if n_gpu_layers < 0 else min(n_gpu_layers, n_layer + 1)


def _shown(value: Any) -> str:
    """An option's value as the log and X-Tqgguf-Reloaded show it: JSON, or "default" for
    llama-server's own choice not known yet (the threads of a child not yet run without -t)."""
    return "default" if value is None else json.dumps(value)


#: Why each "fixed" load-time option cannot change per request (LoadOptionRefused's message).
_FIXED_WHY = {
    "main_gpu": "the GPUs llama-server uses are chosen when tqgguf serve starts: CUDA_VISIBLE_DEVICES",
    "use_mlock": "tqgguf serve does not lock model memory",
    "numa": "NUMA placement is set when llama-server starts",
    "low_vram": "llama.cpp has no low-VRAM mode any more; the KV cache sits where -ngl puts the layers",
    "f16_kv": "the KV cache types are set with --ctk/--ctv, here K {ctk} and V {ctv}",
    "logits_all": "llama.cpp has no logits_all any more; ask for logprobs/top_logprobs per request",
    "vocab_only": "a vocabulary-only model cannot answer requests",
    "embedding_only": "embeddings run in their own child, started by /api/embed and /api/embeddings",
    "num_gqa": "it is a property of the model: query heads per KV head",
}


class Runner:
    """One model in one llama-server child (see module docstring). ``state``: loading,
    ready, restarting, failed, stopped."""

    def __init__(self, model: ModelFile, kind: str, config: ServeConfig, n_ctx: int, port: int):
        self.model, self.kind, self.config = model, kind, config
        self.n_ctx = n_ctx
        self.port = port
        self.child: Child | None = None
        self.state = "stopped"
        self.error: str | None = None
        self.active = 0
        self.idle = asyncio.Event()
        self.idle.set()
        self.lock = asyncio.Lock()
        self.expires_at: float | None = None  # monotonic; None = never
        self.last_used = time.monotonic()
        self.restarts: list[float] = []
        self.last_exit: str | None = None
        self.last_lines: list[str] = []  # the last log lines of the child that died last
        self.load_seconds = 0.0
        self.ready_at = 0.0  # monotonic time the last (re)start became ready
        self.client: aiohttp.ClientSession | None = None  # to the child; see start()
        self._watch: asyncio.Task | None = None
        self.load = default_load(config)
        self.starts = 0  # loads that became ready (the first, reloads, restarts)
        self.auto_threads: int | None = None  # the threads a child started without -t logged it runs with
        self.reload_reason = ""  # what the last reload for a request changed, e.g. "num_ctx 4096"
        self.cut_reason: str | None = None  # why the connections to the child were closed (shutdown)
        self.streams: set[aiohttp.ClientResponse] = set()  # streamed answers being relayed now
        self.load_lines: list[str] = []  # the child's load and KV lines (placement: tqgguf.devices.parse_placement)
        self.offloaded: int | None = None  # layers the child offloaded ("offloaded N/M layers to GPU")
        self.on_device = False  # a KV buffer of the child is on a device other than the CPU
        self.worker_down = False  # the last start failed because an RPC worker could not be used
        self.draft_accepted = 0  # draft tokens accepted / generated so far (llama-server's per-request lines)
        self.draft_generated = 0
        self.context_shift = kind == "chat"  # --context-shift; False when llama-server said it cannot shift here
        self.n_ctx_slot: int | None = None  # each slot's context as llama-server reported it (n_ctx padded to 256s)

    @property
    def key(self) -> tuple[str, str]:
        return (str(self.model.path), self.kind)

    def spec(self) -> ChildSpec:
        s, c = self.config.settings, self.config
        return ChildSpec(binary=c.llama_server, model=self.model.path, alias=self.model.name, n_ctx=self.n_ctx,
                         n_parallel=s.num_parallel, ctk=s.cache_type_k, ctv=s.cache_type_v,
                         flash_attn=s.flash_attention, n_gpu_layers=self.load.n_gpu_layers,
                         offload_args=offload_args(c.offload),
                         n_threads=self.load.n_threads, n_batch=self.load.n_batch, use_mmap=self.load.use_mmap,
                         embedding=self.kind == "embed",
                         model_pooling=self.kind == "embed" and self.model.has_pooling(),
                         rerank=self.kind == "embed" and self.model.pooling_type() == POOLING_RANK,
                         env=self._engine_env(), port=self.port,
                         draft=c.draft if self._own() else None, spec_type=c.spec_type if self._own() else None,
                         mmproj=c.mmproj if self._own() else None)

    def _own(self) -> bool:
        """True for the chat runner of the model ``serve`` was started with: the one the draft
        model and the projector belong to."""
        return self.kind == "chat" and self.model.path == self.config.model_path

    @property
    def vision(self) -> bool:
        """Whether this runner's child takes images (it was started with ``--mmproj``)."""
        return self._own() and self.config.mmproj is not None

    @property
    def slot_ctx(self) -> int:
        """Tokens a slot holds: what llama-server reported (``n_ctx_slot``: llama.cpp pads the
        context to a multiple of 256, so num_ctx 128 holds 256), else ``n_ctx``. A prompt fits
        when it is shorter than this; the context shift happens when a generation fills it."""
        return self.n_ctx_slot or self.n_ctx

    def loaded_since(self, t0: float) -> float:
        """Seconds this runner took to load if it (re)started after ``t0`` (a request's
        monotonic start: a load on demand, a reload or a restart the request waited for),
        else 0: Ollama's ``load_duration``."""
        return self.load_seconds if self.ready_at >= t0 else 0.0

    def effective(self, option: str, load: LoadParams | None = None, n_ctx: int | None = None) -> Any:
        """The value of an Ollama load-time option (:data:`LOAD_OPTIONS`) this runner runs
        with (or would run with, loaded with ``load`` and ``n_ctx`` tokens per slot): num_ctx
        per slot; num_batch as llama.cpp clamps ``-b`` (at most the whole context; an embeddings
        child's is its context); num_thread as ``-t`` or as a child started without it logged
        it (None before one did); num_gpu as layers offloaded (:func:`_layers`); f16_kv true
        only for f16 K and V; num_gqa from the model; main_gpu 0; the rest False."""
        s = self.config.settings
        load = self.load if load is None else load
        n_ctx = self.n_ctx if n_ctx is None else n_ctx
        if option == "num_ctx":
            return n_ctx
        if option == "num_batch":
            if self.kind == "embed":
                return n_ctx
            return min(load.n_batch or LLAMA_DEFAULT_N_BATCH, n_ctx * s.num_parallel)
        if option == "num_thread":
            return load.n_threads or self.auto_threads
        if option == "num_gpu":
            if load.n_gpu_layers is None:  # auto: what the child reported, when a device holds any
                return (self.offloaded or 0) if self.on_device else 0
            return _layers(load.n_gpu_layers, self.model.n_layer())
        if option == "use_mmap":
            return load.use_mmap
        if option == "f16_kv":
            return s.cache_type_k == "f16" and s.cache_type_v == "f16"
        if option == "num_gqa":
            return self.model.gqa()
        if option == "main_gpu":
            return 0
        return False  # use_mlock, numa, low_vram, logits_all, vocab_only, embedding_only

    def _engine_env(self) -> dict[str, str]:
        c = self.config
        if c.engine_env_for is None or self.model.path == c.model_path:
            return dict(c.engine_env)
        try:
            return c.engine_env_for(self.model.path)
        except ValueError as e:  # e.g. a layer plan that does not fit this model
            raise ChildError(f"cannot load {self.model.name} with these settings: {e}") from e

    def _on_line(self, line: str) -> None:
        if m := _DRAFT_LINE.search(line):
            self.draft_accepted += int(m.group(1))
            self.draft_generated += int(m.group(2))
        if m := re.search(r"n_ctx_slot = (\d+)", line):  # the slot's real context: llama.cpp pads n_ctx to 256s
            self.n_ctx_slot = int(m.group(1))
        if "ctx_shift is not supported" in line:  # llama-server turns the shift off for this model/cache
            self.context_shift = False
        if _PLACEMENT_LINE.search(line):
            self.load_lines.append(line)
            if m := re.search(r"offloaded (\d+)/(\d+) layers", line):
                self.offloaded = int(m.group(1))  # llama.cpp says "to GPU" even with no GPU: see on_device
            if m := re.search(r"(\S+) KV buffer size", line):
                self.on_device = self.on_device or not m.group(1).startswith("CPU")
        # llama-server's lines carry a level letter after the timestamp: I, W, E
        parts = line.split(" ", 2)
        level = parts[1] if len(parts) > 2 and len(parts[1]) == 1 else "I"
        name = f"{self.model.name}{'/embed' if self.kind == 'embed' else ''}"
        if level == "E" and "exceeds the available context size" in line:
            # a prompt longer than the context, a client's error: the Ollama routes then truncate it and say so
            # (routes_ollama.fit_messages); the OpenAI routes pass the 400 on, as llama-server does
            log.info("[llama-server %s] %s", name, line)
        elif level == "E":
            log.error("[llama-server %s] %s", name, line)
        elif "slot context shift" in line:  # a generation reached the end of its context and goes on (as Ollama)
            log.info("[llama-server %s] %s (the context was full: the oldest tokens after n_keep were dropped and "
                     "generation goes on)", name, line)
        elif (level == "W" and " slot " not in line) or self.config.verbose:  # per-request slot notes: -v
            log.info("[llama-server %s] %s", name, line)
        else:
            log.debug("[llama-server %s] %s", name, line)

    async def start(self) -> None:
        """Start the child and wait until it serves. Raises ChildError (its own message)."""
        self.state = "loading"
        t0 = time.monotonic()
        try:
            spec = self.spec()
        except ChildError as e:
            self.state, self.error = "failed", str(e)
            raise
        await self._check_workers()
        self.load_lines, self.offloaded, self.on_device = [], None, False
        self.context_shift, self.n_ctx_slot = self.kind == "chat", None
        child = Child(spec, self.model.name, on_line=self._on_line)
        child.start()
        self.child = child
        try:
            await child.wait_ready()
        except ChildError as e:
            self.state, self.error = "failed", str(e)
            raise
        self.ready_at = time.monotonic()
        self.load_seconds = self.ready_at - t0
        if spec.n_threads is None and child.n_threads:
            self.auto_threads = child.n_threads
        if self.kind == "chat" and (warning := training_context_warning(self.n_ctx, self.model.n_ctx_train())):
            # llama.cpp says so in its own log (n_ctx_seq > n_ctx_train); say it in ours too
            log.warning("%s: %s", self.model.name, warning)
        if self.kind == "chat" and not self.model.chat_template():
            # llama-server then formats chat messages as ChatML, which a base model (e.g. the
            # Gemma-3-270M base GGUF) was never trained on: say so instead of serving it silently
            log.warning("%s: the GGUF has no chat template (tokenizer.chat_template): chat requests "
                        "(/api/chat, /v1/chat/completions, /api/generate without raw) are formatted as "
                        "llama-server's ChatML fallback, which this model may not follow; for a base model "
                        "send plain text (/v1/completions, or /api/generate with raw: true)", self.model.name)
        if self.kind == "chat" and not self.context_shift:
            log.warning("%s: llama-server cannot shift this model's context (it said so: ctx_shift is not supported), "
                        "so a generation that reaches the end of num_ctx %d stops there (done_reason length), where "
                        "Ollama would go on", self.model.name, self.n_ctx)
        self.client = _child_session(child.base_url, self.config.settings.num_parallel)
        self.state, self.error = "ready", None
        what = "embeddings" if self.kind == "embed" else f"{self.config.settings.num_parallel} slot(s) of {self.n_ctx} tokens"
        log.info("llama-server for %s ready in %.2f s (pid %d, port %d, %s)", self.model.name, self.load_seconds,
                 child.pid, child.port, what)
        self.starts += 1
        if self.kind == "chat" and (self.starts > 1 or self.model.path != self.config.model_path):
            for line in self.kv_lines():  # the startup summary says them for the first load of the default model
                log.info("%s: %s", self.model.name, line)
        self._watch = asyncio.create_task(self._supervise(child))

    async def _check_workers(self) -> None:
        """Probe every ``--rpc`` worker before the child connects to it: llama-server aborts on a
        worker it cannot reach, so a missing or unusable one is an Unavailable (503) naming it
        instead, and the next request tries again (the worker may be back)."""
        off = self.config.offload
        if off is None or not off.rpc:
            return
        from ..devices import WorkerError, probe_worker
        from ..values import parse_endpoints

        for ep in parse_endpoints(off.rpc):
            try:
                await asyncio.to_thread(probe_worker, ep)
            except WorkerError as e:
                self.state, self.error, self.worker_down = "failed", f"{self.model.name} cannot load: {e}", True
                log.error("%s", self.error)
                raise Unavailable(self.error) from None
        self.worker_down = False

    async def _supervise(self, child: Child) -> None:
        code = await child.wait_exit()
        if child.stopping or child is not self.child:
            return
        self.last_exit = describe_exit(code)
        self.last_lines = child.last_lines()
        now = time.monotonic()
        self.restarts = [t for t in self.restarts if now - t < RESTART_WINDOW_S] + [now]
        await self._close_client()
        if len(self.restarts) > MAX_RESTARTS:
            self.state = "failed"
            self.error = (f"llama-server for {self.model.name} died {len(self.restarts)} times within "
                          f"{RESTART_WINDOW_S:.0f} s (last: {self.last_exit}); not restarting. {child.failure()}")
            log.error("%s", self.error)
            return
        self.state = "restarting"
        self.error = f"llama-server for {self.model.name} died ({self.last_exit}); restarting"
        log.error("%s; last log lines: %s", self.error, child.failure())
        async with self.lock:
            try:
                await self.start()
                log.info("llama-server for %s restarted (restart %d)", self.model.name, len(self.restarts))
            except Unavailable:
                pass  # a worker is gone: said by _check_workers; the next request tries again
            except ChildError as e:
                self.state, self.error = "failed", f"restart failed: {e}"
                log.error("%s", self.error)

    async def _close_client(self) -> None:
        if self.client is not None:
            client, self.client = self.client, None
            await client.close()

    async def stop(self, grace: float = STOP_GRACE_S) -> None:
        """Stop the child: SIGTERM, SIGKILL after ``grace`` seconds (waits for no request:
        callers drain requests first)."""
        child, self.child = self.child, None
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None
        await self._close_client()
        if child is not None:
            await child.stop(grace)
        self.state = "stopped"

    def kv_caches(self) -> list:
        """Each KV cache of the child as llama.cpp reported it at load (tqgguf.runtime.KVCacheInfo:
        cells per slot, layers, types, MiB, rotation; Gemma-3: the global one, then the
        sliding-window one); [] before it loaded."""
        from ..runtime import parse_kv_report

        return parse_kv_report("\n".join(self.load_lines)).caches

    def kv_lines(self) -> list[str]:
        """The KV caches (:meth:`kv_caches`) and the rotation llama.cpp applied, as serve's log
        says them: one line per cache, then the rotation (attn_rot_k / attn_rot_v as logged)."""
        caches = self.kv_caches()
        if not caches:
            return []
        out = []
        for c in caches:
            what = ("" if len(caches) == 1 else ", sliding-window layers" if c.swa else ", global layers")
            streams = f" x {c.n_seq} slots" if c.n_seq > 1 else ""
            per = " per slot" if c.n_seq > 1 else ""
            note = (f" (the window: fewer than the {self.n_ctx} tokens of a slot's context)"
                    if c.swa and c.cells < self.n_ctx else "")
            out.append(f"KV cache (llama.cpp){what}: K {c.k_type} {c.k_mib:.2f} MiB + V {c.v_type} {c.v_mib:.2f} MiB "
                       f"= {c.k_mib + c.v_mib:.2f} MiB, {c.cells} cells{per}{streams}{note}, {c.n_layers} layers")
        rk = any(c.attn_rot_k for c in caches)
        rv = any(c.attn_rot_v for c in caches)
        flags = f"attn_rot_k = {int(rk)}, attn_rot_v = {int(rv)}"
        applied = "K and V" if rk and rv else "K only" if rk else "V only" if rv else ""
        rule = "llama.cpp rotates a quantized K or V cache whose head dim is a multiple of 64, never f16"
        if applied:
            out.append(f"rotation (llama.cpp): {applied} ({flags})" + ("" if rk and rv else f"; {rule}"))
        else:
            off = not self.config.settings.attn_rotation
            out.append(f"rotation (llama.cpp): none ({flags}" + ("; rotation is off)" if off else f"; {rule})"))
        return out

    def overridden_env(self) -> dict[str, str]:
        """The LLAMA_ARG_* variables llama-server said a flag of serve's overrides: name -> flag
        (its own "will be overwritten by command line argument" warning at load)."""
        return {m.group(1): m.group(2) for m in map(_OVERRIDDEN_ENV.search, self.load_lines) if m}

    def status(self) -> dict[str, Any]:
        c = self.child
        return {"name": self.model.name, "kind": self.kind, "state": self.state, "pid": c.pid if c else None,
                "port": c.port if c else None, "n_ctx": self.n_ctx, "active_requests": self.active,
                "restarts": len(self.restarts), "last_exit": self.last_exit, "last_log_lines": self.last_lines,
                "error": self.error,
                **({"draft": {"model": self.config.draft.model.name, "accepted": self.draft_accepted,
                              "generated": self.draft_generated}} if self._own() and self.config.draft else {}),
                **({"mmproj": self.config.mmproj.name} if self.vision else {})}


class Manager:
    """The loaded models; see the module docstring.

    Args:
        config: ServeConfig (the default model and every setting).
        resolve: maps a model name not served yet to a GGUF path (default:
            ``tqgguf.models.resolve_model`` without downloading); raises ModelNotFound.
    """

    def __init__(self, config: ServeConfig, resolve: Callable[[str], Path] | None = None):
        self.config = config
        self.settings = config.settings
        self.default = ModelFile(config.alias, config.model_path, ollama=_ollama_entry(config.alias, config.model_path))
        self.models: dict[str, ModelFile] = {str(config.model_path): self.default}
        self.runners: dict[tuple[str, str], Runner] = {}
        self._resolve = resolve or _resolve_local
        self._lock = asyncio.Lock()
        self._next_port = self.settings.llama_server_port
        self._reaper: asyncio.Task | None = None
        self._has_gpu: bool | None = None
        self.shutting_down = False  # set by begin_shutdown: no new requests
        self._cut_timer: asyncio.TimerHandle | None = None
        self._stopping: asyncio.Future | None = None  # shutdown()'s stop of every child

    # -- shutdown ----------------------------------------------------------------------

    def begin_shutdown(self, grace: float, why: str = "SIGTERM/SIGINT") -> None:
        """Start a graceful shutdown (uvicorn has stopped accepting connections): refuse new
        requests (Unavailable, a 503), let the running ones finish for ``grace`` seconds, then
        cut those still running by closing the connections to the children, so each ends
        with the API's error (a final error event or line once streaming) instead of a
        silent cut, and stop the children (:data:`SHUTDOWN_STOP_S`): the process then ends
        within about ``grace`` + 0.5 s, however busy the children are. With no request running,
        :meth:`shutdown` stops them at once."""
        if self.shutting_down:
            return
        self.shutting_down = True
        running = sum(r.active for r in self.runners.values())
        log.info("shutting down (%s): new requests get 503; %d running request(s) have %.0f s to finish",
                 why, running, grace)
        self._cut_timer = asyncio.get_running_loop().call_later(
            grace, lambda: asyncio.ensure_future(self._cut(grace, why)))

    async def _cut(self, grace: float, why: str) -> None:
        running = [r for r in self.runners.values() if r.active]
        if not running:
            await self.shutdown()
            return
        log.warning("shutting down: cutting %d request(s) still running %.0f s after %s", sum(r.active for r in running),
                    grace, why)
        for r in running:
            r.cut_reason = (f"tqgguf serve is shutting down ({why}); this request was still running after the "
                            f"{grace:.0f} s grace period and was stopped")
            for resp in list(r.streams):
                # closing the connection alone does not wake a reader waiting for the next chunk
                resp.content.set_exception(aiohttp.ClientConnectionError(r.cut_reason))
                resp.close()
            await r._close_client()  # requests waiting for a whole answer fail with ClientError
        # a child busy with long prefills ignores SIGTERM until its batches are done: killed after
        # SHUTDOWN_STOP_S, so that the process ends on time (uvicorn waits for the cut requests'
        # answers, then the lifespan's shutdown finds the children stopped)
        await self.shutdown()

    # -- names -------------------------------------------------------------------------

    def find(self, name: str | None) -> ModelFile:
        """The model a request names (None or "": the default). Raises ModelNotFound."""
        if not name:
            return self.default
        low = name.strip().lower()
        for m in self.models.values():
            if low in m.names():
                return m
        if "/" in name or "\\" in name or name.lower().endswith(".gguf"):
            # clients name models; they do not pick files on the server's disk
            raise ModelNotFound(f"model '{name}' not found; served: {', '.join(m.name for m in self.models.values())}; "
                                "others by their `tqgguf models list` name")
        found = _lookup(name.strip())
        if found is not None:  # a downloaded registry model, a copy, or a model in Ollama's store
            key = str(found.path)
            if key not in self.models:
                self.models[key] = ModelFile(found.name, found.path, ollama=found.ollama)
            return self.models[key]
        path = self._resolve(name.strip())
        key = str(path)
        if key not in self.models:
            alias = name.strip().lower().removesuffix(":latest") if not Path(name).expanduser().is_file() else path.stem
            self.models[key] = ModelFile(alias, path, ollama=_ollama_entry(name, path))
        return self.models[key]

    def available(self) -> list[ModelFile]:
        """Every model this server can serve, loaded or not (``/api/tags``, ``/v1/models``): the
        served ones, then every downloaded registry model, every copy and every model in
        Ollama's store (``tqgguf.models.servable``), each name once. Reads the model
        directories: call it off the event loop."""
        from ..models import servable

        out = list(self.models.values())
        seen = {m.tag.lower() for m in out}
        for name, found in servable():
            tag = name if ":" in name else f"{name}:latest"
            if tag.lower() not in seen:
                seen.add(tag.lower())
                out.append(ModelFile(name, found.path, ollama=found.ollama))
        return out

    def vision(self, model: ModelFile) -> bool:
        """Whether ``model`` is served with a vision projector (``--mmproj``: the model ``serve``
        was started with, when one is given)."""
        return self.config.mmproj is not None and model.path == self.config.model_path

    def max_context(self, model: ModelFile) -> int:
        """Largest per-slot context a request may ask for: TQGGUF_MAX_CONTEXT_LENGTH, else the
        model's training context, but never below the configured context."""
        m = self.settings.max_context or model.n_ctx_train() or self.settings.context_length
        return max(m, self.settings.context_length)

    def max_context_source(self, model: ModelFile) -> str:
        """Where :meth:`max_context`'s value comes from, for the log: the max-context setting
        (``flag --max-ctx`` / ``env TQGGUF_MAX_CONTEXT_LENGTH``), the model's training
        context, or the configured context (with its own source) when that is larger."""
        s = self.settings
        limit = s.max_context or model.n_ctx_train()
        if not limit or s.context_length >= limit:
            return f"the context length, {s.source('context_length')}"
        return str(s.source("max_context")) if s.max_context else "the model's training context"

    def _port(self) -> int:
        if not self._next_port:
            return 0
        p = self._next_port
        self._next_port += 1
        return p

    # -- loading -----------------------------------------------------------------------

    async def runner(self, model: ModelFile, kind: str = "chat", num_ctx: int | None = None,
                     load: dict[str, Any] | None = None) -> tuple[Runner, bool]:
        """The ready runner for ``model``/``kind``, started if needed, or reloaded when the
        request's effective load differs from the loaded one, as Ollama's scheduler does
        (``needsReload``: it fills the options a request leaves out with the defaults, then
        compares): the context is ``num_ctx`` per slot, else serve's ``-c``, larger or smaller;
        the load-time options are ``load``'s, else serve's settings (:meth:`plan_load`). So a
        model reloaded for one request's options gets serve's settings back with the next
        request that leaves them out. An embeddings child is started with at least the
        configured context and not reloaded for it. Returns (runner, reloaded for this
        request); ``runner.reload_reason`` says what the reload changed.

        Raises ContextTooLarge, LoadOptionRefused, Unavailable (its failure message), ChildError.
        """
        if num_ctx is not None:
            top = self.max_context(model)
            if num_ctx > top:
                src = ("TQGGUF_MAX_CONTEXT_LENGTH" if self.settings.max_context else
                       "the model's training context; raise it with TQGGUF_MAX_CONTEXT_LENGTH")
                raise ContextTooLarge(f"num_ctx {num_ctx} is above the maximum context {top} for {model.name} ({src})")
        key = (str(model.path), kind)
        fresh = False
        async with self._lock:  # only the lookup: a model loading does not hold up the others
            r = self.runners.get(key)
            if r is None:
                check_model(model)
                await self._make_room(model)
                n_ctx = (num_ctx or self.settings.context_length) if kind == "chat" else \
                    max(self.settings.context_length, num_ctx or 0)
                r = Runner(model, kind, self.config, n_ctx, self._port())
                self.runners[key] = r
                fresh = True
        reloaded = False
        async with r.lock:  # requests for this model wait here while it loads or reloads
            # as Ollama's scheduler (needsReload): any num_ctx that differs from the loaded one
            # reloads, a smaller one too, and so does leaving it out after a request that set one
            # (serve's -c is the default); an embeddings child keeps its context (inputs are cut to fit)
            n_ctx = (num_ctx or self.settings.context_length) if kind == "chat" else r.n_ctx
            try:
                params, changes = await self.plan_load(r, load or {}, n_ctx=n_ctx)
            except LoadOptionRefused:
                if fresh and self.runners.get(key) is r:
                    del self.runners[key]
                raise
            resize = n_ctx != r.n_ctx
            if fresh:
                r.load = params
                try:
                    await r.start()
                except (ChildError, Unavailable):
                    if self.runners.get(key) is r:
                        del self.runners[key]
                    await r.stop()
                    raise
                if num_ctx and r.n_ctx != self.settings.context_length:
                    changes.insert(0, f"num_ctx {r.n_ctx}")
                reloaded = bool(changes)
            elif (resize or params != r.load) and r.state == "ready":
                was = [f"num_ctx {r.n_ctx}"] if resize else []
                was += [f"{c.split()[0]} {_shown(r.effective(c.split()[0]))}" for c in changes]
                if resize:
                    changes.insert(0, f"num_ctx {n_ctx}")
                back = (["num_ctx"] if resize and num_ctx is None else []) + \
                    [c.split()[0] for c in changes
                     if not c.startswith("num_ctx ") and self._left_out(c.split()[0], load or {})]
                log.info("reloading %s with %s (was %s)%s: waiting for %d request(s) to finish", model.name,
                         ", ".join(changes), ", ".join(was),
                         f"; serve's settings for {', '.join(back)}, which the request does not set" if back else "",
                         r.active)
                await r.idle.wait()
                await r.stop()
                r.n_ctx = n_ctx
                r.load = params
                await r.start()
                reloaded = True
            elif (r.state == "stopped" or (r.state == "failed" and r.worker_down)) and self.runners.get(key) is r:
                await r.start()  # a worker that was down may be back: probed again first
            if reloaded:
                r.reload_reason = ", ".join(changes)
        if self.runners.get(key) is not r:  # unloaded while this request waited: load it again
            return await self.runner(model, kind, num_ctx, load)
        if r.state != "ready":
            raise Unavailable(r.error or f"llama-server for {model.name} is {r.state}")
        return r, reloaded

    @staticmethod
    def _left_out(option: str, opts: dict[str, Any]) -> bool:
        """Whether a request's options leave ``option`` to serve's setting: not sent, or sent as
        Ollama's "the server's choice" (``num_gpu`` -1, ``num_thread`` 0)."""
        v = opts.get(option)
        return v is None or (option == "num_gpu" and v < 0) or (option == "num_thread" and v == 0)

    async def has_gpu(self) -> bool:
        """Whether the llama-server binary lists a GPU device (asked once)."""
        if self._has_gpu is None and self.config.offload is not None and self.config.offload.rpc:
            self._has_gpu = True  # RPC workers are offload devices
        if self._has_gpu is None:
            try:
                self._has_gpu = bool(await asyncio.to_thread(gpu_devices, self.config.llama_server))
            except (OSError, subprocess.TimeoutExpired):
                self._has_gpu = False
        return self._has_gpu

    async def plan_load(self, r: Runner, opts: dict[str, Any],
                        n_ctx: int | None = None) -> tuple[LoadParams, list[str]]:
        """What ``r`` must be loaded with for a request's Ollama load-time options ``opts``
        (names from :data:`LOAD_OPTIONS`, values already type-checked; num_ctx is handled by
        :meth:`runner`, whose context ``n_ctx`` — default: the loaded one — clamps num_batch):
        ``(params, changes)``. ``params`` is serve's settings (:func:`default_load`) with the
        options the request sets, so an option it leaves out comes back to serve's setting;
        ``changes`` lists each option whose value differs from the loaded one, e.g.
        ``["num_batch 256"]`` (empty: nothing to do).

        As Ollama's scheduler: a value equal to the one serve's settings give is no change,
        ``num_gpu`` -1 and ``num_thread`` 0 mean "the server's choice" (serve's setting), a
        different value of a "reload" option reloads the model with it for this request.
        Raises LoadOptionRefused for a different value of a "fixed" option, any change of an
        embeddings child (its batch is its whole context), and GPU layers on a llama-server
        without a GPU device: the message names the option, the value given and the value the
        server runs with.
        """
        base = default_load(self.config)
        params = base
        s = self.settings
        for k, v in opts.items():
            policy = LOAD_OPTIONS[k][0]
            if policy == "context" or (k == "num_gpu" and v < 0) or (k == "num_thread" and v == 0):
                continue
            want = _layers(v, r.model.n_layer()) if k == "num_gpu" else v
            if policy == "reload" and r.kind == "chat":  # an embeddings child's batch is its context: compared below
                with_v = dataclasses.replace(params, **{_LOAD_FIELD[k]: v})
                if r.effective(k, with_v, n_ctx) == r.effective(k, base, n_ctx):
                    continue  # what serve's settings give anyway (-b clamped to the context, ...)
            have = r.effective(k, base, n_ctx)
            if want == have:
                continue
            given = f"options.{k} {json.dumps(v)}: this server runs {r.model.name} with {k} {json.dumps(have)}"
            if policy == "fixed":
                why = _FIXED_WHY[k].format(ctk=s.cache_type_k, ctv=s.cache_type_v)
                raise LoadOptionRefused(k, f"{given}, and it cannot change per request ({why}); send "
                                           f"{json.dumps(have)} or leave it out")
            if r.kind == "embed":
                raise LoadOptionRefused(k, f"{given} for embeddings, whose child processes each input in one "
                                           f"batch of its whole context; only num_ctx may change for them")
            if k == "num_gpu" and v > 0 and not await self.has_gpu():
                raise LoadOptionRefused(k, f"{given}: {self.config.llama_server} lists no GPU device (built for "
                                           "the CPU only, or no driver / CUDA_VISIBLE_DEVICES hides it), so no "
                                           "layer can be offloaded; send 0 or leave it out")
            params = dataclasses.replace(params, **{_LOAD_FIELD[k]: v})
        # what differs from the loaded model: the options the request sets first, in its order,
        # then those it leaves to serve's settings
        order = [k for k in opts if k in _LOAD_FIELD] + [k for k in _LOAD_FIELD if k not in opts]
        changes = [f"{k} {_shown(r.effective(k, params, n_ctx))}" for k in order
                   if getattr(params, _LOAD_FIELD[k]) != getattr(r.load, _LOAD_FIELD[k])]
        return params, changes

    async def _make_room(self, model: ModelFile) -> None:
        loaded = {k[0] for k in self.runners}
        if str(model.path) in loaded or len(loaded) < self.settings.max_loaded_models:
            return
        idle = [r for r in self.runners.values() if r.active == 0]
        if not idle:
            raise Unavailable(f"{len(loaded)} models are loaded and busy (TQGGUF_MAX_LOADED_MODELS / "
                              f"OLLAMA_MAX_LOADED_MODELS = {self.settings.max_loaded_models}); retry later")
        victim = min(idle, key=lambda r: r.last_used)
        log.info("unloading %s to make room for %s (max loaded models: %d)", victim.model.name, model.name,
                 self.settings.max_loaded_models)
        for k in [k for k in self.runners if k[0] == str(victim.model.path)]:
            await self.runners.pop(k).stop()

    @contextlib.asynccontextmanager
    async def use(self, name: str | None, kind: str = "chat", *, num_ctx: int | None = None,
                  load: dict[str, Any] | None = None,
                  keep_alive: float | None = None) -> AsyncIterator[tuple[Runner, bool]]:
        """Hold a runner for one request (``num_ctx``/``load``: see :meth:`runner`); on exit
        apply keep-alive (the request's, else the default) from now."""
        if self.shutting_down:
            raise Unavailable("tqgguf serve is shutting down and takes no new requests")
        model = self.find(name)
        r, reloaded = await self.runner(model, kind, num_ctx, load)
        r.active += 1
        r.idle.clear()
        try:
            yield r, reloaded
        finally:
            r.active -= 1
            r.last_used = time.monotonic()
            if r.active == 0:
                r.idle.set()
            ka = self.settings.keep_alive if keep_alive is None else keep_alive
            for other in self._runners_of(model):
                other.expires_at = None if ka < 0 else time.monotonic() + ka
            if ka == 0 and r.active == 0:
                await self.unload(model, reason="keep_alive 0")

    def _runners_of(self, model: ModelFile) -> list[Runner]:
        return [r for k, r in self.runners.items() if k[0] == str(model.path)]

    async def unload(self, model: ModelFile, reason: str) -> bool:
        """Stop every idle child of ``model``; True when something was unloaded."""
        async with self._lock:
            done = False
            for k in [k for k, r in self.runners.items() if k[0] == str(model.path) and r.active == 0]:
                await self.runners.pop(k).stop()
                done = True
            if done:
                log.info("unloaded %s (%s)", model.name, reason)
            return done

    def loaded(self) -> list[Runner]:
        return [r for r in self.runners.values() if r.state in ("ready", "loading", "restarting")]

    def expires_in(self, r: Runner) -> float | None:
        return None if r.expires_at is None else r.expires_at - time.monotonic()

    async def reap(self, period: float = 0.5) -> None:
        """Background task: unload models whose keep-alive has run out."""
        while True:
            await asyncio.sleep(period)
            now = time.monotonic()
            due = {str(r.model.path): r.model for r in list(self.runners.values())
                   if r.active == 0 and r.expires_at is not None and r.expires_at <= now}
            for m in due.values():
                if all(r.active == 0 for r in self._runners_of(m)):
                    await self.unload(m, reason="keep-alive expired")

    async def start(self) -> Runner:
        """Load the default model (startup). Raises ChildError with llama-server's message."""
        n_ctx = self.default.params().get("num_ctx")  # an Ollama model's PARAMETER num_ctx, as requests will ask
        if isinstance(n_ctx, int) and not isinstance(n_ctx, bool) and n_ctx > 0:
            n_ctx = max(min(n_ctx, self.max_context(self.default)), MIN_CONTEXT)
            log.info("%s: num_ctx %d from its Ollama parameters (the model's Modelfile PARAMETER num_ctx), as "
                     "requests without options.num_ctx will ask", self.default.name, n_ctx)
        else:
            n_ctx = None
        r, _ = await self.runner(self.default, num_ctx=n_ctx)
        ka = self.settings.keep_alive
        r.expires_at = None if ka < 0 else time.monotonic() + ka
        self._reaper = asyncio.create_task(self.reap())
        return r

    async def shutdown(self) -> None:
        """Stop every child, all at once: SIGTERM, SIGKILL after :data:`SHUTDOWN_STOP_S`
        (serve is ending; its requests have been answered or cut)."""
        if self._cut_timer is not None:
            self._cut_timer.cancel()
        if self._reaper is not None:
            self._reaper.cancel()
        if self._stopping is None:  # once; a later call (the lifespan's, serve's own) waits for the same
            runners = list(self.runners.values())
            self.runners.clear()
            self._stopping = asyncio.ensure_future(asyncio.gather(*(r.stop(SHUTDOWN_STOP_S) for r in runners)))
        await asyncio.shield(self._stopping)  # a cancelled caller (the cut's task) leaves it running

    def kill_all(self) -> None:
        """Synchronous last resort: SIGKILL every child."""
        for r in self.runners.values():
            if r.child is not None:
                r.child.kill_now()


def _lookup(name: str):
    """tqgguf.models.lookup, a store that cannot be read counting as no match (the resolver
    then says what is known)."""
    from ..models import ModelError, lookup

    try:
        return lookup(name)
    except (ModelError, OSError) as e:
        raise ModelNotFound(f"model '{name}' cannot be served: {e}") from None


def _ollama_entry(name: str, path: Path):
    """The Ollama store entry of a model served as ``name`` from ``path`` (by name, else by
    blob), or None: where its parameters and system prompt come from."""
    from .. import ollama_store

    try:
        m = ollama_store.find(name)
        if m is not None and m.gguf.resolve() == Path(path).resolve():
            return m
        return ollama_store.find_by_blob(Path(path))
    except (ollama_store.OllamaStoreError, OSError):
        return None


def _resolve_local(name: str) -> Path:
    """A model name from `tqgguf models list` (cached) or a GGUF path; ModelNotFound otherwise."""
    from ..models import ModelError, resolve_model

    try:
        return Path(resolve_model(name, pull_missing=False, log=lambda _m: None))
    except (ModelError, OSError, ValueError) as e:
        # the resolver speaks to CLI users ("neither an existing file nor a known model
        # name"); over the API only names count, so keep only its hint and the known names
        why = str(e)
        cut = next((why.index(k) for k in ("did you mean", "known models") if k in why), 0)
        hint = why[cut:]
        raise ModelNotFound(f"model '{name}' not found; {hint}") from None
