"""Which models are loaded in ``tqgguf serve``: one llama-server child per (model, kind).

A :class:`Runner` is one model served by one child: ``chat`` (completions, chat, tools,
structured output; ``-np`` slots with continuous batching) or ``embed`` (an
embeddings-only child, started on the first embeddings request). The :class:`Manager`
resolves request model names, starts runners on demand, keeps at most
``max_loaded_models`` models loaded (the least recently used idle one is unloaded for a
new one), applies keep-alive per request as Ollama does, reloads a model with a larger
context when a request's ``num_ctx`` needs it, and restarts a child that dies.

Ollama's rules followed here (docs/api.md, docs/faq.md of the Ollama repository):
``keep_alive`` sent with a request sets how long the model stays loaded after *that*
request (0 unloads it at once, negative keeps it); a later request without it gets the
server default (``OLLAMA_KEEP_ALIVE``) again.
"""
from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, AsyncIterator, Callable

import aiohttp

from ..config import Settings
from .child import Child, ChildError, ChildSpec, describe_exit

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


@dataclass
class ServeConfig:
    """Everything ``tqgguf serve`` needs besides the HTTP address.

    model_path: the GGUF file served by default; alias: the name clients use for it;
    settings: resolved :class:`~tqgguf.config.Settings`; llama_server: the binary;
    n_gpu_layers: ``-ngl``; n_threads: ``-t`` for llama-server (None: its default, every
    core); verbose: echo every llama-server log line (otherwise only warnings, errors and
    load/exit lines); engine_env: the engine variables (LLAMA_*) of the default model's
    child; engine_env_for: the same for any model path (``--k-center auto`` and layer plans
    depend on the model; None: engine_env for every model), raising ValueError for a model
    the settings do not fit; engine_notes: startup lines saying what was chosen and why.
    """

    model_path: Path
    alias: str
    settings: Settings
    llama_server: Path
    n_gpu_layers: int = 0
    n_threads: int | None = None
    verbose: bool = False
    engine_env: dict[str, str] = field(default_factory=dict)
    engine_env_for: Callable[[Path], dict[str, str]] | None = None
    engine_notes: list[str] = field(default_factory=list)


@dataclass
class ModelFile:
    """A servable model: the name clients use and its GGUF, with the metadata the model
    routes show (read once with ``gguf.GGUFReader``: scalar keys only)."""

    name: str
    path: Path
    _meta: dict[str, Any] | None = None

    @property
    def tag(self) -> str:
        return self.name if ":" in self.name else f"{self.name}:latest"

    def names(self) -> set[str]:
        stem = self.path.stem
        return {n.lower() for n in (self.name, self.tag, self.path.name, stem, f"{stem}:latest", str(self.path))}

    def metadata(self) -> dict[str, Any]:
        """The GGUF's metadata keys (see :func:`read_gguf_metadata`), read once."""
        if self._meta is None:
            self._meta = read_gguf_metadata(self.path)
        return self._meta

    @property
    def digest(self) -> str:
        st = self.path.stat()
        # identifies the file version (path, size, mtime) without reading the whole file
        return hashlib.sha256(f"{self.path.resolve()}|{st.st_size}|{st.st_mtime_ns}".encode()).hexdigest()

    def details(self) -> dict[str, Any]:
        md = self.metadata()
        arch = str(md.get("general.architecture", "unknown"))
        return {"parent_model": "", "format": "gguf", "family": arch, "families": [arch],
                "parameter_size": str(md.get("general.size_label", "")),
                "quantization_level": _ftype_name(md.get("general.file_type"))}

    def n_ctx_train(self) -> int:
        md = self.metadata()
        return int(md.get(f"{md.get('general.architecture')}.context_length", 0) or 0)

    def has_pooling(self) -> bool:
        md = self.metadata()
        return int(md.get(f"{md.get('general.architecture')}.pooling_type", 0) or 0) > 0

    def chat_template(self) -> str:
        return str(self.metadata().get("tokenizer.chat_template", ""))


# GGUF value types (gguf-py's GGUFValueType; the GGUF spec, ggml/docs/gguf.md): scalar struct formats
_GGUF_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_GGUF_STRING, _GGUF_ARRAY = 8, 9


def read_gguf_metadata(path: Path, max_array: int = 64) -> dict[str, Any]:
    """The metadata key/values of a GGUF file (header only; tensors are not read).

    Arrays longer than ``max_array`` (the vocabulary, merges, scores) are left out.
    Layout from the GGUF spec (ggml/docs/gguf.md): magic, u32 version, u64 tensor count,
    u64 key count, then per key a string name, a u32 type and the value. This is a
    header walk rather than ``gguf.GGUFReader`` because that one maps every tensor and
    array (about 10 s for a 100 MB model on a busy 2-core machine; this takes
    milliseconds). Raises ValueError for a file that is not GGUF.
    """
    import struct

    def scalar(f, fmt):
        return struct.unpack(fmt, f.read(struct.calcsize(fmt)))[0]

    def string(f):
        return f.read(scalar(f, "<Q")).decode("utf-8", errors="replace")

    def value(f, t, keep=True):
        if t in _GGUF_SCALARS:
            return scalar(f, _GGUF_SCALARS[t])
        if t == _GGUF_STRING:
            return string(f)
        if t == _GGUF_ARRAY:
            et, n = scalar(f, "<I"), scalar(f, "<Q")
            if et in _GGUF_SCALARS and (not keep or n > max_array):
                f.seek(n * struct.calcsize(_GGUF_SCALARS[et]), 1)
                return None
            items = [value(f, et, keep and n <= max_array) for _ in range(n)]
            return items if keep and n <= max_array else None
        raise ValueError(f"unknown GGUF value type {t}")

    out: dict[str, Any] = {}
    with open(path, "rb") as f:
        if f.read(4) != b"GGUF":
            raise ValueError(f"{path} is not a GGUF file")
        scalar(f, "<I")
        scalar(f, "<Q")
        for _ in range(scalar(f, "<Q")):
            key = string(f)
            v = value(f, scalar(f, "<I"))
            if v is not None:
                out[key] = v
    return out


# llama.cpp's llama_ftype values (include/llama.h, enum llama_ftype), as Ollama prints them.
_FTYPES = {0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K", 11: "Q3_K_S",
           12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S", 17: "Q5_K_M", 18: "Q6_K",
           19: "IQ2_XXS", 20: "IQ2_XS", 21: "Q2_K_S", 22: "IQ3_XS", 23: "IQ3_XXS", 24: "IQ1_S", 25: "IQ4_NL",
           26: "IQ3_S", 27: "IQ3_M", 28: "IQ2_S", 29: "IQ2_M", 30: "IQ4_XS", 31: "IQ1_M", 32: "BF16",
           36: "TQ1_0", 37: "TQ2_0", 38: "MXFP4"}


def _ftype_name(code: Any) -> str:
    try:
        return _FTYPES.get(int(code), "unknown")
    except (TypeError, ValueError):
        return "unknown"


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
    front's CPU per request further; README's serve section has the numbers.
    """
    return aiohttp.ClientSession(
        base_url=base_url, timeout=aiohttp.ClientTimeout(total=None, sock_connect=10),
        connector=aiohttp.TCPConnector(limit=2 * n_parallel + 8, keepalive_timeout=CHILD_KEEPALIVE_S),
        read_bufsize=1 << 20)


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
        self.load_seconds = 0.0
        self.client: aiohttp.ClientSession | None = None  # to the child; see start()
        self._watch: asyncio.Task | None = None

    @property
    def key(self) -> tuple[str, str]:
        return (str(self.model.path), self.kind)

    def spec(self) -> ChildSpec:
        s, c = self.config.settings, self.config
        return ChildSpec(binary=c.llama_server, model=self.model.path, alias=self.model.name, n_ctx=self.n_ctx,
                         n_parallel=s.num_parallel, ctk=s.cache_type_k, ctv=s.cache_type_v,
                         flash_attn=s.flash_attention, n_gpu_layers=c.n_gpu_layers, n_threads=c.n_threads,
                         embedding=self.kind == "embed",
                         model_pooling=self.kind == "embed" and self.model.has_pooling(),
                         env=self._engine_env(), port=self.port)

    def _engine_env(self) -> dict[str, str]:
        c = self.config
        if c.engine_env_for is None or self.model.path == c.model_path:
            return dict(c.engine_env)
        try:
            return c.engine_env_for(self.model.path)
        except ValueError as e:  # e.g. a layer plan that does not fit this model
            raise ChildError(f"cannot load {self.model.name} with these settings: {e}") from e

    def _on_line(self, line: str) -> None:
        # llama-server's lines carry a level letter after the timestamp: I, W, E
        parts = line.split(" ", 2)
        level = parts[1] if len(parts) > 2 and len(parts[1]) == 1 else "I"
        name = f"{self.model.name}{'/embed' if self.kind == 'embed' else ''}"
        if level == "E":
            log.error("[llama-server %s] %s", name, line)
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
        child = Child(spec, self.model.name, on_line=self._on_line)
        child.start()
        self.child = child
        try:
            await child.wait_ready()
        except ChildError as e:
            self.state, self.error = "failed", str(e)
            raise
        self.load_seconds = time.monotonic() - t0
        self.client = _child_session(child.base_url, self.config.settings.num_parallel)
        self.state, self.error = "ready", None
        what = "embeddings" if self.kind == "embed" else f"{self.config.settings.num_parallel} slot(s) of {self.n_ctx} tokens"
        log.info("llama-server for %s ready in %.2f s (pid %d, port %d, %s)", self.model.name, self.load_seconds,
                 child.pid, child.port, what)
        self._watch = asyncio.create_task(self._supervise(child))

    async def _supervise(self, child: Child) -> None:
        code = await child.wait_exit()
        if child.stopping or child is not self.child:
            return
        self.last_exit = describe_exit(code)
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
            except ChildError as e:
                self.state, self.error = "failed", f"restart failed: {e}"
                log.error("%s", self.error)

    async def _close_client(self) -> None:
        if self.client is not None:
            client, self.client = self.client, None
            await client.close()

    async def stop(self) -> None:
        """Stop the child (waits for nothing: callers drain requests first)."""
        child, self.child = self.child, None
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None
        await self._close_client()
        if child is not None:
            await child.stop()
        self.state = "stopped"

    def status(self) -> dict[str, Any]:
        c = self.child
        return {"name": self.model.name, "kind": self.kind, "state": self.state, "pid": c.pid if c else None,
                "port": c.port if c else None, "n_ctx": self.n_ctx, "active_requests": self.active,
                "restarts": len(self.restarts), "last_exit": self.last_exit, "error": self.error}


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
        self.default = ModelFile(config.alias, config.model_path)
        self.models: dict[str, ModelFile] = {str(config.model_path): self.default}
        self.runners: dict[tuple[str, str], Runner] = {}
        self._resolve = resolve or _resolve_local
        self._lock = asyncio.Lock()
        self._next_port = self.settings.llama_server_port
        self._reaper: asyncio.Task | None = None

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
        path = self._resolve(name.strip())
        key = str(path)
        if key not in self.models:
            alias = name.strip().lower().removesuffix(":latest") if not Path(name).expanduser().is_file() else path.stem
            self.models[key] = ModelFile(alias, path)
        return self.models[key]

    def max_context(self, model: ModelFile) -> int:
        """Largest per-slot context a request may ask for: TQGGUF_MAX_CONTEXT_LENGTH, else the
        model's training context, but never below the configured context."""
        m = self.settings.max_context or model.n_ctx_train() or self.settings.context_length
        return max(m, self.settings.context_length)

    def _port(self) -> int:
        if not self._next_port:
            return 0
        p = self._next_port
        self._next_port += 1
        return p

    # -- loading -----------------------------------------------------------------------

    async def runner(self, model: ModelFile, kind: str = "chat", num_ctx: int | None = None) -> tuple[Runner, bool]:
        """The ready runner for ``model``/``kind``, started (or reloaded with a larger
        context for ``num_ctx``) if needed; returns (runner, reloaded_for_num_ctx).

        Raises ContextTooLarge, Unavailable (its failure message), ChildError.
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
                await self._make_room(model)
                r = Runner(model, kind, self.config, max(self.settings.context_length, num_ctx or 0), self._port())
                self.runners[key] = r
                fresh = True
        reloaded = False
        async with r.lock:  # requests for this model wait here while it loads or reloads
            if fresh:
                try:
                    await r.start()
                except ChildError:
                    if self.runners.get(key) is r:
                        del self.runners[key]
                    await r.stop()
                    raise
                reloaded = bool(num_ctx and num_ctx > self.settings.context_length)
            elif num_ctx is not None and num_ctx > r.n_ctx and kind == "chat" and r.state == "ready":
                log.info("reloading %s with num_ctx %d (was %d): waiting for %d request(s) to finish",
                         model.name, num_ctx, r.n_ctx, r.active)
                await r.idle.wait()
                await r.stop()
                r.n_ctx = num_ctx
                await r.start()
                reloaded = True
            elif r.state == "stopped" and self.runners.get(key) is r:
                await r.start()
        if self.runners.get(key) is not r:  # unloaded while this request waited: load it again
            return await self.runner(model, kind, num_ctx)
        if r.state != "ready":
            raise Unavailable(r.error or f"llama-server for {model.name} is {r.state}")
        return r, reloaded

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
                  keep_alive: float | None = None) -> AsyncIterator[tuple[Runner, bool]]:
        """Hold a runner for one request; on exit apply keep-alive (the request's, else the
        default) from now."""
        model = self.find(name)
        r, reloaded = await self.runner(model, kind, num_ctx)
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
        r, _ = await self.runner(self.default)
        ka = self.settings.keep_alive
        r.expires_at = None if ka < 0 else time.monotonic() + ka
        self._reaper = asyncio.create_task(self.reap())
        return r

    async def shutdown(self) -> None:
        """Stop every child."""
        if self._reaper is not None:
            self._reaper.cancel()
        for r in list(self.runners.values()):
            await r.stop()
        self.runners.clear()

    def kill_all(self) -> None:
        """Synchronous last resort: SIGKILL every child."""
        for r in self.runners.values():
            if r.child is not None:
                r.child.kill_now()


def _resolve_local(name: str) -> Path:
    """A model name from `tqgguf models list` (cached) or a GGUF path; ModelNotFound otherwise."""
    from ..models import ModelError, resolve_model

    try:
        return Path(resolve_model(name, pull_missing=False, log=lambda _m: None))
    except (ModelError, OSError, ValueError) as e:
        raise ModelNotFound(f"model '{name}' not found: {e}") from None
