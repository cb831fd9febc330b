"""Start ``tqgguf serve``: bind the port, start the model's llama-server, log the effective
settings, run uvicorn; stop every child on exit.

The port is bound before the model is loaded, so "port in use" is reported at once;
uvicorn then listens on that socket. SIGINT/SIGTERM shut down gracefully: uvicorn stops
listening, running requests get SHUTDOWN_GRACE_S to finish, those still running then end
with the API's error (a final SSE ``error`` event / NDJSON ``{"error": ...}`` line once
streaming, else a 503), the children are stopped (SIGTERM, then SIGKILL after
``child.SHUTDOWN_STOP_S``: a llama-server busy with a long prefill ignores SIGTERM), and the process
ends by the signal it got, once the children are stopped (``end_by_signal``: SIGTERM is
re-raised, exit status 128+15 = 143 in a shell, -15 for Popen; SIGINT exits with 130, the
shell's status for Ctrl-C, without click's "Aborted!"): the convention for "stopped on
request", which systemd and container runtimes count as a clean stop. Were tqgguf killed
outright, the children get SIGKILL from the kernel (``PR_SET_PDEATHSIG``, see ``child``).
"""
from __future__ import annotations

import asyncio
import contextlib
import copy
import errno
import logging
import os
import re
import signal
import socket
import subprocess
import threading
from typing import Callable

from ..config import MODELS_PER_GPU
from ..values import format_duration, format_size
from ..engine import GPUOffloadError
from .child import child_env_args, gpu_devices
from .manager import Manager
from .runner import Runner
from .serveconfig import ServeConfig

log = logging.getLogger("tqgguf.server")

#: Seconds the requests still running at SIGTERM/SIGINT get to finish before they are ended
#: with an error and the children are stopped (killed ``child.SHUTDOWN_STOP_S`` after SIGTERM
#: when busy). uvicorn's own limit, after which it cancels whatever still runs, is 1 s more.
#: The process ends about SHUTDOWN_GRACE_S + 0.5 s after the signal, within a container
#: runtime's default 10 s stop timeout.
SHUTDOWN_GRACE_S = 5.0


class PortError(OSError):
    """The listen address cannot be used (port in use, no permission, unknown host)."""


def listen_source(settings) -> str:
    """Where the listen address came from, for bind_socket's messages: ``port from default,
    host from env OLLAMA_HOST='0.0.0.0'``."""
    def one(name: str) -> str:
        src = settings.source(name)
        return f"{name} from {'default' if src.kind == 'default' else src.describe()}"
    return f"{one('port')}, {one('host')}"


def bind_socket(host: str, port: int, source: str = "") -> socket.socket:
    """Bind a TCP socket to (host, port) without listening yet; ``source`` (listen_source)
    says where the address came from, and each message names it.

    Raises PortError with a message that says what to do: port in use, a privileged
    port without permission, an address this machine does not have, an unknown host.
    """
    origin = f" ({source})" if source else ""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as e:
        raise PortError(f"cannot resolve host {host!r}{origin}: {e.strerror}; set --host, TQGGUF_HOST or "
                        "OLLAMA_HOST") from None
    family, type_, proto, _, addr = infos[0]
    sock = socket.socket(family, type_, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(addr)
    except OSError as e:
        sock.close()
        where = f"{host}:{port}"
        if e.errno == errno.EADDRINUSE:
            msg = (f"port {port} is already in use on {host}{origin} (another tqgguf, Ollama or llama-server?); "
                   f"choose another with --port, TQGGUF_HOST or OLLAMA_HOST")
        elif e.errno == errno.EACCES:
            msg = (f"permission denied to listen on {where}{origin} (ports below 1024 need root); "
                   "choose a port of 1024 or above")
        elif e.errno == errno.EADDRNOTAVAIL:
            msg = f"address {host}{origin} is not available on this machine; use 127.0.0.1 or 0.0.0.0"
        else:
            msg = f"cannot listen on {where}{origin}: {e.strerror}"
        raise PortError(msg) from None
    return sock


def gpu_devices_error(config: ServeConfig) -> str | None:
    """Why ``-ngl`` (or the draft model's ``-ngld``) > 0 cannot be honoured by this llama-server
    (it lists no GPU device with ``--list-devices``), or None. llama-server itself would quietly
    run on the CPU."""
    ngl = config.n_gpu_layers
    if config.draft is not None and config.draft.n_gpu_layers not in (0, None) and ngl in (0, None):
        ngl, flag = config.draft.n_gpu_layers, "-ngld"  # the draft asks for GPU layers, the model does not
    else:
        flag = "-ngl"
    if ngl in (0, None) or (config.offload is not None and config.offload.rpc):
        return None  # auto, the CPU, or RPC workers (probed when each child starts)
    try:
        if gpu_devices(config.llama_server):
            return None
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"cannot ask {config.llama_server} for its devices: {e}"
    src = config.settings.source("n_gpu_layers_draft" if flag == "-ngld" else "n_gpu_layers")
    return (f"{flag} {'all' if ngl < 0 else ngl} ({'default' if src.kind == 'default' else src.describe()}) "
            f"asks for GPU layers, but {config.llama_server} lists no GPU device "
            "(built for the CPU only, or no driver / CUDA_VISIBLE_DEVICES hides it): build it with "
            f"`tqgguf build --backend cuda`, point TQGGUF_LLAMA_SERVER at a GPU build, or use {flag} 0")


def runner_placement(runner: Runner) -> list[str]:
    """Where the runner's llama-server put the layers and their K and V cache, one line per
    device (tqgguf.devices.parse_placement over its load log); [] when it cannot be told."""
    from ..cachetypes import type_info
    from ..values import parse_endpoints
    from ..devices import parse_placement, placement_lines
    from ..kvplan import build_plan, model_layers

    s = runner.config.settings
    try:
        layers = model_layers(runner.model.path)
        plan = build_plan(runner.model.path, boundary=s.kv_boundary, swa=s.kv_swa, plan=s.kv_plan)
        pairs = plan.types(s.cache_type_k, s.cache_type_v) if plan else [(s.cache_type_k, s.cache_type_v)] * layers.n_layer
        k = [type_info(a).row_bytes(layers.n_head_kv * layers.head_k) for a, _ in pairs]
        v = [type_info(b).row_bytes(layers.n_head_kv * layers.head_v) for _, b in pairs]
    except Exception:  # noqa: BLE001 - a placement we cannot compute is left out, never fatal
        return []
    cells = runner.n_ctx * s.num_parallel
    caches = runner.kv_caches()
    if any(c.swa for c in caches):
        # the sliding-window layers hold fewer cells than the context (Gemma-3: 1024 a slot, not
        # n_ctx): scale the rows so that the K and V totals are the MiB llama.cpp allocated, as
        # every layer holding every cell would overstate them 2.7-5.2x (exact on one device; over
        # several it takes the window layers as spread evenly)
        for rows, side in ((k, "k_mib"), (v, "v_mib")):
            full = cells * sum(rows) / (1 << 20)
            got = sum(getattr(c, side) for c in caches)
            if full > 0 and got > 0:
                rows[:] = [r * got / full for r in rows]
    off = runner.config.offload
    # one device per worker, in --rpc order: RPC0, RPC1, ... (llama.cpp's names for them)
    names = {f"RPC{i}": str(ep) for i, ep in enumerate(parse_endpoints(off.rpc))} if off is not None and off.rpc else {}
    return placement_lines(parse_placement("\n".join(runner.load_lines), layers.n_layer, k, v, cells, names))


def media_lines(config: ServeConfig) -> list[str]:
    """The startup lines for speculative decoding (the draft model, its K/V types, the
    ``--spec-type``, draft sizes, ``-ngld``) and the vision projector, each value with where
    it came from; [] when neither is set."""
    s, src = config.settings, config.settings.source
    out = []
    d = config.draft
    if d is not None:
        ngld = "auto" if d.n_gpu_layers is None else ("all" if d.n_gpu_layers < 0 else str(d.n_gpu_layers))
        ngld_src = (f"from {src('n_gpu_layers_draft')}" if s.n_gpu_layers_draft is not None else
                    f"as -ngl, from {src('n_gpu_layers')}")
        spec_src = src("spec_type") if s.spec_type else "default with a draft model"
        n_max = f"{d.n_max} (from {src('draft_max')})" if d.n_max is not None else "3 (llama-server's default)"
        n_min = f"{d.n_min} (from {src('draft_min')})" if d.n_min is not None else "0 (llama-server's default)"
        out.append(f"draft model: {d.model} (from {src('draft_model')}): KV cache K {d.ctk} (from "
                   f"{src('cache_type_k_draft')}), V {d.ctv} (from {src('cache_type_v_draft')}); --spec-type "
                   f"{d.spec_type} (from {spec_src}); draft tokens at most {n_max}, at least {n_min}; "
                   f"-ngld {ngld} ({ngld_src})")
    elif config.spec_type:
        out.append(f"speculative decoding: --spec-type {config.spec_type} (from {src('spec_type')}), no draft model")
    if config.mmproj is not None:
        out.append(f"vision projector: {config.mmproj} (from {src('mmproj')}): images on /api/chat, /api/generate "
                   "(Ollama's images) and /v1/chat/completions (image_url parts)")
    return out


def _from(src) -> str:
    """``from env X`` for a value given, ``auto: X=0`` for one that asked for auto."""
    return str(src) if src.auto else f"from {src}"


def flash_attention_applied(lines: list[str]) -> str | None:
    """What llama.cpp did with flash attention, from its load log: "on" or "off" (its
    ``resolve_fused_ops: Flash Attention enabled`` / ``... not supported, set to disabled``
    for auto, ``enabling flash_attn since it is required ...``, or the context's
    ``flash_attn = enabled/disabled`` line); None when the log does not say."""
    found = None
    for line in lines:
        if re.search(r"Flash Attention (?:was auto, set to )?enabled|enabling flash_attn", line):
            found = "on"
        elif re.search(r"Flash Attention .*(?:disabled|not supported)|flash_attn is not compatible", line):
            found = "off"
        elif m := re.search(r"flash_attn\s*=\s*(enabled|disabled)\b", line):
            found = found or ("on" if m.group(1) == "enabled" else "off")
    return found


def startup_summary(config: ServeConfig, manager: Manager, runner: Runner) -> list[str]:
    """The startup log: model, the llama-server child, K/V types and rotation as set (each
    with where the setting came from) and as llama.cpp applied them (each KV cache's cells and
    MiB, the rotation flags: ``Runner.kv_lines``), K centering, flash attention, slots and
    context, threads, the placement, every LLAMA_ARG_* variable that reaches the child (and
    whether a flag of serve's overrides it), limits and keep-alive."""
    s = config.settings
    src = s.source
    m = runner.model
    d = m.details()
    child = runner.child
    what = (f"{m.ollama.display} from Ollama's store ({m.path}; its Modelfile parameters are the requests' "
            f"defaults: {', '.join(f'{k} {v}' for k, v in m.params().items()) or 'none'}; chats are formatted by the "
            "GGUF's own chat template, as llama-server does, not by Ollama's Go template)") if m.ollama is not None \
        else m.path.name
    lines = [f"model: {what} ({d['family']}{', ' + d['parameter_size'] if d['parameter_size'] else ''}) "
             f"served as {m.name!r}",
             f"llama-server: {config.llama_server} (pid {child.pid if child else '?'}, loopback port "
             f"{child.port if child else '?'}) ready in {runner.load_seconds:.2f} s",
             f"KV cache: K {s.cache_type_k} (from {src('cache_type_k')}), V {s.cache_type_v} (from {src('cache_type_v')})",
             f"rotation: {'on' if s.attn_rotation else 'off'} (from {src('attn_rotation')}): "
             f"LLAMA_ATTN_ROT_DISABLE={config.engine_env.get('LLAMA_ATTN_ROT_DISABLE', '?')} in llama-server's "
             "environment"]
    lines += runner.kv_lines()  # what llama.cpp made of them: each cache's cells and MiB, the rotation applied
    lines += config.engine_notes  # K centering (auto: what it chose and why), the layer plan
    fa = flash_attention_applied(runner.load_lines)
    lines.append(f"flash attention: {s.flash_attention} (from {src('flash_attention')})" +
                 (f" -> {fa} (llama-server's log)" if fa else "" if s.flash_attention != "auto" else
                  " -> not reported by llama-server's log"))
    ctx_src = ("the model's Ollama parameters, PARAMETER num_ctx" if runner.n_ctx != s.context_length
               and m.params().get("num_ctx") else src('context_length'))
    lines.append(f"slots: {s.num_parallel} ({_from(src('num_parallel'))}), continuous batching, {runner.n_ctx} tokens "
                 f"each (from {ctx_src}; llama-server -c {runner.n_ctx * s.num_parallel}"
                 + (f", which llama.cpp pads to {runner.slot_ctx} a slot" if runner.slot_ctx != runner.n_ctx else "")
                 + ")")
    threads = config.n_threads or f"{child.n_threads if child and child.n_threads else '?'} (llama-server's own: every core)"
    ngl = "auto" if config.n_gpu_layers is None else ("all" if config.n_gpu_layers < 0 else config.n_gpu_layers)
    lines.append(f"threads: {threads} (from {'flag -t' if config.n_threads else 'default'}); -ngl {ngl} "
                 f"(from {src('n_gpu_layers')})" + (f", {runner.offloaded} layers offloaded" if runner.offloaded and runner.on_device else
                                                    ", every layer on the CPU" if not runner.on_device else ""))
    if config.offload is not None and config.offload.rpc:
        lines.append(f"rpc workers: {config.offload.rpc} (from {src('rpc')}); -sm {config.offload.split_mode}")
    lines += media_lines(config)
    lines += [f"placement: {x}" for x in runner_placement(runner)]
    overridden = runner.overridden_env()
    for name, value in child_env_args(dict(os.environ)).items():
        what = (f"set, but serve's {overridden[name]} overrides it (llama-server's own warning)" if name in overridden
                else "passed to llama-server")
        lines.append(f"environment: {name}={value} ({what})")
    lines.append(f"num_ctx: requests may reload the model with up to {manager.max_context(m)} tokens per slot "
                 f"(from {manager.max_context_source(m)}); max loaded models: {s.max_loaded_models} "
                 f"({_from(src('max_loaded_models'))}" +
                 (f": {MODELS_PER_GPU} per GPU llama-server lists, {MODELS_PER_GPU} on the CPU)" if src('max_loaded_models').auto else ")"))
    lines.append("context: as Ollama, a prompt longer than num_ctx is truncated (chat: the oldest messages, system "
                 "messages kept; generate: the tokens after num_keep) and a generation that reaches the end of the "
                 "context shifts it and goes on to num_predict (llama-server --context-shift"
                 + ("" if runner.context_shift else "; not supported for this model, so it stops there") + "); "
                 "a request's truncate: false / shift: false turns either off")
    wait = (f"at most {format_duration(s.body_timeout)} between its parts (from {src('body_timeout')}), "
            "else 408 and the connection closes" if s.body_timeout else f"no time limit (from {src('body_timeout')})")
    lines.append(f"request body: at most {format_size(s.max_request_body)} (from {src('max_request_body')}), "
                 f"larger: 413; {wait}")
    ka = s.keep_alive
    ka_text = ("the model stays loaded" if ka < 0 else
               "the model unloads after each request and reloads on the next" if ka == 0 else
               f"the model unloads after {format_duration(ka)} idle and reloads on the next request")
    lines.append(f"keep-alive: {format_duration(ka)} (from {src('keep_alive')}): {ka_text}")
    host = f"[{s.host}]" if ":" in s.host else s.host
    lines.append(f"listening on http://{host}:{s.port} (from {src('port')}): OpenAI API under /v1, "
                 f"Ollama API under /api")
    return lines


def _loop_factory():
    """uvloop's event loop when it is installed (a dependency of tqgguf everywhere but Windows,
    pyproject.toml), else asyncio's own. It cuts the front's CPU per request; README's serve section has the numbers."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def _log_config(level: str) -> dict:
    from uvicorn.config import LOGGING_CONFIG

    cfg = copy.deepcopy(LOGGING_CONFIG)
    for name in ("tqgguf.server", "tqgguf.llama-server"):
        cfg["loggers"][name] = {"handlers": ["default"], "level": level.upper(), "propagate": False}
    cfg["handlers"]["access"]["stream"] = "ext://sys.stderr"
    return cfg


def _server_class():
    import uvicorn
    import uvicorn.server

    class Server(uvicorn.Server):
        """uvicorn's server, whose shutdown (after SIGTERM/SIGINT; it has stopped listening)
        first starts the manager's graceful shutdown: no new requests, SHUTDOWN_GRACE_S for the
        running ones, then those still running end with the API's error (see
        ``Manager.begin_shutdown``)."""

        def __init__(self, manager: Manager, config) -> None:
            super().__init__(config)
            self.manager = manager

        async def shutdown(self, sockets=None) -> None:
            # the signal is the last one uvicorn's handle_exit recorded (SIGINT or SIGTERM)
            sig = self._captured_signals[-1] if self._captured_signals else None
            self.manager.begin_shutdown(SHUTDOWN_GRACE_S, signal.Signals(sig).name if sig else "SIGTERM/SIGINT")
            await super().shutdown(sockets)

        @contextlib.contextmanager
        def capture_signals(self):
            """uvicorn's, less its re-raise of the signal on the way out (which would end the
            process before the children are stopped, and turn SIGINT into a KeyboardInterrupt):
            the signals stay in ``_captured_signals`` for ``serve`` to return."""
            if threading.current_thread() is not threading.main_thread():
                yield
                return
            original = {sig: signal.signal(sig, self.handle_exit) for sig in uvicorn.server.HANDLED_SIGNALS}
            try:
                yield
            finally:
                for sig, handler in original.items():
                    signal.signal(sig, handler)

    return Server


def end_by_signal(sig: int | None) -> None:
    """End the process as ``serve`` was stopped, after its shutdown: SIGINT exits with status
    130 (no KeyboardInterrupt, so click prints no "Aborted!"); any other signal (SIGTERM) is
    re-raised at its default disposition, so the process ends by it (143 in a shell, -15 for
    Popen); None returns."""
    if sig is None:
        return
    if sig == signal.SIGINT:
        raise SystemExit(128 + signal.SIGINT)
    signal.signal(sig, signal.SIG_DFL)
    signal.raise_signal(sig)


def serve(config: ServeConfig, *, echo: Callable[[str], None] = print, access_log: bool = True,
          log_level: str = "info") -> int | None:
    """Run the server until interrupted; return the signal that stopped it (SIGINT, SIGTERM),
    once everything is shut down and the children are stopped (``end_by_signal`` then ends
    the process by it).

    Order: bind the port (PortError at once if it is taken), check -ngl against the
    binary's devices (GPUOffloadError), start the default model's llama-server (ChildError
    with llama-server's own message when it refuses the model), print the startup summary
    through ``echo``, then serve with uvicorn on the bound socket.
    """
    import logging.config

    import uvicorn

    from .app import create_app

    s = config.settings
    sock = bind_socket(s.host, s.port, listen_source(s))
    logging.config.dictConfig(_log_config(log_level))
    if (why := gpu_devices_error(config)) is not None:
        sock.close()
        raise GPUOffloadError(why)

    async def main() -> None:
        manager = Manager(config)
        try:
            echo(f"starting llama-server for {config.alias}: {s.num_parallel} slot(s) of "
                 f"{s.context_length} tokens ...")
            runner = await manager.start()
            for line in startup_summary(config, manager, runner):
                echo(line)
            app = create_app(manager)
            server = _server_class()(manager, uvicorn.Config(app, log_config=None, log_level=log_level, access_log=access_log,
                                                     timeout_graceful_shutdown=SHUTDOWN_GRACE_S + 1))
            await server.serve(sockets=[sock])
            captured.extend(server._captured_signals)
        finally:
            await manager.shutdown()

    captured: list[int] = []
    try:
        with asyncio.Runner(loop_factory=_loop_factory()) as runner:
            runner.run(main())
    finally:
        sock.close()
    return captured[0] if captured else None
