"""``tqgguf build``: fetch, patch, compile and install the engine (thin layer over tqgguf.builder)."""
from __future__ import annotations

from pathlib import Path

import click
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from ..builder import BuildConfig, PatchError, SourceError, build
from ..builder.driver import BACKENDS
from ..builder.source import PIN, prepare_tree

console = Console(stderr=True)


@click.command(name="build")
@click.option("--backend", type=click.Choice(BACKENDS), default="cpu", show_default=True,
              help="ggml backend to compile in addition to the CPU.")
@click.option("--cuda-arch", default=None, help="CMAKE_CUDA_ARCHITECTURES, e.g. 90 for H100/H200.")
@click.option("-j", "--jobs", type=click.IntRange(min=1), default=None, help="Parallel compile jobs (default: all cores).")
@click.option("--tools", is_flag=True, help="Also build llama-perplexity, llama-bench, test-backend-ops (llama-server, which "
                   "`tqgguf serve` runs, is always built).")
@click.option("--force", is_flag=True, help="Rebuild even if the fingerprint matches the installed engine.")
@click.option("--source-only", "source_only", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Only write the patched source tree to DIR (to build elsewhere, e.g. on a GPU machine).")
def command(backend, cuda_arch, jobs, tools, force, source_only):
    """Build and install the patched llama.cpp engine (llama-cpp-python 0.3.36 sdist) and
    llama-server from the same patched tree (what `tqgguf serve` runs).

    A second run with nothing changed finishes in about a second.
    """
    try:
        if source_only:
            prepare_tree(source_only, log=lambda m: console.print(m))
            console.print(f"patched tree written to {source_only} (llama.cpp in vendor/llama.cpp)")
            return
        cfg = BuildConfig(backend=backend, cuda_arch=cuda_arch, jobs=jobs, tools=tools)
        with Progress(TextColumn("[bold]{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                      TimeElapsedColumn(), TextColumn("{task.fields[unit]}"), console=console, transient=True) as prog:
            task = prog.add_task("compiling", total=None, unit="")

            def on_progress(i, n, unit):
                prog.update(task, completed=i, total=n, unit=unit)

            result = build(cfg, force=force, log=lambda m: prog.console.print(m), progress=on_progress)
    except (PatchError, SourceError, RuntimeError, ValueError) as e:
        raise click.ClickException(str(e)) from e
    if result.skipped:
        console.print(f"already built and installed (fingerprint {result.fingerprint[:12]}, {PIN.package} "
                      f"{PIN.version}); nothing to do ({result.seconds:.1f} s)")
    else:
        console.print(f"built and installed {result.wheel.name if result.wheel else 'engine'} "
                      f"(fingerprint {result.fingerprint[:12]}) in {result.seconds / 60:.1f} min; log: {result.log}")
    if result.tools_dir:
        console.print(f"llama-server{' and tools' if tools else ''} in {result.tools_dir / 'bin'}")
