"""``tqgguf serve``: a model behind OpenAI- and Ollama-compatible APIs (thin layer over tqgguf.server).

Flags left out fall back to ``TQGGUF_*``, then ``OLLAMA_*`` variables, then defaults
(``tqgguf env`` shows the result). Everything is validated before the model is loaded: a
bad flag or variable exits with status 2 and a message naming it, a taken port with 1.
"""
from __future__ import annotations

from pathlib import Path

import click

from .options import cache_type_options, flash_attn_option, gpu_layers_option, k_center_option, kv_plan_options, rotation_option


def _echo_err(line: str) -> None:
    click.echo(line, err=True)


@click.command(name="serve")
@click.argument("model")
@cache_type_options()
@click.option("-c", "--ctx-size", "ctx", metavar="N", default=None,
              help="Context length in tokens, per slot [env TQGGUF_CONTEXT_LENGTH, OLLAMA_CONTEXT_LENGTH; "
                   "default 4096].")
@click.option("-np", "--parallel", "parallel", metavar="N", default=None,
              help="Parallel slots, each its own context and KV cache [env TQGGUF_NUM_PARALLEL, OLLAMA_NUM_PARALLEL; "
                   "default 1].")
@flash_attn_option()
@rotation_option()
@k_center_option()
@kv_plan_options()
@click.option("--host", metavar="HOST[:PORT]", default=None,
              help="Listen address: host, :port, host:port, http://host:port [env TQGGUF_HOST, OLLAMA_HOST; "
                   "default 127.0.0.1:11434].")
@click.option("--port", metavar="PORT", default=None, help="Listen port (overrides a port in --host).")
@click.option("--keep-alive", "keep_alive", metavar="DURATION", default=None,
              help="Idle time before the model unloads: 5m, 1h, 30s, 0, -1 = forever "
                   "[env TQGGUF_KEEP_ALIVE, OLLAMA_KEEP_ALIVE; default 5m].")
@gpu_layers_option()
@click.option("-t", "--threads", type=click.IntRange(min=1), default=None,
              help="CPU threads per slot (default: cores / slots).")
@click.option("--alias", default=None, help="Model name clients use (default: the GGUF file name without .gguf).")
@click.option("-v", "--verbose", is_flag=True, help="Show llama.cpp's log.")
def command(model, ctk, ctv, ctx, parallel, flash_attn, rot, k_center, kv_boundary, kv_swa, kv_plan, host, port, keep_alive, n_gpu_layers, threads, alias,
            verbose):
    """Serve MODEL (a GGUF path or a name from `tqgguf models list`) with OpenAI (/v1) and
    Ollama (/api) compatible APIs. -np N gives N independent slots of -c tokens each."""
    from ..config import SettingsError, resolve_settings

    overrides = {"cache_type_k": ctk, "cache_type_v": ctv, "context_length": ctx, "num_parallel": parallel,
                 "flash_attention": flash_attn, "attn_rotation": rot, "k_center": k_center, "kv_boundary": kv_boundary,
                 "kv_swa": kv_swa, "kv_plan": kv_plan, "host": host, "port": port,
                 "keep_alive": keep_alive}
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

    from ..cachetypes import EngineNotBuiltError
    from ..models import ModelError, resolve_model
    from ..runtime import EngineError
    from ..server import ServeConfig, serve

    try:
        path = resolve_model(model)
    except ModelError as e:
        raise click.ClickException(str(e)) from None
    path = Path(path)
    if not alias:  # a registry name is its own alias; a file is named by its stem
        alias = path.stem if Path(model).expanduser().is_file() else model.strip().lower()
    config = ServeConfig(model_path=path, alias=alias,
                         settings=settings, n_gpu_layers=n_gpu_layers, n_threads=threads, verbose=verbose)
    try:
        serve(config, echo=_echo_err)
    except PortError as e:
        raise click.ClickException(str(e)) from None
    except (EngineError, EngineNotBuiltError, ValueError) as e:
        raise click.ClickException(f"cannot load {path.name}: {e}") from None
