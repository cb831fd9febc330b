"""Start ``tqgguf serve``: bind the port, load the slots, log what was loaded, run uvicorn.

The port is bound before the model is loaded, so "port in use" is reported at once
(and no other process can take the port while a large model loads); uvicorn then
listens on that socket.
"""
from __future__ import annotations

import copy
import errno
import logging
import socket
from typing import Callable

from ..config import format_duration
from .pool import ServeConfig, SlotPool

log = logging.getLogger("tqgguf.server")


class PortError(OSError):
    """The listen address cannot be used (port in use, no permission, unknown host)."""


def bind_socket(host: str, port: int) -> socket.socket:
    """Bind a TCP socket to (host, port) without listening yet.

    Raises PortError with a message that says what to do: port in use, a privileged
    port without permission, an address this machine does not have, an unknown host.
    """
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as e:
        raise PortError(f"cannot resolve host {host!r}: {e.strerror}; set --host or TQGGUF_HOST") from None
    family, type_, proto, _, addr = infos[0]
    sock = socket.socket(family, type_, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(addr)
    except OSError as e:
        sock.close()
        where = f"{host}:{port}"
        if e.errno == errno.EADDRINUSE:
            msg = (f"port {port} is already in use on {host} (another tqgguf, Ollama or llama-server?); "
                   f"choose another with --port or TQGGUF_HOST")
        elif e.errno == errno.EACCES:
            msg = f"permission denied to listen on {where} (ports below 1024 need root); choose --port 1024 or above"
        elif e.errno == errno.EADDRNOTAVAIL:
            msg = f"address {host} is not available on this machine; use 127.0.0.1 or 0.0.0.0"
        else:
            msg = f"cannot listen on {where}: {e.strerror}"
        raise PortError(msg) from None
    return sock


def startup_summary(config: ServeConfig, pool: SlotPool) -> list[str]:
    """The startup log: model, effective K/V types, rotation flags, flash attention, KV
    memory per slot and total (MiB, as llama.cpp allocated it), context per slot, slots,
    threads and keep-alive, each with where the setting came from."""
    s, r = config.settings, pool.report
    src = s.source
    md = pool.vocab.metadata if pool.vocab else {}
    n = len(pool.slots)
    lines = [f"model: {config.model_path.name} ({md.get('general.architecture', '?')}"
             f"{', ' + md['general.size_label'] if md.get('general.size_label') else ''}) served as {config.alias!r}"]
    k_type = (r.k_type or s.cache_type_k) if r else s.cache_type_k
    v_type = (r.v_type or s.cache_type_v) if r else s.cache_type_v
    lines.append(f"KV cache: K {k_type} (from {src('cache_type_k')}), V {v_type} (from {src('cache_type_v')})")
    rot = "on" if s.attn_rotation else "off"
    if r and r.attn_rot_k is not None:
        lines.append(f"rotation: {rot} (from {src('attn_rotation')}): attn_rot_k = {int(r.attn_rot_k)}, "
                     f"attn_rot_v = {int(bool(r.attn_rot_v))}")
    else:
        lines.append(f"rotation: {rot} (from {src('attn_rotation')}): llama.cpp did not report attn_rot_k/v")
    if r and r.k_center_reason:
        lines.append(f"k-center: auto (from {src('k_center')}) -> {r.k_center or 'off'}: {r.k_center_reason}")
    elif s.k_center not in ("off", "auto"):
        state = ("active" if r.k_center_active else "INACTIVE, nothing to subtract") if r else "?"
        lines.append(f"k-center: {s.k_center} (from {src('k_center')}): {state}"
                     + (f" — {r.k_center}" if r and r.k_center else ""))
    if r and r.kv_plan:
        lines.append(f"layer plan: {r.kv_plan} -> layers {r.kv_plan_layers}; {r.kv_bytes_per_token} bytes per token, "
                     f"{r.bits_per_value:.3f} bits/value")
    fa = r.flash_attn if r and r.flash_attn else "?"
    lines.append(f"flash attention: {fa} (asked {s.flash_attention}, from {src('flash_attention')})")
    ctx_note = ("" if pool.n_ctx == s.context_length
                else f" (asked {s.context_length}; llama.cpp allocated {pool.n_ctx})")
    lines.append(f"slots: {n} (from {src('num_parallel')}), each an independent context of {pool.n_ctx} tokens"
                 f"{ctx_note} (from {src('context_length')}), {config.threads_per_slot} CPU thread(s) per slot")
    if r and (r.k_mib or r.v_mib):
        per = r.k_mib + r.v_mib
        lines.append(f"KV memory: {per:.2f} MiB per slot (K {r.k_mib:.2f} + V {r.v_mib:.2f}), "
                     f"{per * n:.2f} MiB total for {n} slot(s)")
    else:
        lines.append("KV memory: not reported by llama.cpp")
    if pool.vocab and s.context_length > pool.vocab.n_ctx_train > 0:
        lines.append(f"warning: context {s.context_length} is longer than the model was trained for "
                     f"({pool.vocab.n_ctx_train}); answers may degrade past that")
    ka = s.keep_alive
    ka_text = ("the model stays loaded" if ka < 0 else
               "the model unloads after each request and reloads on the next" if ka == 0 else
               f"the model unloads after {format_duration(ka)} idle and reloads on the next request")
    lines.append(f"keep-alive: {format_duration(ka)} (from {src('keep_alive')}): {ka_text}")
    host = f"[{s.host}]" if ":" in s.host else s.host
    lines.append(f"listening on http://{host}:{s.port} (from {src('port')}): OpenAI API under /v1, "
                 f"Ollama API under /api")
    return lines


def _log_config(level: str) -> dict:
    from uvicorn.config import LOGGING_CONFIG

    cfg = copy.deepcopy(LOGGING_CONFIG)
    cfg["loggers"]["tqgguf.server"] = {"handlers": ["default"], "level": level.upper(), "propagate": False}
    cfg["handlers"]["access"]["stream"] = "ext://sys.stderr"
    return cfg


def serve(config: ServeConfig, *, echo: Callable[[str], None] = print, access_log: bool = True,
          log_level: str = "info") -> None:
    """Run the server until interrupted.

    Order: bind the port (PortError at once if it is taken), load the tokenizer and every
    slot (EngineError / EngineNotBuiltError / ValueError from the runtime), print the
    startup summary through ``echo``, then serve with uvicorn on the bound socket.
    """
    import uvicorn

    from .app import ModelCard, create_app

    s = config.settings
    sock = bind_socket(s.host, s.port)
    try:
        pool = SlotPool(config, log=log.info)
        echo(f"loading {config.model_path.name} into {len(pool.slots)} slot(s) of {s.context_length} tokens ...")
        pool.load()
        for line in startup_summary(config, pool):
            echo(line)
        card = ModelCard.build(config.alias, config.model_path, pool.vocab.metadata)
        app = create_app(pool, card)
        server = uvicorn.Server(uvicorn.Config(app, log_config=_log_config(log_level), log_level=log_level,
                                               access_log=access_log, timeout_graceful_shutdown=5))
        server.run(sockets=[sock])
    finally:
        sock.close()
