"""``tqgguf sweep``: the quality-per-bit map of K/V cache types for one model and text."""
from __future__ import annotations

import time
from pathlib import Path

import click
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from ..cachetypes import CacheTypeError, EngineNotBuiltError, is_quantized
from ..kvplan import build_plan, parse_plan_axes
from ..sweep.grid import expand, parse_k_centers, parse_rot, parse_types
from .options import (cache_type_options, k_center_option, kv_plan_options, offload_options, resolve_offload, rotation_option,
                      text_option)
from ..values import MAX_THREADS

console = Console(stderr=True)


@click.command(name="sweep")
@click.argument("model", required=False, default="smollm2-135m")
@text_option()
@cache_type_options(grid=True)
@rotation_option(grid=True)
@k_center_option(grid=True)
@kv_plan_options(grid=True)
@click.option("-c", "--ctx-size", "n_ctx", type=click.IntRange(min=16), default=512, show_default=True, help="n_ctx per chunk.")
@click.option("--chunks", type=click.IntRange(min=1), default=20, show_default=True, help="Chunks scored per configuration.")
@click.option("-o", "--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Output dir (default: ./sweep-<model>). results.jsonl there makes a rerun resume.")
@click.option("--baseline", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="f16 baseline file (llama-perplexity --kl-divergence-base format); default: cached per model/text/n_ctx.")
@click.option("-t", "--threads", type=click.IntRange(1, MAX_THREADS), default=None, help="CPU threads (default: all cores).")
@offload_options()
@click.option("--recommend", is_flag=True, help="Print the smallest-KV configuration within the budget and its flags (implied by a budget).")
@click.option("--max-kld", type=click.FloatRange(min=0), default=None, help="Budget for --recommend: mean KLD.")
@click.option("--max-dppl", type=float, default=None, help="Budget for --recommend: ΔPPL in percent (with --max-kld, both must hold).")
def command(model, text_file, ctk, ctv, rot, k_center, kv_boundary, kv_swa, kv_plan, n_ctx, chunks, out_dir, baseline, threads, n_gpu_layers, rpc, split_mode,
            tensor_split, main_gpu, device, recommend,
            max_kld, max_dppl):
    """Run every K x V x rotation x K-center x layer-plan combination (llama-bench style lists) against
    an f16/f16 baseline computed once: PPL, ΔPPL, KLD, KLD p99, Same top p, RMS Δp, KV bytes per token."""
    from ..models import ModelError, resolve_model
    from ..quality import BaselineMismatchError, TextTooShortError
    from ..runtime import EngineError
    from ..sweep.runner import SweepDirError, SweepSpec, run_sweep
    from ..sweep.report import markdown_table, plot, recommend as pick, serve_flags, write_csv
    from ..texts import resolve_text
    from ..kcenter import engine_value, resolve_auto

    recommend = recommend or max_kld is not None or max_dppl is not None  # a budget asks for a recommendation
    if recommend and max_kld is None and max_dppl is None:
        raise click.UsageError("--recommend needs a budget: --max-kld X or --max-dppl P")
    offload = resolve_offload(kv_types=[*str(ctk).split(","), *str(ctv).split(",")], n_gpu_layers=n_gpu_layers, rpc=rpc,
                              split_mode=split_mode, tensor_split=tensor_split, main_gpu=main_gpu, device=device)
    try:
        kcs = parse_k_centers(k_center)
        plans = parse_plan_axes(kv_boundary, kv_swa, kv_plan)
        text = resolve_text(text_file)
        path = resolve_model(model, for_quality="sweep")
        if "auto" in kcs:  # what auto means for this model with the grid's quantized K types (else off anyway)
            quant_k = {t for t in parse_types(ctk, "--ctk") if is_quantized(t)}
            for b, s, m in plans:  # a plan's layers may quantize K under -ctk f16 (a tqgguf mix plan)
                built = build_plan(path, boundary=b or None, swa=s or None, plan=m or None)
                quant_k |= {t for t in built.k_types("f16") if is_quantized(t)} if built else set()
            quant_k = quant_k or {"f16"}
            mode, why = resolve_auto(path, quant_k)
            console.print(f"k-center auto -> {mode} for quantized K: {why}")
            kcs = list(dict.fromkeys(str(mode) if c == "auto" else c for c in kcs))
        configs = expand(parse_types(ctk, "--ctk"), parse_types(ctv, "--ctv"), parse_rot(rot), kcs, plans=plans)
        for kc in {c.kc for c in configs if c.kc.startswith("calib")}:  # compute/check the file before the run
            engine_value(kc, path, n_threads=threads)
    except (CacheTypeError, ValueError, FileNotFoundError, ModelError) as e:
        raise click.UsageError(str(e)) from e
    except (EngineError, EngineNotBuiltError) as e:
        raise click.ClickException(str(e)) from e
    out_dir = out_dir or Path(f"sweep-{Path(model).stem if Path(model).suffix == '.gguf' else model}")
    console.print(f"model: {path.name}  text: {text.label}  n_ctx {n_ctx}, {chunks} chunks, "
                  f"{len(configs)} configurations -> {out_dir}")
    spec = SweepSpec(model=path, text=text, configs=configs, n_ctx=n_ctx, chunks=chunks, out_dir=out_dir,
                     baseline=baseline, threads=threads, offload=offload)
    t0 = time.time()
    try:
        with Progress(TextColumn("[bold]{task.fields[cfg]}"), TextColumn("config {task.fields[i]}/{task.fields[n]}"),
                      BarColumn(), TextColumn("chunk {task.completed}/{task.total}"), TimeElapsedColumn(),
                      TextColumn("ETA"), TimeRemainingColumn(), console=console, transient=True) as prog:
            task = prog.add_task("sweep", total=chunks, cfg="", i=0, n=len(configs))
            state = {"cfg": None}

            def on_progress(label, i, n, j, m):
                if state["cfg"] != label:
                    state["cfg"] = label
                    prog.reset(task, total=m, cfg=label, i=i, n=n)
                prog.update(task, completed=j)

            from ..devices import set_fatal_note

            set_fatal_note(f"the finished configurations are kept in {out_dir / 'results.jsonl'}; "
                           "the same command resumes from there")
            rows = run_sweep(spec, progress=on_progress, log=lambda m: prog.console.print(m))
    except (BaselineMismatchError, SweepDirError, TextTooShortError, OSError, EngineError, EngineNotBuiltError) as e:
        raise click.ClickException(str(e)) from e
    table = markdown_table(rows)
    click.echo(table)
    (out_dir / "table.md").write_text(f"model: {path.name}, text: {text.label}, n_ctx {n_ctx}, {chunks} chunks\n\n{table}\n")
    write_csv(rows, out_dir / "results.csv")
    plot(rows, out_dir / "sweep.png", f"{path.name} — {text.label.split(' (')[0]}, n_ctx {n_ctx}, {chunks} chunks")
    console.print(f"wrote {out_dir}/results.jsonl, results.csv, table.md, sweep.png ({time.time() - t0:.0f} s)")
    if recommend:
        best = pick(rows, max_kld=max_kld, max_dppl=max_dppl)
        if best is None:
            raise click.ClickException("no configuration in this sweep meets the budget")
        tq, ls = serve_flags(best, str(model), str(path))
        click.echo(f"\nrecommended: K={best['ctk']} V={best['ctv']} rotation {best['rot']}, "
                   f"K-center {best.get('k_center') or 'off'} — "
                   f"{best['bits_per_value']:.2f} bits/value ({best['compression_vs_f16']:.2f}x vs f16), "
                   f"KLD {best['kld_mean']:.5f}, ΔPPL {best['dppl_pct']:+.2f}%")
        click.echo(f"  {tq}\n  {ls}")
