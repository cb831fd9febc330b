"""``tqgguf serve``: a model behind OpenAI- and Ollama-compatible APIs (thin layer over tqgguf.server).

Flags left out fall back to ``TQGGUF_*``, then ``OLLAMA_*`` variables, then defaults
(``tqgguf env`` shows the result). Everything is validated before the model is loaded: a
bad flag or variable exits with status 2 and a message naming it, a taken port with 1.
"""
from __future__ import annotations

from pathlib import Path

import click

from .options import cache_type_options, flash_attn_option, gpu_layers_option, k_center_option, rotation_option


def _echo_err(line: str) -> None:
    click.echo(line, err=True)


@click.command(name="serve")
@click.argument("model")
@cache_type_options()
@click.option("-c", "--ctx-size", "ctx", metavar="N", default=None,
              help="Context length in tokens, per slot [env TQGGUF_CONTEXT_LENGTH, OLLAMA_CONTEXT_LENGTH; "
                   "default 4096].")
@click.option("-np", "--parallel", "parallel", metavar="N", default=None,
              help="Parallel slots, batched together by llama-server, each with -c tokens of KV cache "
                   "[env TQGGUF_NUM_PARALLEL, OLLAMA_NUM_PARALLEL; default 1].")
@click.option("--max-ctx", "max_ctx", metavar="N", default=None,
              help="Largest per-slot context a request's options.num_ctx may reload the model with "
                   "[env TQGGUF_MAX_CONTEXT_LENGTH; default 0 = the model's training context].")
@flash_attn_option()
@rotation_option()
@k_center_option()
@click.option("--host", metavar="HOST[:PORT]", default=None,
              help="Listen address: host, :port, host:port, http://host:port [env TQGGUF_HOST, OLLAMA_HOST; "
                   "default 127.0.0.1:11434].")
@click.option("--port", metavar="PORT", default=None, help="Listen port (overrides a port in --host).")
@click.option("--keep-alive", "keep_alive", metavar="DURATION", default=None,
              help="Idle time before the model unloads: 5m, 1h, 30s, 0, -1 = forever "
                   "[env TQGGUF_KEEP_ALIVE, OLLAMA_KEEP_ALIVE; default 5m].")
@gpu_layers_option()
@click.option("-t", "--threads", type=click.IntRange(min=1), default=None,
              help="CPU threads of llama-server (default: its own, every core).")
@click.option("--alias", default=None, help="Model name clients use (default: the GGUF file name without .gguf).")
@click.option("-v", "--verbose", is_flag=True, help="Show every line of llama-server's log (default: warnings, errors).")
def command(model, ctk, ctv, ctx, parallel, max_ctx, flash_attn, rot, k_center, host, port, keep_alive, n_gpu_layers,
            threads, alias, verbose):
    """Serve MODEL (a GGUF path or a name from `tqgguf models list`) with OpenAI (/v1) and
    Ollama (/api) compatible APIs, through a supervised llama-server child built by
    `tqgguf build` (or TQGGUF_LLAMA_SERVER). -np N slots of -c tokens each, continuously
    batched; other models are loaded on demand by name."""
    from ..config import SettingsError, resolve_settings

    overrides = {"cache_type_k": ctk, "cache_type_v": ctv, "context_length": ctx, "num_parallel": parallel,
                 "flash_attention": flash_attn, "attn_rotation": rot, "k_center": k_center, "host": host, "port": port,
                 "keep_alive": keep_alive, "max_context": max_ctx}
    try:
        settings = resolve_settings(overrides)
    except SettingsError as e:
        for msg in e.errors:
            click.echo(f"error: {msg}", err=True)
        raise SystemExit(2) from None

    from ..server.run import PortError, bind_socket

    # fail on a taken port before any download or model load (serve() binds for real)
    try:
        bind_socket(settings.host, settings.port).close()
    except PortError as e:
        raise click.ClickException(str(e)) from None

    from ..builder.driver import llama_server_path
    from ..config import KCenterError
    from ..models import ModelError, resolve_model
    from ..server import ServeConfig, serve
    from ..server.child import ChildError

    try:
        binary = llama_server_path(settings.llama_server)
    except FileNotFoundError as e:
        raise click.ClickException(str(e)) from None

    try:
        path = resolve_model(model)
    except ModelError as e:
        raise click.ClickException(str(e)) from None
    path = Path(path)
    if not alias:  # a registry name is its own alias; a file is named by its stem
        alias = path.stem if Path(model).expanduser().is_file() else model.strip().lower()
    try:
        env = _engine_env(settings, path, threads)
    except KCenterError as e:
        raise click.UsageError(str(e)) from None
    config = ServeConfig(model_path=path, alias=alias, settings=settings, llama_server=binary,
                         n_gpu_layers=n_gpu_layers, n_threads=threads, verbose=verbose, engine_env=env)
    try:
        serve(config, echo=_echo_err)
    except PortError as e:
        raise click.ClickException(str(e)) from None
    except (ChildError, RuntimeError) as e:
        raise click.ClickException(f"cannot serve {path.name}: {e}") from None


def _engine_env(settings, path: Path, threads: int | None) -> dict[str, str]:
    """The engine variables llama-server must see for these settings: exactly what
    ``tqgguf.engine.engine_env`` sets for the in-process engine (rotation, K centering),
    so the child and ``tqgguf ppl`` read the same switches. ``--k-center calib`` computes
    its calibration file first (that step loads the model in-process once)."""
    import os

    from ..engine import engine_env
    from ..enginevars import warn_overrides
    from ..kcenter import engine_value

    kc = engine_value(settings.k_center, path, n_threads=threads)
    warn_overrides({"LLAMA_ATTN_ROT_DISABLE": "0" if settings.attn_rotation else "1", "LLAMA_K_CENTER": kc},
                   {"LLAMA_ATTN_ROT_DISABLE": f"rotation {'on' if settings.attn_rotation else 'off'}",
                    "LLAMA_K_CENTER": f"--k-center {settings.k_center}"}, echo=_echo_err)
    before = dict(os.environ)
    with engine_env(rotation=settings.attn_rotation, k_center=kc):
        return {k: v for k, v in os.environ.items() if before.get(k) != v}
