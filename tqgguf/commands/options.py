"""CLI options that several verbs share, declared once.

A single-value option (``ppl``, ``serve``) only collects the raw text: the settings model
(tqgguf.config) validates it, with the flag > ``TQGGUF_*`` > ``OLLAMA_*`` > default
precedence, and its help text comes from the setting's declaration. The ``grid`` form
(``sweep``) takes a comma list of the same values, validated item by item by the same
parsers (tqgguf.sweep.grid).
"""
from __future__ import annotations

from pathlib import Path

import click

from ..cachetypes import FLASH_ATTN_MODES, KV_CACHE_TYPES
from ..config import setting_help
from ..sweep.grid import DEFAULT_K, DEFAULT_V

_TYPES = f"One of: {', '.join(KV_CACHE_TYPES)}."


def cache_type_options(*, grid: bool = False):
    """``-ctk/--ctk/--cache-type-k`` (parameter ``ctk``) and ``-ctv/--ctv/--cache-type-v``
    (``ctv``), llama.cpp's names. grid: comma lists defaulting to the sweep grid."""
    if grid:
        k = click.option("-ctk", "--ctk", "--cache-type-k", "ctk", metavar="LIST", default=",".join(DEFAULT_K),
                         show_default=True, help=f"Comma list of K cache types. {_TYPES}")
        v = click.option("-ctv", "--ctv", "--cache-type-v", "ctv", metavar="LIST", default=",".join(DEFAULT_V),
                         show_default=True, help="Comma list of V cache types.")
    else:
        k = click.option("-ctk", "--ctk", "--cache-type-k", "ctk", metavar="TYPE", default=None,
                         help=f"{setting_help('cache_type_k')} {_TYPES}")
        v = click.option("-ctv", "--ctv", "--cache-type-v", "ctv", metavar="TYPE", default=None,
                         help=setting_help("cache_type_v"))
    return lambda f: k(v(f))


def flash_attn_option():
    """``-fa/--flash-attn on|off|auto`` (parameter ``flash_attn``)."""
    return click.option("-fa", "--flash-attn", "flash_attn", metavar="|".join(FLASH_ATTN_MODES), default=None,
                        help=setting_help("flash_attention"))


def rotation_option(*, grid: bool = False):
    """``--rot/--no-rot`` (parameter ``rot``); grid: ``--rot on|off|on,off``."""
    if grid:
        return click.option("--rot", "rot", metavar="LIST", default="on", show_default=True,
                            help="Rotation axis: on, off or on,off.")
    return click.option("--rot/--no-rot", "rot", default=None, help=setting_help("attn_rotation"))


def k_center_option(*, grid: bool = False):
    """``--k-center MODE`` (parameter ``k_center``); grid: a comma list of modes."""
    if grid:
        return click.option("--k-center", "k_center", metavar="LIST", default="auto", show_default=True,
                            help="K centering axis, a comma list of: auto, off, bias, bias:N, full, calib, calib:FILE "
                                 "(applies to quantized K types only); see docs/K_CENTERING.md.")
    return click.option("--k-center", "k_center", metavar="MODE", default=None,
                        help=setting_help("k_center") + " See docs/K_CENTERING.md.")


def kv_plan_options(*, grid: bool = False):
    """``--kv-boundary``, ``--kv-swa``, ``--kv-plan`` (parameters ``kv_boundary``,
    ``kv_swa``, ``kv_plan``): per-layer K/V types (tqgguf.kvplan). grid: ``--kv-boundary``
    and ``--kv-swa`` take comma lists (``0`` / ``none`` = no such layers) and ``--kv-plan``
    may be repeated; each value is one more point on the axis."""
    if grid:
        b = click.option("--kv-boundary", "kv_boundary", metavar="LIST", default="0", show_default=True,
                         help="Boundary-layer axis, a comma list of N[:K/V] (first and last N layers at K/V, "
                              "default q8_0/q8_0; 0 = none).")
        s = click.option("--kv-swa", "kv_swa", metavar="LIST", default="none", show_default=True,
                         help="Sliding-window-layer axis, a comma list of K/V or T (none = -ctk/-ctv).")
        p = click.option("--kv-plan", "kv_plan", metavar="MAP|FILE", multiple=True,
                         help="An explicit layer map (0-1,22-23:q8_0/q8_0) or a plan file from tqgguf mix; "
                              "repeat for more points.")
    else:
        b = click.option("--kv-boundary", "kv_boundary", metavar="N[:K/V]", default=None,
                         help=setting_help("kv_boundary"))
        s = click.option("--kv-swa", "kv_swa", metavar="K/V", default=None, help=setting_help("kv_swa"))
        p = click.option("--kv-plan", "kv_plan", metavar="MAP|FILE", default=None, help=setting_help("kv_plan"))
    return lambda f: b(s(p(f)))


def text_option():
    """``-f/--file TEXT`` (parameter ``text_file``, a Path or None): the evaluation text."""
    return click.option("-f", "--file", "text_file", type=click.Path(dir_okay=False, path_type=Path), default=None,
                        help=setting_help("text"))


def offload_options():
    """``-ngl``, ``--rpc``, ``-sm``, ``-ts``, ``-mg``, ``-dev`` (parameters ``n_gpu_layers``, ``rpc``,
    ``split_mode``, ``tensor_split``, ``main_gpu``, ``device``): where the model goes, spelled
    as llama.cpp's flags; each is a setting (tqgguf.config, with its TQGGUF_* variable), so
    the flags only collect text and :func:`resolve_offload` validates it."""
    opts = [
        click.option("-ngl", "--n-gpu-layers", "--gpu-layers", "n_gpu_layers", metavar="N|auto|all", default=None,
                     help=setting_help("n_gpu_layers")),
        click.option("--rpc", "rpc", metavar="HOST:PORT[,...]", default=None, help=setting_help("rpc")),
        click.option("-sm", "--split-mode", "split_mode", metavar="none|layer|row|tensor", default=None,
                     help=setting_help("split_mode")),
        click.option("-ts", "--tensor-split", "tensor_split", metavar="N0,N1,...", default=None,
                     help=setting_help("tensor_split")),
        click.option("-mg", "--main-gpu", "main_gpu", metavar="INDEX", default=None, help=setting_help("main_gpu")),
        click.option("-dev", "--device", "device", metavar="DEV[,...]|none", default=None, help=setting_help("device")),
    ]

    def wrap(f):
        for o in reversed(opts):
            f = o(f)
        return f
    return wrap


OFFLOAD_KEYS = ("n_gpu_layers", "rpc", "split_mode", "tensor_split", "main_gpu", "device")


def offload_overrides(**values) -> dict:
    """The settings overrides of the :func:`offload_options` flags (None = not given)."""
    return {k: values.get(k) for k in OFFLOAD_KEYS}


def resolve_offload(settings=None, kv_types=(), **values):
    """The tqgguf.devices.Offload of the offload flags (``values``: the click parameters)
    over the variables and defaults, checked against the engine before any work: workers
    reachable and turbo-capable, ``-dev``/``-ts``/``-mg`` fit the devices, ``-ngl N`` has a
    device. Bad values and a misfit are usage errors (exit 2); an unusable worker, or a
    missing engine, exit 1 with the reason. ``settings``: already resolved Settings to take
    the values from instead; ``kv_types``: the K/V types the verb will run (``-sm tensor`` is
    refused with a turbo type, tqgguf.devices.check_tensor_split). Returns the Offload (cheap to
    pass; verbs load the model later)."""
    from ..cachetypes import EngineNotBuiltError
    from ..config import SettingsError, resolve_settings
    from ..devices import DeviceError, Offload, WorkerError
    from ..engine import EngineError, GPUOffloadError

    if settings is None:
        try:
            settings = resolve_settings(offload_overrides(**values), check=False)
        except SettingsError as e:
            raise click.UsageError(str(e)) from None
    from ..devices import check_tensor_split

    off = Offload.from_settings(settings)
    try:
        check_tensor_split(off.split_mode, kv_types, bool(off.rpc))
    except DeviceError as e:
        raise click.UsageError(str(e)) from None
    if off.cpu_only and not off.rpc:
        return off
    try:
        off.prepare()
    except (DeviceError, GPUOffloadError) as e:
        raise click.UsageError(str(e)) from None
    except (WorkerError, EngineError, EngineNotBuiltError) as e:
        raise click.ClickException(str(e)) from None
    return off


def echo_placement(engine) -> None:
    """Print where the layers and their K and V cache live (stderr), as the startup of ppl and bench."""
    for line in engine.placement_lines():
        click.echo(f"placement: {line}", err=True)
