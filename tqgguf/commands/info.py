"""``tqgguf info``: what engine is installed and which KV cache types it has."""
from __future__ import annotations

import json

import click
from rich.console import Console
from rich.table import Table

from ..builder import installed_build_info
from ..builder.driver import BuildConfig, fingerprint, llama_server_path
from ..cachetypes import KV_CACHE_TYPES, EngineNotBuiltError, all_types


def engine_info() -> dict:
    """Installed engine facts: pin, commit, fingerprint (installed and of this checkout),
    backends, and every KV cache type with block size, bytes/block and bits/value read
    from the built library. Raises EngineNotBuiltError when nothing usable is installed."""
    info = installed_build_info()
    if info is None:
        raise EngineNotBuiltError("no tqgguf engine is installed; run `tqgguf build`")
    types = all_types()
    import llama_cpp

    from ..devices import list_devices
    from ..engine import backend_names, gpu_devices

    cache_types = [
        {"name": t, "id": types[t].id, "block_size": types[t].block_size, "bytes_per_block": types[t].type_size,
         "bits_per_value": round(types[t].bits_per_value, 4)}
        for t in KV_CACHE_TYPES if t in types]
    backend = info.get("backend", "cpu")
    system_info = llama_cpp.llama_print_system_info().decode().strip()
    cuda_arch = (info.get("defines") or {}).get("CMAKE_CUDA_ARCHITECTURES") if backend == "cuda" else None
    return {
        "pin": info.get("pin"), "llama_cpp_commit": info.get("llama_cpp_commit"),
        "fingerprint": info.get("fingerprint"),
        "checkout_fingerprint": fingerprint(BuildConfig(backend=backend, cuda_arch=cuda_arch)),
        "backends": ["CPU"] + ([backend.upper()] if backend != "cpu" else []),
        "system_info": system_info,
        "gpu_offload": bool(gpu_devices()),
        "devices": [{"name": d.name, "description": d.description, "kind": d.kind, "free_mib": d.free >> 20,
                     "total_mib": d.total >> 20} for d in list_devices()],
        "rpc": "RPC" in backend_names(),
        "rpc_server": _rpc_server(),
        "turbo_fa_pairs": turbo_fa_pairs(system_info),
        "kv_cache_types": cache_types, "built_at": info.get("built_at"),
        "llama_server": _llama_server(),
    }


def _rpc_server() -> str | None:
    """Path of the RPC worker `tqgguf rpc-server` runs, or None when it is not built."""
    from ..builder.driver import rpc_server_path

    try:
        return str(rpc_server_path())
    except FileNotFoundError:
        return None


def _llama_server() -> str | None:
    """Path of the llama-server `tqgguf serve` would run (TQGGUF_LLAMA_SERVER or the built one), or None."""
    from ..config import SettingsError, setting

    try:
        return str(llama_server_path(setting("llama_server")))
    except (FileNotFoundError, SettingsError):
        return None


def turbo_fa_pairs(system_info: str) -> list[str]:
    """K/V pairs with a turbo side that the GPU backend has flash-attention kernels for, as
    "K/V" ggml names, read from the backend feature TURBO_FA that the CUDA and Metal builds
    report in llama_print_system_info (native/ggml/src/ggml-cuda/turbo-pairs.h, the list both
    use); [] for an engine without it (CPU: every pair runs in the CPU's generic flash attention)."""
    import re

    m = re.search(r"TURBO_FA = ([A-Z0-9_/ ]+?)\s*(\||$)", system_info)
    if not m:
        return []

    def name(enum: str) -> str:  # GGML_TYPE_ suffix -> ggml type name: Q8_0 -> q8_0, TURBO4_0 -> turbo4
        low = enum.lower()
        return low if low in KV_CACHE_TYPES else low.removesuffix("_0")

    return ["/".join(name(t) for t in pair.split("/")) for pair in m.group(1).split()]


@click.command(name="info")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.option("--rpc", "rpc", metavar="HOST:PORT[,...]", default=None,
              help="Also list these RPC workers' devices (RPC0, RPC1, ...: the names -dev takes).")
def command(as_json, rpc):
    """Show the installed engine: pin, fingerprint, backends, devices, KV cache types."""
    try:
        if rpc:
            from ..values import parse_endpoints
            from ..devices import DeviceError, WorkerError, use_workers

            try:
                use_workers(parse_endpoints(rpc))
            except (ValueError, DeviceError) as e:
                raise click.UsageError(str(e)) from None
            except WorkerError as e:
                raise click.ClickException(str(e)) from None
        info = engine_info()
    except EngineNotBuiltError as e:
        raise click.ClickException(str(e)) from e
    if as_json:
        click.echo(json.dumps(info, indent=1))
        return
    c = Console()
    stale = "" if info["fingerprint"] == info["checkout_fingerprint"] else "  [yellow](differs from this checkout: run tqgguf build)[/]"
    c.print(f"[bold]engine[/]      {info['pin']} (llama.cpp {info['llama_cpp_commit']}), built {info['built_at']}")
    c.print(f"[bold]fingerprint[/] {info['fingerprint'][:16]}{stale}")
    c.print(f"[bold]backends[/]    {', '.join(info['backends'])}")
    c.print(f"[bold]llama-server[/] {info['llama_server'] or '[yellow]not built: run tqgguf build[/]'}")
    c.print(f"[bold]rpc worker[/]  {info['rpc_server'] or '[yellow]not built: run tqgguf build[/]'}"
            f"{'' if info['rpc'] else '  [yellow](engine without the RPC backend: run tqgguf build)[/]'}")
    for d in info["devices"]:
        c.print(f"[bold]device[/]      {d['name']} ({d['kind']}): {d['description']}, {d['free_mib']} of "
                f"{d['total_mib']} MiB free")
    c.print(f"[bold]system[/]      {info['system_info']}")
    if info["turbo_fa_pairs"]:
        c.print(f"[bold]GPU turbo flash attention[/] (other pairs: converted to f16 on CUDA, refused on Metal): "
                f"{' '.join(info['turbo_fa_pairs'])}")
    if len(info["backends"]) > 1 and not info["gpu_offload"]:
        c.print(f"[yellow]no {info['backends'][-1]} device found: -ngl N is refused without --rpc workers; "
                "-ngl auto runs on the CPU[/]")
    t = Table(title="KV cache types (-ctk / -ctv)")
    for col in ("type", "block size", "bytes/block", "bits/value", "vs f16"):
        t.add_column(col, justify="right" if col != "type" else "left")
    for ct in info["kv_cache_types"]:
        t.add_row(ct["name"], str(ct["block_size"]), str(ct["bytes_per_block"]), f"{ct['bits_per_value']:.2f}",
                  f"{16 / ct['bits_per_value']:.2f}x")
    c.print(t)
