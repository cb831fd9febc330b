"""Which models are loaded in ``tqgguf serve``: one :class:`~.runner.Runner` (a llama-server
child) per (model, kind), kept by the :class:`Manager`.

The :class:`Manager` resolves request model names (served ones, ``tqgguf models`` names,
copies, Ollama's store, :meth:`Manager.available` for the listings), starts runners on
demand, keeps at most ``max_loaded_models`` models loaded (the least recently used idle one
is unloaded for a new one), applies keep-alive per request as Ollama does, reloads a model
when a request's effective load options (``num_ctx``, ``num_thread``, ... : what the request
sets, serve's settings for what it leaves out) differ from the loaded ones (larger or
smaller: Ollama's scheduler compares them), says which model has a vision projector, and
shuts the children down.

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
import logging
import subprocess
import time
from pathlib import Path
from typing import Any, AsyncIterator, Awaitable, Callable

import aiohttp

from ..config import MIN_CONTEXT
from ..values import MAX_THREADS
from .child import SHUTDOWN_STOP_S, ChildError, gpu_devices
from .load_options import (FIXED_WHY, LOAD_FIELD, LOAD_OPTIONS, LoadOptionRefused, LoadParams, default_load,
                           layers_offloaded, shown_value)
from .modelfile import ModelFile
from .runner import Runner, Unavailable
from .serveconfig import ServeConfig

log = logging.getLogger("tqgguf.server")


class ModelNotFound(LookupError):
    """A request named a model this server cannot serve."""


class ContextTooLarge(ValueError):
    """A request's num_ctx is above the configured maximum."""


class ModelRefused(ChildError):
    """A request named a model that cannot be served at all (no vocabulary: every request
    would abort its llama-server); a 400 naming why."""


def check_model(model: ModelFile) -> None:
    """Refuse, before any llama-server starts, a model every request would kill (ModelRefused):
    one without a vocabulary (tqgguf.models.vocabulary_error)."""
    from ..models import vocabulary_error

    if (why := vocabulary_error(model.path, "`tqgguf serve` tokenizes every request")) is not None:
        raise ModelRefused(why)


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
        self._held_to_training: set[str] = set()  # models whose default context default_ctx held (logged once)
        self.shutting_down = False  # set by begin_shutdown: no new requests
        self._cut_timer: asyncio.TimerHandle | None = None
        self._stopping: asyncio.Future | None = None  # shutdown()'s stop of every child
        self._closing = asyncio.Event()  # set by begin_shutdown: requests waiting for a load give up
        self._why = "SIGTERM/SIGINT"  # the signal that began the shutdown
        self._room = asyncio.Event()  # set (and replaced) when a runner goes idle or away: _room_changed
        self._queued = 0  # requests waiting for room (Ollama's queue, OLLAMA_MAX_QUEUE)

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
        self._why = why
        self._closing.set()
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
            await r.close_client()  # requests waiting for a whole answer fail with ClientError
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
        found = _lookup(name.strip())  # Ollama's full names too (registry.ollama.ai/library/NAME:TAG)
        if found is not None:  # a downloaded registry model, a copy, or a model in Ollama's store
            key = str(found.path)
            if key not in self.models:
                self.models[key] = ModelFile(found.name, found.path, ollama=found.ollama)
            return self.models[key]
        if "/" in name or "\\" in name or name.lower().endswith(".gguf"):
            # clients name models; they do not pick files on the server's disk
            raise ModelNotFound(f"model '{name}' not found; served: {', '.join(m.name for m in self.models.values())}; "
                                "others by their `tqgguf models list` name")
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
        model's training context, but never below the configured context, and never above the
        training context when the GGUF gives one: llama-server caps every slot there
        (``n_ctx_slot``, tools/server/server-context.cpp), so a longer one would hold fewer
        tokens than it says."""
        train = model.n_ctx_train()
        m = max(self.settings.max_context or train or self.settings.context_length, self.settings.context_length)
        return min(m, train) if train else m

    def model_ctx(self, model: ModelFile) -> int | None:
        """The context per slot ``model``'s Modelfile parameters give (an Ollama model's
        ``PARAMETER num_ctx``), held to MIN_CONTEXT .. :meth:`max_context`; None without one."""
        n = model.params().get("num_ctx")
        if isinstance(n, int) and not isinstance(n, bool) and n > 0:
            return max(min(n, self.max_context(model)), MIN_CONTEXT)
        return None

    def default_ctx(self, model: ModelFile) -> int:
        """The context a request that does not set ``num_ctx`` runs ``model`` with, on every route
        (OpenAI's and llama-server's too, as Ollama applies a model's parameters to its OpenAI
        endpoints): :meth:`model_ctx`, else serve's ``-c``, held to the model's training context
        (as Ollama holds num_ctx to it; :meth:`max_context`); ``serve`` refuses a ``-c`` above the
        training context of the model it starts with."""
        n = self.model_ctx(model) or self.settings.context_length
        top = self.max_context(model)
        if n > top and model.name not in self._held_to_training:
            self._held_to_training.add(model.name)
            log.warning("%s: the default context, %d tokens a slot, is above its training context; served with %d "
                        "(llama-server holds every slot there, as Ollama holds num_ctx)", model.name, n, top)
        return min(n, top)

    def max_context_source(self, model: ModelFile) -> str:
        """Where :meth:`max_context`'s value comes from, for the log: the max-context setting
        (``flag --max-ctx`` / ``env TQGGUF_MAX_CONTEXT_LENGTH``), the model's training
        context (also when a larger setting is held to it), or the configured context (with its
        own source) when that is larger."""
        s = self.settings
        train = model.n_ctx_train()
        if train and max(s.max_context, s.context_length) > train:
            return "the model's training context, where llama-server caps every slot"
        limit = s.max_context or train
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
        compares): the context is ``num_ctx`` per slot, else the model's own default
        (:meth:`default_ctx`: its Modelfile's ``num_ctx``, else serve's ``-c``), larger or
        smaller; the load-time options are ``load``'s, else serve's settings (:meth:`plan_load`).
        So a model reloaded for one request's options gets its defaults back with the next
        request that leaves them out. An embeddings child is started with at least the
        configured context and not reloaded for it. Returns (runner, reloaded for this
        request); ``runner.reload_reason`` says what the reload changed.

        A load that fails drops the runner (the next request loads the model again, with its
        own options); it is a LoadOptionRefused (400) naming the request's option when the
        request asked for other settings than the defaults, else the ChildError (500). With
        every loaded model busy and the limit of loaded models reached, the request waits in
        Ollama's queue (:meth:`_wait_for_room`). While serve shuts down, a request waiting for
        a load, a reload or room gets the shutdown's Unavailable (503) instead.

        Raises ContextTooLarge, LoadOptionRefused, Unavailable (its failure message), ChildError.
        """
        if num_ctx is not None:
            top = self.max_context(model)
            if num_ctx > top:
                raise ContextTooLarge(f"num_ctx {num_ctx} is above the maximum context {top} for {model.name} "
                                      f"(from {self.max_context_source(model)})")
        key = (str(model.path), kind)
        default_ctx = self.default_ctx(model)
        while True:
            fresh, room = False, None
            async with self._lock:  # only the lookup: a model loading does not hold up the others
                r = self.runners.get(key)
                if r is None:
                    check_model(model)
                    if await self._make_room(model):
                        n_ctx = (num_ctx or default_ctx) if kind == "chat" else \
                            max(self.settings.context_length, num_ctx or 0)
                        r = Runner(model, kind, self.config, n_ctx, self._port())
                        self.runners[key] = r
                        fresh = True
                    else:
                        room = self._room  # set when a runner goes idle or away (_room_changed)
                if r is not None:
                    r.waiting += 1  # not idle for _make_room until this request holds it or gives up
            if room is None:
                break
            await self._wait_for_room(model, room)
        try:
            reloaded = await self._load(r, key, fresh, num_ctx, default_ctx, load or {})
        finally:
            r.waiting -= 1
            if r.waiting == 0 and r.active == 0:  # e.g. its load failed: no request holds it now
                self._room_changed()
        if self.runners.get(key) is not r:  # unloaded while this request waited: load it again
            return await self.runner(model, kind, num_ctx, load)
        if r.state != "ready":
            raise Unavailable(r.error or f"llama-server for {model.name} is {r.state}")
        return r, reloaded

    async def _load(self, r: Runner, key: tuple[str, str], fresh: bool, num_ctx: int | None, default_ctx: int,
                    load: dict[str, Any]) -> bool:
        """:meth:`runner`'s part under the runner's lock: start ``r`` (``fresh``) or reload it for
        the request's context and load options; whether it was (re)loaded for this request."""
        model, kind = r.model, r.kind
        if r.lock.locked():  # requests wait here while it loads or reloads
            await self._unless_shutdown(r.lock.acquire(), model, undo=r.lock.release)
        else:  # the common case, without the two tasks of a guarded wait (the front's CPU per request)
            await r.lock.acquire()
        reloaded, changes = False, []
        try:
            # as Ollama's scheduler (needsReload): any num_ctx that differs from the loaded one
            # reloads, a smaller one too, and so does leaving it out after a request that set one
            # (the model's default is the default); an embeddings child keeps its context (inputs are cut to fit)
            n_ctx = (num_ctx or default_ctx) if kind == "chat" else r.n_ctx
            try:
                params, changes = await self.plan_load(r, load, n_ctx=n_ctx)
            except LoadOptionRefused:
                if fresh:
                    self._drop(r)
                raise
            resize = n_ctx != r.n_ctx
            if fresh:
                r.load = params
                if num_ctx and r.n_ctx != self.settings.context_length:
                    changes.insert(0, f"num_ctx {r.n_ctx}")
                await self._start(r, num_ctx, default_ctx, load, changes)
                reloaded = bool(changes)
            elif (resize or params != r.load) and r.state == "ready":
                was = [f"num_ctx {r.n_ctx}"] if resize else []
                was += [f"{c.split()[0]} {shown_value(r.effective(c.split()[0]))}" for c in changes]
                if resize:
                    changes.insert(0, f"num_ctx {n_ctx}")
                back = [c.split()[0] for c in changes if not c.startswith("num_ctx ") and self._left_out(c.split()[0], load)]
                why = [f"serve's settings for {', '.join(back)}"] if back else []
                if resize and num_ctx is None:
                    why.insert(0, "its Modelfile parameters for num_ctx" if self.model_ctx(model) else
                               "serve's settings for num_ctx")
                log.info("reloading %s with %s (was %s)%s: waiting for %d request(s) to finish", model.name,
                         ", ".join(changes), ", ".join(was),
                         f"; {'; '.join(why)}, which the request does not set" if why else "", r.active)
                await self._unless_shutdown(r.idle.wait(), model)
                await r.stop()
                r.n_ctx = n_ctx
                r.load = params
                await self._start(r, num_ctx, default_ctx, load, changes)
                reloaded = True
            elif (r.state == "stopped" or (r.state == "failed" and r.worker_down)) and self.runners.get(key) is r:
                await self._start(r, None, default_ctx, {}, [])  # a worker that was down may be back: probed again first
            if reloaded:
                r.reload_reason = ", ".join(changes)
        finally:
            r.lock.release()
        return reloaded

    async def _start(self, r: Runner, num_ctx: int | None, default_ctx: int, load: dict[str, Any],
                     changes: list[str]) -> None:
        """Start ``r``'s child; when it fails, drop ``r`` (the next request loads the model again,
        with the settings it asks for) and raise: a LoadOptionRefused (400) naming the request's
        own options when they are what differs from the model's defaults (``changes``: what this
        load changed), the shutdown's Unavailable while serve shuts down, else the error itself."""
        try:
            await r.start()
        except (ChildError, Unavailable) as e:
            self._drop(r)
            await r.stop()
            if self.shutting_down:
                raise self._shutdown_error(r.model) from None
            if isinstance(e, Unavailable) and r.worker_down:
                raise
            asked = [c for c in changes if (c.startswith("num_ctx ") and num_ctx is not None and num_ctx != default_ctx)
                     or (not c.startswith("num_ctx ") and not self._left_out(c.split()[0], load))]
            if not asked:
                raise
            option = asked[0].split()[0]
            log.error("%s could not be loaded with %s: %s; it is loaded again on the next request", r.model.name,
                      ", ".join(asked), e)
            raise LoadOptionRefused(option, f"{r.model.name} could not be loaded with options.{asked[0]}"
                                            f"{' (and ' + ', '.join(asked[1:]) + ')' if asked[1:] else ''}: {e}; "
                                            "send a value that fits, or leave the option out (the next request "
                                            "loads the model with the server's settings for what it leaves out)") from None

    def _drop(self, r: Runner) -> None:
        """Forget ``r`` (a runner whose load failed): the next request for its model starts a new one."""
        if self.runners.get(r.key) is r:
            del self.runners[r.key]
        self._room_changed()

    # -- the queue and shutdown waits -----------------------------------------------------

    def _room_changed(self) -> None:
        """Wake the requests queued for room (:meth:`_wait_for_room`): a runner went idle or away."""
        self._room.set()
        self._room = asyncio.Event()

    async def _wait_for_room(self, model: ModelFile, room: asyncio.Event) -> None:
        """Wait, as a request in Ollama's queue, until a loaded model goes idle or away (``room``
        is set), then :meth:`runner` looks again. Ollama queues such a request (``OLLAMA_MAX_QUEUE``,
        default 512) and refuses one beyond the queue: Unavailable, Ollama's "server busy"."""
        s = self.settings
        if self._queued >= s.max_queue:
            raise Unavailable(f"server busy, please try again.  maximum pending requests exceeded ({self._queued} "
                              f"requests wait for a model to load; TQGGUF_MAX_QUEUE / OLLAMA_MAX_QUEUE = "
                              f"{s.max_queue})")
        self._queued += 1
        log.info("%s waits for room (queued: %d of at most %d): %d models are loaded and busy (max loaded models: "
                 "%d); it loads when one of them is idle", model.name, self._queued, s.max_queue,
                 len({k[0] for k in self.runners}), s.max_loaded_models)
        try:
            await self._unless_shutdown(room.wait(), model)
        finally:
            self._queued -= 1

    def _shutdown_error(self, model: ModelFile) -> Unavailable:
        return Unavailable(f"tqgguf serve is shutting down ({self._why}); this request was waiting for {model.name} "
                           "to load and was not started")

    async def _unless_shutdown(self, wait: Awaitable[Any], model: ModelFile,
                               undo: Callable[[], Any] | None = None) -> Any:
        """Await ``wait`` (a lock, a runner going idle, room) unless serve starts shutting down
        first: then the wait is cancelled and the shutdown's Unavailable (503) raised, so a
        request that had not started ends with the API's error before uvicorn's limit cancels it
        (which gave a bare 500 and a CancelledError traceback). A wait that completes as the
        shutdown begins (a lock released by the request the shutdown stopped, in the same turn of
        the loop) ends the same way, after ``undo`` (e.g. the lock's release): the request has
        not started, so it must not start now and be cut at the end of the grace period."""
        if self.shutting_down:
            if asyncio.iscoroutine(wait):
                wait.close()
            raise self._shutdown_error(model)
        task = asyncio.ensure_future(wait)
        closing = asyncio.ensure_future(self._closing.wait())
        try:
            await asyncio.wait((task, closing), return_when=asyncio.FIRST_COMPLETED)
        finally:
            closing.cancel()
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        if not task.cancelled():
            result = task.result()
            if not self.shutting_down:
                return result
            if undo is not None:
                undo()
        raise self._shutdown_error(model)

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
            if k == "num_thread" and not 1 <= v <= MAX_THREADS:  # llama-server given more crashes (SIGSEGV)
                raise LoadOptionRefused(k, f"options.num_thread {json.dumps(v)}: ggml runs 1 to {MAX_THREADS} CPU "
                                           "threads (GGML_MAX_N_THREADS); send one of those, 0 for the server's "
                                           "choice, or leave it out")
            want = layers_offloaded(v, r.model.n_layer()) if k == "num_gpu" else v
            if policy == "reload" and r.kind == "chat":  # an embeddings child's batch is its context: compared below
                with_v = dataclasses.replace(params, **{LOAD_FIELD[k]: v})
                if r.effective(k, with_v, n_ctx) == r.effective(k, base, n_ctx):
                    continue  # what serve's settings give anyway (-b clamped to the context, ...)
            have = r.effective(k, base, n_ctx)
            if want == have:
                continue
            given = f"options.{k} {json.dumps(v)}: this server runs {r.model.name} with {k} {json.dumps(have)}"
            if policy == "fixed":
                why = FIXED_WHY[k].format(ctk=s.cache_type_k, ctv=s.cache_type_v)
                raise LoadOptionRefused(k, f"{given}, and it cannot change per request ({why}); send "
                                           f"{json.dumps(have)} or leave it out")
            if r.kind == "embed":
                raise LoadOptionRefused(k, f"{given} for embeddings, whose child processes each input in one "
                                           f"batch of its whole context; only num_ctx may change for them")
            if k == "num_gpu" and v > 0 and not await self.has_gpu():
                raise LoadOptionRefused(k, f"{given}: {self.config.llama_server} lists no GPU device (built for "
                                           "the CPU only, or no driver / CUDA_VISIBLE_DEVICES hides it), so no "
                                           "layer can be offloaded; send 0 or leave it out")
            params = dataclasses.replace(params, **{LOAD_FIELD[k]: v})
        # what differs from the loaded model: the options the request sets first, in its order,
        # then those it leaves to serve's settings
        order = [k for k in opts if k in LOAD_FIELD] + [k for k in LOAD_FIELD if k not in opts]
        changes = [f"{k} {shown_value(r.effective(k, params, n_ctx))}" for k in order
                   if getattr(params, LOAD_FIELD[k]) != getattr(r.load, LOAD_FIELD[k])]
        return params, changes

    async def _make_room(self, model: ModelFile) -> bool:
        """Make room to load ``model``: nothing to do below the limit of loaded models, else
        unload the least recently used model none of whose runners has a request (running or
        waiting for it). False when every loaded model is busy (the request then waits:
        :meth:`_wait_for_room`)."""
        loaded = {k[0] for k in self.runners}
        if str(model.path) in loaded or len(loaded) < self.settings.max_loaded_models:
            return True
        busy = {k[0] for k, r in self.runners.items() if r.active or r.waiting}
        idle = [r for k, r in self.runners.items() if k[0] not in busy]
        if not idle:
            return False
        victim = min(idle, key=lambda r: r.last_used)
        log.info("unloading %s to make room for %s (max loaded models: %d)", victim.model.name, model.name,
                 self.settings.max_loaded_models)
        for k in [k for k in self.runners if k[0] == str(victim.model.path)]:
            await self.runners.pop(k).stop()
        return True

    @contextlib.asynccontextmanager
    async def use(self, name: str | None, kind: str = "chat", *, num_ctx: int | None = None,
                  load: dict[str, Any] | None = None,
                  keep_alive: float | None = None) -> AsyncIterator[tuple[Runner, bool]]:
        """Hold a runner for one request (``num_ctx``/``load``: see :meth:`runner`); on exit
        apply keep-alive (the request's, else the default) from now."""
        if self.shutting_down:
            raise Unavailable(f"tqgguf serve is shutting down ({self._why}) and takes no new requests")
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
                self._room_changed()
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
                self._room_changed()
            return done

    def loaded(self) -> list[Runner]:
        """The runners whose child is up or coming up (ready, loading, restarting): ``/api/ps``."""
        return [r for r in self.runners.values() if r.state in ("ready", "loading", "restarting")]

    def expires_in(self, r: Runner) -> float | None:
        """Seconds until ``r``'s keep-alive runs out (negative once due), None for never."""
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
        if (n_ctx := self.model_ctx(self.default)) is not None:
            log.info("%s: num_ctx %d from its Ollama parameters (the model's Modelfile PARAMETER num_ctx), as "
                     "requests without options.num_ctx will ask", self.default.name, n_ctx)
        r, _ = await self.runner(self.default)
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
