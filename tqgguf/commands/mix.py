"""``tqgguf mix``: per-layer K/V types under a bit budget (thin layer over tqgguf.mix)."""
from __future__ import annotations

from pathlib import Path

import click

from ..cachetypes import EngineNotBuiltError
from .options import offload_options, resolve_offload
from ..values import MAX_THREADS


@click.command(name="mix")
@click.argument("model")
@click.option("--bits", "bits", type=float, multiple=True, required=True,
              help="Average bits per stored K/V value the plan may use (repeat for several plans from one measurement).")
@click.option("-f", "--file", "text_file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Calibration text (default: the built-in pydoc corpus; use a text that is not your evaluation text).")
@click.option("--types", "types", default="q8_0,turbo4,turbo3", show_default=True,
              help="Comma list of lowered types a layer may get (f16 is always a choice).")
@click.option("-c", "--ctx-size", "n_ctx", type=click.IntRange(min=16), default=256, show_default=True,
              help="n_ctx per calibration chunk (the second half of each is scored).")
@click.option("--chunks", type=click.IntRange(min=1), default=2, show_default=True, help="Calibration chunks.")
@click.option("-o", "--out", "out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Plan file (default: MODEL.kv-plan-<bits>.json beside the model); {bits} is replaced.")
@click.option("-t", "--threads", type=click.IntRange(1, MAX_THREADS), default=None, help="CPU threads (default: all cores).")
@offload_options()
def command(model, bits, text_file, types, n_ctx, chunks, out, threads, n_gpu_layers, rpc, split_mode, tensor_split,
            main_gpu, device):
    """Measure how much each layer's K and V cache costs in KLD when lowered (on a
    calibration text), then choose per-layer types that minimise the predicted KLD with
    average bits/value <= --bits. The chosen plan and every uniform K/V pair that fits the
    budget are then run on the calibration text and whichever measures the lowest KLD is
    written, with the model's sha256. Apply it with --kv-plan FILE (ppl, sweep, serve)."""
    from ..kvplan import KVPlanError
    from ..mix import MixError, check_budget, choose_checked, measure, parse_types, store_path, write_choice
    from ..models import ModelError, resolve_model
    from ..runtime import EngineError
    from ..texts import builtin_corpus

    offload = resolve_offload(kv_types=str(types).split(","), n_gpu_layers=n_gpu_layers, rpc=rpc, split_mode=split_mode,
                              tensor_split=tensor_split, main_gpu=main_gpu, device=device)
    try:
        cand = parse_types(types)
        for b in bits:
            check_budget(b, cand)
        path = resolve_model(model, for_quality="mix")
        if text_file is not None:
            try:
                text, label = Path(text_file).read_text(encoding="utf-8"), str(text_file)
            except (OSError, UnicodeDecodeError) as e:
                raise MixError(f"cannot read the calibration text {text_file}: {e}") from None
        else:
            text, label = builtin_corpus(), "built-in pydoc corpus"
    except (MixError, KVPlanError, ModelError, ValueError) as e:
        raise click.UsageError(str(e)) from e
    from ..kvplan import model_layers

    layers = model_layers(path)
    first_out = Path(str(out).replace("{bits}", f"{bits[0]:g}")) if out else path
    store = store_path(first_out.parent, path, text, n_ctx, chunks, gpu=offload.key() != "cpu")
    click.echo(f"mix: {path.name}, {layers.n_layer} layers x K,V x {', '.join(cand)}: "
               f"{1 + 2 * layers.n_layer * len(cand)} runs over {chunks} x {n_ctx} tokens of {label}; "
               f"measurements go to {store} (a rerun, or another --bits, reuses them)", err=True)
    try:
        sens = measure(path, text, types=cand, n_ctx=n_ctx, chunks=chunks, n_threads=threads, offload=offload,
                       progress=lambda m: click.echo("  " + m, err=True), store=store)
    except MixError as e:
        raise click.UsageError(str(e)) from e
    except (EngineError, EngineNotBuiltError, OSError) as e:
        raise click.ClickException(str(e)) from e
    from ..kcenter import resolve_auto

    kc, why = resolve_auto(path, cand)
    click.echo(f"k_center: auto -> {kc} for a plan that quantizes K: {why}", err=True)
    click.echo("checking each budget's optimised plan and the uniform K/V pairs that fit it on the calibration text",
               err=True)
    try:  # the whole plans and the uniform pairs on the same calibration chunks: keep what measures lowest
        choices = choose_checked(path, text, sens, list(bits), head_k=layers.head_k, head_v=layers.head_v,
                                 n_ctx=n_ctx, chunks=chunks, n_threads=threads, offload=offload,
                                 progress=lambda m: click.echo("  " + m, err=True))
    except (EngineError, EngineNotBuiltError) as e:
        raise click.ClickException(str(e)) from e
    for b, ch in zip(bits, choices):
        dest = Path(str(out).replace("{bits}", f"{b:g}")) if out else \
            path.with_name(f"{path.stem}.kv-plan-{b:g}.json")
        write_choice(dest, path, ch, sens=sens, text_label=label)
        k, opt = ch.kept, ch.candidates[0]
        click.echo(f"--bits {b:g}: {ch.summary()}")
        click.echo(f"  optimised plan: {opt.bits:.3f} bits/value, predicted KLD {opt.predicted:.6f}, measured on the "
                   f"calibration text {opt.measured:.6f}: {opt.plan}")
        plain = f" (the same as --ctk {k.uniform[0]} --ctv {k.uniform[1]})" if k.uniform else ""
        click.echo(f"  wrote {dest} ({k.label}, {k.bits:.3f} bits/value); use: --kv-plan {dest}{plain} "
                   f"(it sets every layer's K/V types, whatever -ctk/-ctv say)")
