"""``tqgguf bench``: llama-bench (and llama-batched-bench) measurements through the engine
(thin layer over tqgguf.bench)."""
from __future__ import annotations

import signal
import threading
from pathlib import Path

import click

from ..cachetypes import KV_CACHE_TYPES, CacheTypeError, EngineNotBuiltError
from ..values import MAX_THREADS
from .options import k_center_option, kv_plan_options, offload_options, offload_overrides, resolve_offload, rotation_option

_TYPES = f"Types: {', '.join(KV_CACHE_TYPES)}."


@click.command(name="bench")
@click.argument("model")
@click.option("-ctk", "--ctk", "--cache-type-k", "ctk", metavar="LIST", default=None,
              help=f"Comma list of K cache types (default: the cache_type_k setting, f16). {_TYPES}")
@click.option("-ctv", "--ctv", "--cache-type-v", "ctv", metavar="LIST", default=None,
              help="Comma list of V cache types (default: the cache_type_v setting, f16).")
@click.option("-p", "--n-prompt", "n_prompt", metavar="LIST", default="512", show_default=True,
              help="Comma list of prompt sizes: a ppP test each (0 = no pp test, as llama-bench).")
@click.option("-n", "--n-gen", "n_gen", metavar="LIST", default="128", show_default=True,
              help="Comma list of generation sizes: a tgN test each (0 = no tg test).")
@click.option("-d", "--n-depth", "n_depth", metavar="LIST", default="0", show_default=True,
              help="Comma list of depths: tokens in the KV cache (prefilled, untimed) before each test.")
@click.option("-b", "--batch-size", "n_batch", type=int, default=2048, show_default=True, help="n_batch.")
@click.option("-ub", "--ubatch-size", "n_ubatch", type=int, default=512, show_default=True, help="n_ubatch.")
@click.option("-fa", "--flash-attn", "flash_attn", metavar="LIST", default=None,
              help="Comma list of on|off|auto (1|0). auto = on; a quantized V needs it. "
                   "Default: the flash_attention setting, auto.")
@rotation_option()
@k_center_option()
@click.option("-r", "--repetitions", "reps", type=int, default=5, show_default=True,
              help="Timed repetitions per test (t/s is their mean ± standard deviation).")
@click.option("-t", "--threads", type=int, default=None, help="CPU threads (default: all cores).")
@offload_options()
@kv_plan_options(grid=True)
@click.option("-o", "--output", "fmt", type=click.Choice(["md", "csv", "jsonl"]), default="md", show_default=True,
              help="Format printed to stdout as results come.")
@click.option("--dir", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Results directory (default ./bench-<model>): results.jsonl (a rerun resumes), table.md, bench.png.")
@click.option("--no-warmup", is_flag=True, help="Skip the warmup run before each test.")
@click.option("--batched", is_flag=True, help="Also run llama-batched-bench's measurement (S_TG per sequence count).")
@click.option("-npp", "npp", metavar="LIST", default="512", show_default=True,
              help="--batched: prompt tokens per sequence (comma list).")
@click.option("-ntg", "ntg", metavar="LIST", default="128", show_default=True,
              help="--batched: generated tokens per sequence (comma list).")
@click.option("-npl", "npl", metavar="LIST", default="1,8,32", show_default=True,
              help="--batched: parallel sequences (comma list).")
@click.option("--beyond-n-ctx-train", "beyond_train", is_flag=True,
              help="Allow depth + tokens beyond the model's training context (refused by default): for speed "
                   "only, the model's outputs there mean nothing. llama-bench does not check.")
@click.option("--bandwidth", "bandwidth", type=click.FloatRange(min=0, min_open=True), default=None, metavar="GB/s",
              help="The device's memory bandwidth (10^9 bytes/s) for the '% BW' column of tg rows, instead of the "
                   "copy bandwidth measured through the engine (once per device, kept in DIR/bandwidth.json).")
@click.option("--no-plot", is_flag=True, help="Do not write bench.png.")
def command(model, ctk, ctv, n_prompt, n_gen, n_depth, n_batch, n_ubatch, flash_attn, rot, k_center, reps, threads,
            n_gpu_layers, rpc, split_mode, tensor_split, main_gpu, device, kv_boundary, kv_swa, kv_plan, fmt, out_dir,
            no_warmup, batched, npp, ntg, npl, beyond_train, bandwidth, no_plot):
    """Tokens per second of MODEL (a GGUF path or a name from `tqgguf models list`) for every
    K x V x fa x layer plan x depth combination, measured the way llama-bench does (pp and
    tg tests, t/s mean ± std over -r runs), with --batched llama-batched-bench's S_TG table.
    K centering and the rotation are those of `ppl` and `serve` (flag > TQGGUF_* > default)."""
    from ..bench import report, runner
    from ..bench.spec import (BatchedSpec, BenchSpec, configs_of, expand, parse_fa_list, parse_int_list, parse_type_list,
                              validate)
    from ..config import SettingsError, resolve_settings
    from ..kvplan import parse_plan_axes
    from ..models import ModelError, resolve_model
    from ..runtime import EngineError

    if threads is not None and not 1 <= threads <= MAX_THREADS:
        raise click.UsageError(f"-t {threads}: threads must be 1..{MAX_THREADS} (ggml's GGML_MAX_N_THREADS)")
    try:  # the settings model of ppl/serve: also refuses a bad TQGGUF_*/OLLAMA_* value before any run; its
        # combination check is validate()'s, on the lists, where a -ctv / -fa flag replaces the variable it overrides
        st = resolve_settings({"attn_rotation": rot, "k_center": k_center,
                               **offload_overrides(n_gpu_layers=n_gpu_layers, rpc=rpc, split_mode=split_mode,
                                                   tensor_split=tensor_split, main_gpu=main_gpu, device=device)},
                              check=False)
    except SettingsError as e:
        raise click.UsageError(str(e)) from e
    v_from = "-ctv" if ctv is not None else st.source("cache_type_v").describe()
    fa_from = "-fa" if flash_attn is not None else st.source("flash_attention").describe()
    ctk = ctk if ctk is not None else st.cache_type_k
    ctv = ctv if ctv is not None else st.cache_type_v
    flash_attn = flash_attn if flash_attn is not None else st.flash_attention
    offload = resolve_offload(st, kv_types=[*str(ctk).split(','), *str(ctv).split(',')])
    try:
        ks, vs = parse_type_list(ctk, "-ctk"), parse_type_list(ctv, "-ctv")
        fas = parse_fa_list(flash_attn)
        ps = parse_int_list(n_prompt, "-p", minimum=0)
        ns = parse_int_list(n_gen, "-n", minimum=0)
        ds = parse_int_list(n_depth, "-d", minimum=0)
        plans = parse_plan_axes(kv_boundary, kv_swa, kv_plan)
        bspec = None
        if batched:
            bspec = BatchedSpec(tuple(parse_int_list(npp, "-npp", minimum=1)),
                                tuple(parse_int_list(ntg, "-ntg", minimum=1)),
                                tuple(parse_int_list(npl, "-npl", minimum=1)))
        path = resolve_model(model)
        spec = BenchSpec(model=path, tests=expand(ks, vs, fas, ps, ns, ds, plans),
                         configs=configs_of(ks, vs, fas, plans), reps=reps, n_batch=n_batch, n_ubatch=n_ubatch,
                         n_threads=threads, offload=offload, warmup=not no_warmup, batched=bspec,
                         beyond_train=beyond_train, k_center=st.k_center, rotation=st.attn_rotation,
                         bandwidth=bandwidth * 1e9 if bandwidth else None,
                         out_dir=out_dir or Path(f"bench-{Path(model).stem if Path(model).suffix == '.gguf' else model.replace(':', '-')}"))
        validate(spec, fa_from=fa_from, v_from=v_from)  # (with a -ctv / -fa flag, the variable it overrides is out)
        if not spec.tests:  # only --batched runs: say which flags had nothing to apply to
            src = click.get_current_context().get_parameter_source
            idle = [f for f, p in (("-d", "n_depth"), ("-r", "reps"), ("--no-warmup", "no_warmup"))
                    if src(p) != click.core.ParameterSource.DEFAULT]
            if idle:
                click.echo(f"bench: warning: {', '.join(idle)} apply to the pp/tg tests, and -p/-n leave none; "
                           "--batched has its own -npp/-ntg/-npl", err=True)
    except (CacheTypeError, ValueError, ModelError) as e:
        raise click.UsageError(str(e)) from e
    except (EngineError, EngineNotBuiltError) as e:
        raise click.ClickException(str(e)) from e

    state = {"test_header": False, "batched_header": False, "csv": set()}
    with_plan = report.has_plans(spec)  # the table's columns are fixed before the first row comes
    try:
        with_center = report.has_center(spec)
    except ValueError as e:  # not a readable GGUF
        raise click.UsageError(str(e)) from e
    with_roof = report.has_roofline(spec)
    all_rows: list[dict] = []
    csv_kind = "both" if spec.tests and spec.batched else None  # else the one kind the run has

    def show(row: dict, resumed: bool) -> None:
        all_rows.append(row)
        kind = row.get("kind", "test")
        if fmt == "jsonl":
            click.echo(report.jsonl_line(row))
        elif fmt == "csv":  # one table: a run with both kinds gets their union and a kind column
            fields = report.csv_fields(csv_kind or kind, with_plan, with_center, with_roof)
            if not state["csv"]:
                state["csv"].add(kind)
                click.echo(report.csv_line(fields))
            click.echo(report.csv_row(row, fields))
        elif kind == "test":
            cols = report.test_columns([row], with_plan, with_center, with_roof, report.roofline_source(spec))
            if not state["test_header"]:
                state["test_header"] = True
                click.echo(report.markdown_header([row], cols))
            click.echo(report.markdown_row(row, cols))
        else:
            if not state["batched_header"]:
                state["batched_header"] = True
                click.echo(("\n" if state["test_header"] else "") + report.batched_header(with_plan))
            click.echo(report.batched_row(row, with_plan))

    # Ctrl-C: Python raises KeyboardInterrupt where it lands, but one that lands inside a
    # ctypes callback (llama.cpp's log callback, during a context's creation) is printed and
    # dropped by ctypes; the flag makes the next result or test start raise it again
    interrupted = False

    def on_sigint(signum, frame) -> None:
        nonlocal interrupted
        interrupted = True
        raise KeyboardInterrupt

    def log(msg: str) -> None:
        if interrupted:
            raise KeyboardInterrupt
        click.echo(f"bench: {msg}", err=True)

    def shown(row: dict, resumed: bool) -> None:
        show(row, resumed)
        if interrupted:
            raise KeyboardInterrupt

    from ..values import KCenterError

    previous = signal.signal(signal.SIGINT, on_sigint) if threading.current_thread() is threading.main_thread() else None
    try:
        from ..devices import set_fatal_note

        set_fatal_note(f"bench: the finished results are kept in {spec.results}; the same command resumes from there")
        rows = runner.run_bench(spec, on_result=shown, log=log)
    except (EngineError, EngineNotBuiltError, KCenterError, RuntimeError, OSError) as e:  # KCenterError: calib's
        raise click.ClickException(str(e)) from e
    except KeyboardInterrupt:  # as serve: exit 130; what finished is kept and the same command resumes
        if all_rows:
            everything = report.directory_rows(spec, all_rows)
            (spec.out_dir / "table.md").write_text(f"{report.table_title(path, everything)}\n\n{report.markdown(everything)}\n")
        click.echo(f"bench: interrupted; {len(all_rows)} finished result(s) kept in {spec.results}"
                   f"{' and table.md' if all_rows else ''}; the same command resumes from there", err=True)
        click.get_current_context().exit(130)
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
    # the table and the plot show every result in the directory (runs add up: K = V diagonals
    # are separate runs), this run's rows last
    everything = report.directory_rows(spec, rows)
    (spec.out_dir / "table.md").write_text(f"{report.table_title(path, everything)}\n\n{report.markdown(everything)}\n")
    written = ["results.jsonl", "table.md"]
    if not no_plot:
        report.plot(everything, spec.out_dir / "bench.png", f"{report.table_title(path, everything)[7:]}: t/s by depth")
        written.append("bench.png")
    click.echo(f"bench: wrote {', '.join(str(spec.out_dir / w) for w in written)}", err=True)
