"""One model served by one llama-server child in ``tqgguf serve``: the :class:`Runner`.

A runner is ``chat`` (completions, chat, tools, structured output; ``-np`` slots with
continuous batching) or ``embed`` (an embeddings-only child, started on the first
embeddings request). It starts its child and waits until it serves, reads what the child
logs (placement, KV caches, threads, draft acceptance, whether the context can shift),
keeps the connection pool to it, restarts it when it dies (at most :data:`MAX_RESTARTS`
times within :data:`RESTART_WINDOW_S`) and stops it. Which runners exist, and when they
start, reload or unload, is the :class:`~.manager.Manager`'s business.
"""
from __future__ import annotations

import asyncio
import re
import logging
import time
from typing import Any

import aiohttp

from .child import LLAMA_DEFAULT_N_BATCH, STOP_GRACE_S, Child, ChildError, ChildSpec, describe_exit
from .load_options import LoadParams, default_load, layers_offloaded
from .modelfile import POOLING_RANK, ModelFile
from .serveconfig import ServeConfig

log = logging.getLogger("tqgguf.server")

#: Restarts of a crashed child within RESTART_WINDOW_S before serve gives up on that model.
MAX_RESTARTS = 3
RESTART_WINDOW_S = 60.0


class Unavailable(RuntimeError):
    """The model's llama-server is not running (failed to load, or crashed and gave up)."""


class DraftRefused(ChildError):
    """llama-server loaded the draft model (``-md``) but could not use it for speculative
    decoding (its "failed to initialize speculative decoding context", e.g. another
    vocabulary): it would serve without drafting while serve says the draft is active.
    The message is llama-server's reason; serve refuses such a draft at startup (exit 2)."""


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
# llama-server's lines when it cannot draft with -md (server-context.cpp load_model, common/speculative.cpp):
# "failed to initialize speculative decoding context: draft model vocab type must match target model ..." and the
# warning before it that says which vocabularies differ
_DRAFT_FAILED = re.compile(r"failed to initialize speculative decoding context: .*|draft model .* must match target model.*")
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
        self.waiting = 0  # requests that looked this runner up and wait for its lock (Manager.runner)
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
        self.draft_errors: list[str] = []  # llama-server's reasons it cannot draft with -md (DraftRefused)

    @property
    def key(self) -> tuple[str, str]:
        """``(model path, kind)``: this runner's key in ``Manager.runners``."""
        return (str(self.model.path), self.kind)

    def spec(self) -> ChildSpec:
        """The child's command line as a ChildSpec: serve's settings, this runner's context and
        load, the draft and projector for the model ``serve`` was started with. Raises ChildError
        when the engine settings do not fit this model."""
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
        it (None before one did); num_gpu as layers offloaded (:func:`~.load_options.layers_offloaded`); f16_kv true
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
            return layers_offloaded(load.n_gpu_layers, self.model.n_layer())
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
        if self._own() and self.config.draft is not None and (m := _DRAFT_FAILED.search(line)):
            self.draft_errors.append(m.group(0).strip())
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
        """Start the child and wait until it serves. Raises ChildError (its own message). A restart
        after the child died stays ``restarting`` (``/health``) until it serves."""
        self.state = "restarting" if self.state == "restarting" else "loading"
        t0 = time.monotonic()
        try:
            spec = self.spec()
        except ChildError as e:
            self.state, self.error = "failed", str(e)
            raise
        await self._check_workers()
        self.load_lines, self.offloaded, self.on_device = [], None, False
        self.context_shift, self.n_ctx_slot, self.draft_errors = self.kind == "chat", None, []
        child = Child(spec, self.model.name, on_line=self._on_line)
        child.start()
        self.child = child
        try:
            await child.wait_ready()
        except ChildError as e:
            self.state, self.error = "failed", str(e)
            raise
        if self.draft_errors:  # it serves, but without the draft serve would report as active
            self.state = "failed"
            self.error = (f"llama-server cannot use the draft model {self.config.draft.model.name} (-md) for "
                          f"speculative decoding with {self.model.name}: " + "; ".join(dict.fromkeys(self.draft_errors))
                          + " (the draft must share the model's vocabulary)")
            await child.stop()
            raise DraftRefused(self.error)
        self.ready_at = time.monotonic()
        self.load_seconds = self.ready_at - t0
        if spec.n_threads is None and child.n_threads:
            self.auto_threads = child.n_threads
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
        await self.close_client()
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

    async def close_client(self) -> None:
        """Close the connection pool to the child (its requests waiting for an answer fail with
        aiohttp.ClientError); a later :meth:`start` opens a new one."""
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
        await self.close_client()
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
        """This runner as ``/health`` lists it under ``runners``: name, kind, state, pid, port,
        n_ctx, active requests, requests waiting for it (while it loads, or behind a pending reload,
        the reloading request too), restarts, the last exit and log lines, the error; the draft's
        acceptance counts and the projector where there are."""
        c = self.child
        return {"name": self.model.name, "kind": self.kind, "state": self.state, "pid": c.pid if c else None,
                "port": c.port if c else None, "n_ctx": self.n_ctx, "active_requests": self.active,
                "waiting_requests": self.waiting,
                "restarts": len(self.restarts), "last_exit": self.last_exit, "last_log_lines": self.last_lines,
                "error": self.error,
                **({"draft": {"model": self.config.draft.model.name, "accepted": self.draft_accepted,
                              "generated": self.draft_generated}} if self._own() and self.config.draft else {}),
                **({"mmproj": self.config.mmproj.name} if self.vision else {})}
