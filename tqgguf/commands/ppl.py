"""``tqgguf ppl``: perplexity with chosen K/V cache types (thin layer over tqgguf.quality)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from ..cachetypes import EngineNotBuiltError, type_info
from .options import (cache_type_options, echo_placement, flash_attn_option, k_center_option, kv_plan_options,
                      offload_options, offload_overrides, resolve_offload, rotation_option, text_option)
from ..values import MAX_THREADS


@click.command(name="ppl")
@click.argument("model")
@text_option()
@click.option("-c", "--ctx-size", "n_ctx", type=click.IntRange(min=16), default=512, show_default=True,
              help="n_ctx: tokens per chunk.")
@click.option("-b", "--batch-size", "n_batch", type=click.IntRange(min=1), default=None, help="n_batch (default min(n_ctx, 512)).")
@click.option("--chunks", type=click.IntRange(min=1), default=None, help="Maximum number of chunks (default: all).")
@cache_type_options()
@rotation_option()
@flash_attn_option()
@k_center_option()
@kv_plan_options()
@click.option("-t", "--threads", type=click.IntRange(1, MAX_THREADS), default=None, help="CPU threads (default: all cores).")
@offload_options()
@click.option("--json", "json_file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also write the result as JSON to this file.")
@click.option("-v", "--verbose", is_flag=True, help="Show llama.cpp's log.")
def command(model, text_file, n_ctx, n_batch, chunks, ctk, ctv, rot, flash_attn, k_center, kv_boundary, kv_swa, kv_plan,
            threads, n_gpu_layers, rpc, split_mode, tensor_split, main_gpu, device, json_file, verbose):
    """Perplexity of MODEL (a GGUF path or a name from `tqgguf models list`) on a text,
    computed the way llama-perplexity does (second half of each n_ctx chunk scored)."""
    from ..models import ModelError, resolve_model
    from ..quality import TextTooShortError, perplexity
    from ..runtime import EngineError, open_model, training_context_warning
    from ..config import SettingsError, resolve_settings
    from ..texts import resolve_text

    try:  # flags > TQGGUF_* > OLLAMA_* > defaults, the same settings model as `serve`
        st = resolve_settings({"cache_type_k": ctk, "cache_type_v": ctv, "flash_attention": flash_attn,
                               "attn_rotation": rot, "k_center": k_center, "kv_boundary": kv_boundary,
                               "kv_swa": kv_swa, "kv_plan": kv_plan,
                               **offload_overrides(n_gpu_layers=n_gpu_layers, rpc=rpc, split_mode=split_mode,
                                                   tensor_split=tensor_split, main_gpu=main_gpu, device=device)})
    except SettingsError as e:
        raise click.UsageError(str(e)) from e
    offload = resolve_offload(st, kv_types=[st.cache_type_k, st.cache_type_v])
    ctk, ctv, flash_attn, rot = st.cache_type_k, st.cache_type_v, st.flash_attention, st.attn_rotation
    k_center = st.k_center
    if json_file:  # fail before the run, not after it
        try:
            json_file.parent.mkdir(parents=True, exist_ok=True)
            with open(json_file, "a"):
                pass
        except OSError as e:
            raise click.BadParameter(f"cannot write {json_file}: {e.strerror or e}", param_hint="--json") from e
    try:
        path = resolve_model(model, for_quality="ppl")  # a speed-only shape is refused before the text is fetched
        text = resolve_text(text_file)
        engine = open_model(path, ctk=ctk, ctv=ctv, n_ctx=n_ctx, n_batch=n_batch, flash_attn=flash_attn, rotation=rot,
                            n_threads=threads, offload=offload, verbose=verbose, k_center=k_center,
                            kv_boundary=st.kv_boundary, kv_swa=st.kv_swa, kv_plan=st.kv_plan)
    except (ModelError, EngineError, EngineNotBuiltError, FileNotFoundError, ValueError) as e:
        raise click.ClickException(str(e)) from e
    r = engine.report
    err = click.echo
    err(f"model: {path.name}   text: {text.label}", err=True)
    echo_placement(engine)
    err(f"KV cache: K {r.k_type} {r.k_mib:.2f} MiB, V {r.v_type} {r.v_mib:.2f} MiB ({r.cells} cells); "
        f"attn_rot_k = {int(bool(r.attn_rot_k))}, attn_rot_v = {int(bool(r.attn_rot_v))}; flash_attn = {r.flash_attn}", err=True)
    if warning := training_context_warning(r.n_ctx, r.n_ctx_train):
        err(warning, err=True)
    if engine.kv_plan:
        # the engine's list names every layer of every KV cache, those keeping -ctk/-ctv included
        err(f"kv plan: {engine.kv_plan.source} -> layers {r.kv_plan_layers}; "
            f"{r.kv_bytes_per_token} bytes per token, {r.bits_per_value:.3f} bits/value", err=True)
    kc = str(engine.k_center)
    if engine.k_center_reason:
        err(f"k_center: auto -> {kc}: {engine.k_center_reason}" + (f"; engine: {r.k_center}" if r.k_center else ""),
            err=True)
    elif kc != "off":
        err(f"k_center: {r.k_center or kc}: {'active' if r.k_center_active else 'INACTIVE (nothing to subtract)'}",
            err=True)

    def on_chunk(i, n, running):
        sys.stdout.write(f"[{i}]{running:.4f},")
        sys.stdout.flush()

    try:
        res = perplexity(engine, text.content, n_ctx=n_ctx, n_batch=n_batch, chunks=chunks, on_chunk=on_chunk)
    except TextTooShortError as e:
        raise click.ClickException(str(e)) from e
    finally:
        engine.close()
    click.echo("")
    click.echo(f"Final estimate: PPL = {res.ppl:.4f} +/- {res.ppl_err:.5f}")
    if json_file:
        out = {"model": str(path), "text": text.label, "text_sha256": text.sha256, "ctk": ctk, "ctv": ctv,
               "rotation": rot, "flash_attn": r.flash_attn, "attn_rot_k": r.attn_rot_k, "attn_rot_v": r.attn_rot_v,
               "k_center": kc, "k_center_setting": k_center, "k_center_reason": engine.k_center_reason,
               "k_center_engine": r.k_center, "k_center_active": r.k_center_active,
               "kv_plan": str(engine.kv_plan or ""), "kv_plan_layers": r.kv_plan_layers,
               "kv_bytes_per_token": r.kv_bytes_per_token, "bits_per_value": r.bits_per_value,
               "k_mib": r.k_mib, "v_mib": r.v_mib, "kv_cells": r.cells,
               "k_bits_per_value": type_info(ctk).bits_per_value, "v_bits_per_value": type_info(ctv).bits_per_value,
               **res.to_dict()}
        json_file.parent.mkdir(parents=True, exist_ok=True)
        json_file.write_text(json.dumps(out, indent=1))
