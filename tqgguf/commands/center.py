"""``tqgguf center``: remove the constant part of K (slow RoPE pairs of attn_k.bias) from a GGUF."""
from __future__ import annotations

import math
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table


def _fmt_period(p: float) -> str:
    if not math.isfinite(p):
        return "inf"
    for div, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if p >= div:
            return f"{p / div:.3g}{unit}"
    return f"{p:.3g}"


@click.command(name="center")
@click.argument("model")
@click.option("-o", "--output", "output", type=click.Path(dir_okay=False, path_type=Path),
              help="Centered GGUF to write (required unless --dry-run).")
@click.option("--ctx", type=click.IntRange(min=1), default=None,
              help="Remove RoPE pairs whose period exceeds this many tokens "
                   "(default: the model's {arch}.context_length).")
@click.option("--force", is_flag=True, help="Overwrite OUTPUT if it exists.")
@click.option("-n", "--dry-run", is_flag=True, help="Show what would be removed; write nothing.")
def command(model, output, ctx, force, dry_run):
    """Zero the slow-RoPE components of every attn_k.bias in MODEL (a GGUF path or a name
    from `tqgguf models list`) and write OUTPUT.

    Keys of models with a K projection bias (Qwen2 family) carry a large, almost
    position-independent vector: the bias in RoPE pairs whose period is far beyond the
    context. Softmax ignores a constant added to every key, so removing it leaves
    attention (nearly) unchanged while a quantized K cache (q8_0, q4_0, turbo*) gets its
    range back. Data-free; every other tensor and metadata field is copied unchanged, and
    tqgguf.k_center.* keys record what was done. The output runs in any GGUF consumer.
    """
    from ..center import CenterError, check_output, plan_center, write_centered
    from ..models import ModelError, resolve_model

    try:
        model = resolve_model(model)
    except ModelError as e:
        raise click.ClickException(str(e)) from None
    if output is None and not dry_run:
        raise click.UsageError("missing -o/--output (or pass --dry-run)")
    console = Console()
    try:
        if output is not None:
            check_output(model, output, force=force)
        plan = plan_center(model, ctx)
    except CenterError as e:
        raise click.ClickException(str(e)) from None
    if plan.nothing_to_do:
        console.print(f"[yellow]nothing to do[/]: {plan.nothing_to_do}; nothing written")
        return

    r = plan.rope
    periods = plan.periods
    slow = plan.slow_pairs
    console.print(f"[bold]{model.name}[/]: arch {plan.arch}, head dim {r.head_dim}, n_rot {r.n_rot}, "
                  f"RoPE base {r.freq_base:g}, pairing {r.pairing} (from {r.rope_type_source}), "
                  f"scaling {r.scaling}" + (f" x{r.factor:g}" if r.factor != 1 else ""))
    if slow:
        console.print(f"threshold {plan.ctx} tokens: {len(slow)} of {len(periods)} pairs per head removed "
                      f"(pairs {slow[0]}..{slow[-1]}, periods {_fmt_period(periods[slow[0]])}"
                      f"..{_fmt_period(periods[slow[-1]])} tokens; fastest kept pair period "
                      f"{_fmt_period(max([p for p in periods if p <= plan.ctx], default=float('nan')))})")
    if plan.unrotated_dims:
        console.print(f"{plan.unrotated_dims} unrotated dims per head removed (exactly constant)")

    t = Table(title=f"attn_k.bias, ctx threshold {plan.ctx}")
    for col in ("layer", "KV heads", "pairs removed", "norm before", "removed", "kept", "removed energy",
                f"drift over {plan.drift_distance}"):
        t.add_column(col, justify="right")
    for p in plan.layers:
        energy = (p.norm_removed / p.norm_before) ** 2 if p.norm_before else 0.0
        t.add_row(str(p.layer), str(p.n_head_kv), str(p.pairs_removed), f"{p.norm_before:.3f}",
                  f"{p.norm_removed:.3f}", f"{p.norm_after:.3f}", f"{100 * energy:.1f}%",
                  f"{p.drift:.3f}")
    console.print(t)
    console.print(f"drift: how far the removed part rotates away from a constant within {plan.drift_distance} "
                  f"tokens (largest |(R(d) - I) b_removed|, d <= {plan.drift_distance}); "
                  "a larger --ctx removes less and drifts less")

    if dry_run:
        console.print("dry run: nothing written")
        return
    try:
        write_centered(plan, output)
    except CenterError as e:
        raise click.ClickException(str(e)) from None
    except OSError as e:
        raise click.ClickException(f"cannot write {output}: {e.strerror or e}") from None
    console.print(f"wrote [bold]{output}[/] ({len(plan.layers)} attn_k.bias tensors changed)")
