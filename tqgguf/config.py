"""The settings model: one place that declares every setting, its variables and its flag.

Sources, highest first: CLI flag > ``TQGGUF_*`` variable > ``OLLAMA_*`` variable > default.
Every resolved value remembers where it came from (:class:`Source`), so ``tqgguf env``
and the server's startup log can say "V turbo4 (from TQGGUF_KV_CACHE_TYPE_V)".

Stricter than Ollama: Ollama silently falls back to a default (or to ``true``) when a
variable cannot be parsed; here a bad boolean, number, duration, host or cache type is a
:class:`SettingsError` naming the variable (or flag), the value and what is allowed (the
grammars: tqgguf.values; the variables: tqgguf.variables). An empty variable counts as
unset (as in Ollama). Only the value that wins is parsed: a
variable shadowed by a flag is shown by ``tqgguf env`` but cannot break a run.

Use::

    settings = resolve_settings({"cache_type_k": "q8_0"})   # overrides: field -> raw flag value
    settings.cache_type_k, settings.source("cache_type_k")   # 'q8_0', Source(kind='flag', ...)

Settings are plain data: the server, the runtime and the measurement verbs read them;
this module imports nothing heavy (no engine, no server).
"""
from __future__ import annotations

import dataclasses
import errno
import os
import re
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Callable, Literal, Mapping

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, model_validator

from .cachetypes import FLASH_ATTN_RULE, MAX_SEQUENCES, flash_attn_conflict
from .fsutil import cache_dir
from .kvplan import PLAN_FORMS, is_plan_file, parse_boundary, parse_map, parse_pair
from .values import (HOST_ALLOWED, format_duration, format_size, parse_bool, parse_cache_type, parse_duration, parse_endpoints,
                     parse_flash_attention, parse_gpu_layers, parse_host, parse_int, parse_k_center_setting,
                     parse_origins, parse_port, parse_size, parse_spec_type, parse_split_mode, parse_tensor_split,
                     SPEC_TYPES, SPEC_TYPES_WITH_DRAFT)
from .variables import VARIABLES, closest_variable, unknown_variables

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 11434
#: Smallest context per slot serve runs with (-c, and a request's num_ctx), in tokens.
MIN_CONTEXT = 64


class SettingsError(ValueError):
    """Settings that cannot be used. ``errors`` holds one message per problem, each naming
    the variable or flag, the value given and what is allowed."""

    def __init__(self, errors: list[str]):
        self.errors = list(errors)
        super().__init__("\n".join(self.errors))


class _Unset:
    """Parser result meaning "this value does not set this setting; ask the next source"."""

    def __repr__(self) -> str:
        return "UNSET"


UNSET = _Unset()


@dataclass(frozen=True)
class Auto:
    """Parser result meaning "the value given asks for auto; use ``value``" (Ollama's
    ``OLLAMA_NUM_PARALLEL=0``): the setting gets ``value`` and its Source ``auto=True``."""

    value: Any


@dataclass(frozen=True)
class Source:
    """Where a resolved value came from.

    kind: "flag", "env" or "default"; name: the flag (``--ctk``) or variable
    (``OLLAMA_HOST``), None for a default; raw: the text as given (None for a default);
    auto: the value given means "auto" (``OLLAMA_NUM_PARALLEL=0``), and the setting holds
    what auto resolved to.
    """

    kind: Literal["flag", "env", "default"]
    name: str | None = None
    raw: str | None = None
    auto: bool = False

    def __str__(self) -> str:
        if self.kind == "default":
            return "default"
        if self.auto:
            return f"auto: {self.name}={self.raw}"
        return f"{self.kind} {self.name}"

    def what(self) -> str:
        """The flag or variable with its value as error messages name it: ``-np '0'``,
        ``OLLAMA_HOST='garbage'``; ``default`` for a default."""
        if self.kind == "default":
            return "default"
        return f"{self.name} {self.raw!r}" if self.kind == "flag" else f"{self.name}={self.raw!r}"

    def describe(self) -> str:
        """``flag --ctk='q8_0'``, ``env TQGGUF_HOST='0.0.0.0'`` or ``default``."""
        if self.kind == "default":
            return "default"
        return f"{self.kind} {self.name}={self.raw!r}"


# ----------------------------------------------------------------------------------------
# Field parsers: one setting's text -> its value, on top of tqgguf.values (ValueError says
# what is allowed; UNSET passes to the next source).


def _kv_boundary(value: Any) -> str:
    n, k, v = parse_boundary(value)
    return f"{n}:{k}/{v}"


def _kv_swa(value: Any) -> str | None:
    s = str(value).strip()
    if s.lower() in ("", "none", "off"):
        return None
    k, v = parse_pair(s, "--kv-swa")
    return f"{k}/{v}"


def _kv_plan(value: Any) -> str | None:
    s = str(value).strip()
    if not s:
        return None
    if is_plan_file(s):
        p = Path(os.path.expanduser(s))
        if not p.is_file():
            raise ValueError(f"no such plan file {p}; allowed: {PLAN_FORMS}")
        return str(p)
    return ";".join(str(e) for e in parse_map(s))


def _rpc(value: Any) -> str:
    return ",".join(str(e) for e in parse_endpoints(value))


def _devices(value: Any) -> str:
    names = [x.strip() for x in str(value).split(",")]
    if any(not re.fullmatch(r"[A-Za-z0-9_.:\[\]-]+", n) for n in names):
        raise ValueError("not a list of device names; allowed: none, or names as `tqgguf info` lists them, "
                         "comma separated (e.g. CUDA0,RPC0)")
    return ",".join(names)


def _host_part(value: Any) -> Any:
    return parse_host(value).host


def _port_part(value: Any) -> Any:
    port = parse_host(value).port
    return UNSET if port is None else port


#: The parallel slots of ``OLLAMA_NUM_PARALLEL=0`` (auto): Ollama's ``max(NumParallel, 1)``
#: (server/sched.go, ollama/ollama commit fb30760, 2026-08-21; so since v0.11.5, while earlier
#: releases tried 4, later 2, and fell back to 1 when memory was short).
AUTO_NUM_PARALLEL = 1
#: Models kept loaded per GPU for ``OLLAMA_MAX_LOADED_MODELS=0`` (auto): Ollama's
#: ``defaultModelsPerGPU`` (server/sched.go, same commit), times the GPU count, 3 on the CPU.
MODELS_PER_GPU = 3
MAX_LOADED_MODELS = 64


def _num_parallel(value: Any) -> Any:
    """A variable's slots: 1 to MAX_SEQUENCES, or 0 = auto (as Ollama: AUTO_NUM_PARALLEL)."""
    try:
        n = parse_int(value, 0, MAX_SEQUENCES)
    except ValueError as e:
        raise ValueError(f"{e} (0 = auto, as in Ollama: {AUTO_NUM_PARALLEL})") from None
    return Auto(AUTO_NUM_PARALLEL) if n == 0 else n


def _num_parallel_flag(value: Any) -> int:
    """``-np``: 1 to MAX_SEQUENCES. llama-server refuses ``-np 0``, and its ``-np -1`` (auto:
    4 slots in one unified KV cache) is not how serve sizes its slots (each its own -c)."""
    try:
        return parse_int(value, 1, MAX_SEQUENCES)
    except ValueError as e:
        raise ValueError(f"{e} (as llama-server's -np; auto is the variable's 0: "
                         f"TQGGUF_NUM_PARALLEL=0 or OLLAMA_NUM_PARALLEL=0)") from None


def _max_loaded_models(value: Any) -> Any:
    """1 to MAX_LOADED_MODELS, or 0 = auto (kept as 0 here: serve resolves it with
    :func:`auto_max_loaded_models` once it knows the GPUs its llama-server lists)."""
    try:
        n = parse_int(value, 0, MAX_LOADED_MODELS)
    except ValueError as e:
        raise ValueError(f"{e} (0 = auto, as in Ollama: {MODELS_PER_GPU} per GPU, {MODELS_PER_GPU} on the CPU)") from None
    return Auto(0) if n == 0 else n


def auto_max_loaded_models(n_gpus: int) -> int:
    """What ``OLLAMA_MAX_LOADED_MODELS=0`` (auto) resolves to with ``n_gpus`` GPUs: Ollama's
    ``defaultModelsPerGPU * max(len(gpus), 1)`` (server/sched.go), i.e. 3 per GPU, 3 on the CPU."""
    return MODELS_PER_GPU * max(int(n_gpus), 1)


#: Seconds serve waits for the next part of a request body before it answers 408 and closes
#: the connection: nginx's ``client_body_timeout`` (60 s, between two reads, not for the whole
#: body). Ollama sets no limit (Go's ``http.Server`` with ReadTimeout 0), uvicorn has none for
#: bodies, and llama-server's ``--timeout`` is 600 s; 60 s is 100x the time a 32 MiB body
#: (TQGGUF_MAX_REQUEST_BODY) needs between chunks on a slow 1 Mbit/s link (64 KiB: 0.5 s).
DEFAULT_BODY_TIMEOUT_S = 60.0


#: What TQGGUF_BODY_TIMEOUT takes (its errors say it): Go durations and seconds as keep-alive's,
#: but 0 is "no limit" and a negative value means nothing, so it is refused.
BODY_TIMEOUT_ALLOWED = "a duration like 60s, 5m, 500ms, a number of seconds (60), or 0 for no limit"


def _body_timeout(value: Any) -> float:
    """TQGGUF_BODY_TIMEOUT's value in seconds (0: no limit). Raises ValueError, naming
    :data:`BODY_TIMEOUT_ALLOWED`, for a value that is not a duration, one too long, and a
    negative one (keep-alive's "forever" has no meaning for a wait, and "no limit" is 0)."""
    try:
        secs = parse_duration(value)
    except ValueError as e:  # parse_duration's reason, without its keep-alive advice
        raise ValueError(f"{str(e).split(';')[0].split('. ')[0]}; allowed: {BODY_TIMEOUT_ALLOWED}") from None
    if secs < 0:
        raise ValueError(f"a negative wait; allowed: {BODY_TIMEOUT_ALLOWED}")
    return abs(secs)  # -0s: 0.0


def default_models_dir() -> Path:
    """``<cache>/models``, with ``<cache>`` from tqgguf.fsutil.cache_dir (``TQGGUF_CACHE``)."""
    return cache_dir() / "models"


def _text_file(value: Any) -> Path:
    p = Path(os.path.expanduser(str(value).strip()))
    if p.is_dir():
        raise ValueError("is a directory; allowed: the path of a UTF-8 text file")
    return p


def _executable(value: Any) -> Path:
    p = Path(os.path.expanduser(str(value).strip()))
    if not p.is_file() or not os.access(p, os.X_OK):
        raise ValueError("is not an executable file; allowed: the path of a llama-server binary "
                         "(e.g. one built by `tqgguf build`)")
    return p


def _models_dir(value: Any) -> Path:
    p = Path(os.path.expanduser(str(value).strip()))
    if p.exists() and not p.is_dir():
        raise ValueError("exists and is not a directory; allowed: a directory path")
    return p


def _draft_model(value: Any) -> str:
    s = str(value).strip()
    if not s:
        return UNSET  # type: ignore[return-value]
    return s


def _mmproj(value: Any) -> Path:
    p = Path(os.path.expanduser(str(value).strip()))
    if not p.is_file():
        raise ValueError("is not a file; allowed: the path of a multimodal projector GGUF (mmproj-*.gguf, "
                         "general.architecture clip)")
    return p


@dataclass(frozen=True)
class Var:
    """How one setting is read: ``flags`` are (override key, flag text) pairs, highest
    first; ``env`` the variables, highest first; ``parse`` turns a raw value into the
    setting's value (ValueError on bad input, UNSET to pass to the next source);
    ``flag_parse`` maps an override key to its own parser (``--port`` takes a bare port,
    while a port inside ``--host`` is parsed as an address)."""

    flags: tuple[tuple[str, str], ...]
    env: tuple[str, ...]
    parse: Callable[[Any], Any]
    flag_parse: tuple[tuple[str, Callable[[Any], Any]], ...] = ()

    def parser_for(self, src: "Source", key: str | None) -> Callable[[Any], Any]:
        if src.kind == "flag" and key is not None:
            return dict(self.flag_parse).get(key, self.parse)
        return self.parse


_KV_K_ENV = ("TQGGUF_KV_CACHE_TYPE_K", "TQGGUF_KV_CACHE_TYPE", "OLLAMA_KV_CACHE_TYPE")
_KV_V_ENV = ("TQGGUF_KV_CACHE_TYPE_V", "TQGGUF_KV_CACHE_TYPE", "OLLAMA_KV_CACHE_TYPE")
_HOST_ENV = ("TQGGUF_HOST", "OLLAMA_HOST")


class Settings(BaseModel):
    """Every tqgguf setting, resolved. Build it with :func:`resolve_settings`, which also
    records each value's :class:`Source` (``settings.source(name)``).

    Constructing it directly validates values with the same parsers (strings are parsed,
    e.g. ``Settings(keep_alive="5m")``); the sources are then all "default".
    """

    model_config = ConfigDict(frozen=True)

    cache_type_k: Annotated[str, Var((("cache_type_k", "--ctk"),), _KV_K_ENV, parse_cache_type)] = Field(
        "f16", description="K cache type (ggml name)")
    cache_type_v: Annotated[str, Var((("cache_type_v", "--ctv"),), _KV_V_ENV, parse_cache_type)] = Field(
        "f16", description="V cache type (ggml name); a quantized V needs flash attention")
    flash_attention: Annotated[str, Var((("flash_attention", "-fa"),),
                                        ("TQGGUF_FLASH_ATTENTION", "OLLAMA_FLASH_ATTENTION"),
                                        parse_flash_attention)] = Field(
        "auto", description="flash attention: on, off or auto (auto = on for every backend tqgguf builds)")
    attn_rotation: Annotated[bool, Var((("attn_rotation", "--rot/--no-rot"),), ("TQGGUF_ATTN_ROTATION",),
                                       parse_bool)] = Field(
        True, description="Hadamard rotation of Q/K/V for quantized caches (off = LLAMA_ATTN_ROT_DISABLE=1)")
    k_center: Annotated[str, Var((("k_center", "--k-center"),), ("TQGGUF_K_CENTER",), parse_k_center_setting)] = Field(
        "auto", description="K centering: auto = full when the model has attn_k.bias and K is quantized "
                           "(bias for sliding-window models and serve -np > 1), else off; full = the cache stores k - RoPE(attn_k.bias), added back per cell; "
                           "bias/calib = the cache stores k - m (m: slow RoPE part of the bias, or the mean "
                           "calibration key); attention is unchanged, a quantized K gains range")
    kv_boundary: Annotated[str | None, Var((("kv_boundary", "--kv-boundary"),), ("TQGGUF_KV_BOUNDARY",),
                                           _kv_boundary)] = Field(
        None, description="first and last N layers at K/V: N[:K/V] (default K/V q8_0/q8_0; 0 = none)")
    kv_swa: Annotated[str | None, Var((("kv_swa", "--kv-swa"),), ("TQGGUF_KV_SWA",), _kv_swa)] = Field(
        None, description="K/V types of sliding-window layers: K/V or one type for both (none = -ctk/-ctv)")
    kv_plan: Annotated[str | None, Var((("kv_plan", "--kv-plan"),), ("TQGGUF_KV_PLAN",), _kv_plan)] = Field(
        None, description="per-layer K/V types: a map LAYERS:K/V[;...] (e.g. 0-1,22-23:q8_0/q8_0; LAYERS may be "
                          "swa) or a plan file from tqgguf mix")
    n_gpu_layers: Annotated[str, Var((("n_gpu_layers", "-ngl"),), ("TQGGUF_N_GPU_LAYERS",), parse_gpu_layers)] = Field(
        "auto", description="layers offloaded to GPUs and RPC workers: auto (as many as fit; the CPU when there is "
                            "no GPU or worker), all, or a number (0 = CPU only)")
    rpc: Annotated[str | None, Var((("rpc", "--rpc"),), ("TQGGUF_RPC",), _rpc)] = Field(
        None, description="RPC workers (tqgguf rpc-server) as host:port[,host:port...]; each is one more device")
    split_mode: Annotated[str, Var((("split_mode", "-sm"),), ("TQGGUF_SPLIT_MODE",), parse_split_mode)] = Field(
        "layer", description="split over several devices: none (one device, -mg), layer (layer ranges and their "
                             "KV cache per device), row (weight rows), tensor (every tensor, attention included)")
    tensor_split: Annotated[tuple[float, ...] | None, Var((("tensor_split", "-ts"),), ("TQGGUF_TENSOR_SPLIT",),
                                                          parse_tensor_split)] = Field(
        None, description="share of the model per device, e.g. 3,1 (unset: by free memory)")
    main_gpu: Annotated[int, Var((("main_gpu", "-mg"),), ("TQGGUF_MAIN_GPU",), lambda v: parse_int(v, 0, 255))] = Field(
        0, description="index of the device that holds the model with -sm none, small tensors with -sm row")
    device: Annotated[str | None, Var((("device", "-dev"),), ("TQGGUF_DEVICE",), _devices)] = Field(
        None, description="devices to use, comma separated as `tqgguf info` names them (unset: all; none: the CPU)")
    host: Annotated[str, Var((("host", "--host"),), _HOST_ENV, _host_part)] = Field(
        DEFAULT_HOST, description="interface to listen on")
    port: Annotated[int, Var((("port", "--port"), ("host", "--host")), _HOST_ENV, _port_part,
                             (("port", parse_port),))] = Field(
        DEFAULT_PORT, description="TCP port to listen on")
    context_length: Annotated[int, Var((("context_length", "-c"),),
                                       ("TQGGUF_CONTEXT_LENGTH", "OLLAMA_CONTEXT_LENGTH"),
                                       lambda v: parse_int(v, MIN_CONTEXT, 1 << 24))] = Field(
        4096, description="context length in tokens, per slot")
    num_parallel: Annotated[int, Var((("num_parallel", "-np"),), ("TQGGUF_NUM_PARALLEL", "OLLAMA_NUM_PARALLEL"),
                                     _num_parallel, (("num_parallel", _num_parallel_flag),))] = Field(
        1, description="parallel request slots (each its own context and KV cache); 0 in a variable = auto "
                       f"(as Ollama: {AUTO_NUM_PARALLEL})")
    keep_alive: Annotated[float, Var((("keep_alive", "--keep-alive"),), ("TQGGUF_KEEP_ALIVE", "OLLAMA_KEEP_ALIVE"),
                                     parse_duration)] = Field(
        300.0, description="seconds an idle model stays loaded (-1 = forever, 0 = unload after each request)")
    models: Annotated[Path, Var((), ("TQGGUF_MODELS",), _models_dir)] = Field(
        default_factory=default_models_dir, description="directory of tqgguf's downloaded test models")
    # Ollama's own store (manifests + blobs), read by tqgguf.ollama_store; never tqgguf's download
    # directory: its layout is not a directory of GGUF files (envconfig.Models in Ollama's envconfig/config.go)
    ollama_models: Annotated[Path, Var((), ("OLLAMA_MODELS",), _models_dir)] = Field(
        default_factory=lambda: Path.home() / ".ollama" / "models",
        description="Ollama's model store (manifests/ and blobs/), served by name")

    text: Annotated[Path | None, Var((("text", "-f"),), ("TQGGUF_TEXT",), _text_file)] = Field(
        None, description="evaluation text of ppl and sweep (unset: WikiText-2 test if found, else a built-in corpus)")

    llama_server: Annotated[Path | None, Var((), ("TQGGUF_LLAMA_SERVER",), _executable)] = Field(
        None, description="llama-server binary that serve runs (unset: the one `tqgguf build` installed)")
    llama_server_port: Annotated[int, Var((), ("TQGGUF_LLAMA_SERVER_PORT",), lambda v: parse_int(v, 0, 65535))] = Field(
        0, description="loopback port of serve's llama-server child (0 = a free one)")
    max_context: Annotated[int, Var((("max_context", "--max-ctx"),), ("TQGGUF_MAX_CONTEXT_LENGTH",),
                                    lambda v: parse_int(v, 0, 1 << 24))] = Field(
        0, description="largest per-slot context a request's options.num_ctx may reload the model with "
                       "(0 = the model's training context)")
    max_loaded_models: Annotated[int, Var((), ("TQGGUF_MAX_LOADED_MODELS", "OLLAMA_MAX_LOADED_MODELS"),
                                          _max_loaded_models)] = Field(
        3, description="models serve keeps loaded at once; the least recently used idle one unloads for another "
                       f"(0 = auto, as Ollama: {MODELS_PER_GPU} per GPU, {MODELS_PER_GPU} on the CPU)")
    max_queue: Annotated[int, Var((), ("TQGGUF_MAX_QUEUE", "OLLAMA_MAX_QUEUE"), lambda v: parse_int(v, 0, 1 << 20))] = Field(
        512, description="requests that may wait, as in Ollama's queue, for a model to load while every loaded model "
                         "is busy and the max loaded models are loaded; beyond them: 503 'server busy' (0 = none wait)")
    origins: Annotated[tuple[str, ...], Var((), ("TQGGUF_ORIGINS", "OLLAMA_ORIGINS"), parse_origins)] = Field(
        (), description="browser origins serve allows besides Ollama's defaults (localhost, 127.0.0.1, 0.0.0.0 with "
                        "any port; app://, file://, tauri://, vscode-webview://, vscode-file://); '*' = every origin")
    # 32 MiB: a 128k-token prompt is ~0.5 MB of text (~4 bytes a token), ~1 MB as escaped JSON or as
    # /api/generate's context of token ids; 32 MiB leaves 30x that for chat histories, tool schemas and
    # embedding batches and a few images (a base64 photo of 1 MP is ~0.3-1 MB) while bounding what one request may hold
    max_request_body: Annotated[int, Var((), ("TQGGUF_MAX_REQUEST_BODY",), parse_size)] = Field(
        32 << 20, description="largest request body serve accepts, in bytes (larger: 413, read no further)")

    # speculative decoding and vision (serve): llama-server's -md, -ctkd, -ctvd, --spec-draft-n-max/-min,
    # -ngld, --spec-type, --mmproj
    draft_model: Annotated[str | None, Var((("draft_model", "-md"),), ("TQGGUF_DRAFT_MODEL",), _draft_model)] = Field(
        None, description="draft model for speculative decoding: a GGUF path or a model name (unset: none)")
    cache_type_k_draft: Annotated[str, Var((("cache_type_k_draft", "-ctkd"),), ("TQGGUF_KV_CACHE_TYPE_K_DRAFT",),
                                           parse_cache_type)] = Field(
        "f16", description="K cache type of the draft model (ggml name)")
    cache_type_v_draft: Annotated[str, Var((("cache_type_v_draft", "-ctvd"),), ("TQGGUF_KV_CACHE_TYPE_V_DRAFT",),
                                           parse_cache_type)] = Field(
        "f16", description="V cache type of the draft model (ggml name); a quantized V needs flash attention")
    draft_max: Annotated[int | None, Var((("draft_max", "--spec-draft-n-max"),), ("TQGGUF_DRAFT_MAX",),
                                         lambda v: parse_int(v, 0, 1024))] = Field(
        None, description="most tokens the draft proposes per step (unset: llama-server's default, 3)")
    draft_min: Annotated[int | None, Var((("draft_min", "--spec-draft-n-min"),), ("TQGGUF_DRAFT_MIN",),
                                         lambda v: parse_int(v, 0, 1024))] = Field(
        None, description="fewest draft tokens worth verifying (unset: llama-server's default, 0)")
    n_gpu_layers_draft: Annotated[str | None, Var((("n_gpu_layers_draft", "-ngld"),), ("TQGGUF_N_GPU_LAYERS_DRAFT",),
                                                  parse_gpu_layers)] = Field(
        None, description="draft model layers offloaded: auto, all or a number (unset: as -ngl)")
    spec_type: Annotated[str | None, Var((("spec_type", "--spec-type"),), ("TQGGUF_SPEC_TYPE",), parse_spec_type)] = Field(
        None, description="speculative decoding types, a comma list of " + ", ".join(SPEC_TYPES)
                          + " (unset: draft-simple with a draft model, else none)")
    mmproj: Annotated[Path | None, Var((("mmproj", "--mmproj"),), ("TQGGUF_MMPROJ",), _mmproj)] = Field(
        None, description="multimodal projector GGUF of the served model, for images (unset: text only)")
    body_timeout: Annotated[float, Var((), ("TQGGUF_BODY_TIMEOUT",), _body_timeout)] = Field(
        DEFAULT_BODY_TIMEOUT_S, description="longest wait for the next part of a request body (a client that declared "
                                            "more than it sends: 408, connection closed; 0 = no limit, as Ollama)")

    _sources: dict[str, Source] = PrivateAttr(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _parse_raw(cls, data: Any) -> Any:
        if not isinstance(data, Mapping):
            return data
        out, errors = dict(data), []
        for name, value in data.items():
            var = _var(name) if name in cls.model_fields else None
            if var is None or value is None:
                continue
            try:
                parsed = dict(var.flag_parse).get(name, var.parse)(value)
            except ValueError as e:
                errors.append(f"{name}={value!r}: {e}")
                continue
            if isinstance(parsed, Auto):
                parsed = parsed.value
            if parsed is not UNSET:
                out[name] = parsed
        if errors:
            raise ValueError("; ".join(errors))
        return out

    def source(self, name: str) -> Source:
        """The Source of setting ``name`` (``default`` when built without resolve_settings)."""
        if name not in type(self).model_fields:
            raise KeyError(name)
        return self._sources.get(name, Source("default"))

    @property
    def sources(self) -> dict[str, Source]:
        """Source of every setting, by name."""
        return {n: self.source(n) for n in type(self).model_fields}

    def display(self, name: str) -> str:
        """The value of setting ``name`` as text (durations as ``5m``/``forever``)."""
        v = getattr(self, name)
        if v is None:
            return "-"
        if name in ("keep_alive", "body_timeout"):
            return "none" if name == "body_timeout" and v == 0 else format_duration(v)
        if name == "max_request_body":
            return format_size(v)
        if name == "max_loaded_models" and v == 0:
            return f"auto ({MODELS_PER_GPU} per GPU, {MODELS_PER_GPU} on the CPU)"
        if name == "origins":
            return ",".join(v) if v else "-"
        if name == "tensor_split":
            return ",".join(f"{x:g}" for x in v)
        if isinstance(v, bool):
            return "on" if v else "off"
        return str(v)

    def describe(self) -> list[dict[str, Any]]:
        """One dict per setting: name, value (JSON-able), display, source (kind, name, raw,
        auto: the value given asked for auto),
        flags, env (variables, highest first) and description."""
        rows = []
        for name, field in type(self).model_fields.items():
            var = _var(name)
            v = getattr(self, name)
            src = self.source(name)
            rows.append({
                "name": name, "value": str(v) if isinstance(v, Path) else v, "display": self.display(name),
                "source": {"kind": src.kind, "name": src.name, "raw": src.raw, "auto": src.auto}, "source_text": str(src),
                "flags": [f for _, f in var.flags], "env": list(var.env), "description": field.description,
            })
        return rows


def _var(name: str) -> Var:
    for m in Settings.model_fields[name].metadata:
        if isinstance(m, Var):
            return m
    raise KeyError(name)  # pragma: no cover - every field declares a Var


def _check_declarations() -> None:
    for name in Settings.model_fields:
        for env in _var(name).env:
            assert env in VARIABLES, f"{name}: undeclared variable {env}"


_check_declarations()


def _present(environ: Mapping[str, str], name: str) -> str | None:
    v = environ.get(name)
    if v is None or not str(v).strip():
        return None
    return str(v)


def candidates(name: str, cli_overrides: Mapping[str, Any],
               environ: Mapping[str, str]) -> list[tuple[Source, Any, Callable[[Any], Any]]]:
    """Every source that offers a value for setting ``name``, highest precedence first
    (flags, then variables), each with its raw value and the parser for it; the default
    is not included."""
    var = _var(name)
    out: list[tuple[Source, Any, Callable[[Any], Any]]] = []
    for key, flag in var.flags:
        v = cli_overrides.get(key)
        if v is not None:
            src = Source("flag", flag, str(v))
            out.append((src, v, var.parser_for(src, key)))
    for env in var.env:
        v = _present(environ, env)
        if v is not None:
            out.append((Source("env", env, v), v, var.parse))
    return out


def resolve_settings(cli_overrides: Mapping[str, Any] | None = None,
                     environ: Mapping[str, str] | None = None, *, check: bool = True) -> Settings:
    """Resolve every setting from CLI overrides, the environment and the defaults.

    Args:
        cli_overrides: setting name -> raw flag value (string or typed; None = flag not
            given). Keys: the field names of :class:`Settings`; ``host`` may carry a port.
        environ: variables to read (default ``os.environ``).
        check: also check combinations (``-fa off`` with a quantized V cache).
    Returns:
        Settings, with ``settings.source(name)`` telling flag / variable / default.
    Raises:
        SettingsError: listing every bad value (variable or flag, value, what is allowed)
            and bad combinations (naming where each side came from).
    """
    cli_overrides = dict(cli_overrides or {})
    unknown = set(cli_overrides) - {k for n in Settings.model_fields for k, _ in _var(n).flags}
    if unknown:
        raise KeyError(f"unknown setting override(s): {', '.join(sorted(unknown))}")
    environ = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    sources: dict[str, Source] = {}
    errors: list[str] = []
    for name in Settings.model_fields:
        for src, raw, parse in candidates(name, cli_overrides, environ):
            try:
                parsed = parse(raw)
            except ValueError as e:
                what = src.what()
                # a parser that already names the flag and value (kvplan's) is not prefixed again
                msg = str(e) if str(e).startswith(what) else f"{what}: {e}"
                if msg not in errors:
                    errors.append(msg)
                break
            if parsed is UNSET:
                continue
            if isinstance(parsed, Auto):
                parsed, src = parsed.value, dataclasses.replace(src, auto=True)
            values[name], sources[name] = parsed, src
            break
    if errors:
        raise SettingsError(errors)
    settings = Settings.model_construct(**{**Settings().model_dump(), **values})
    settings._sources = sources
    if check:
        check_settings(settings)
    return settings


def check_listen_address(settings: Settings) -> None:
    """Check that serve can listen where ``host`` says: the name resolves and the address
    is one of this machine's (a test bind to a free port of it). A port in use is not
    checked (it is state, not a bad value: serve reports it when it binds).

    Raises SettingsError naming the flag or variable the host came from, its value and
    what is allowed (the same message from ``tqgguf env`` and ``tqgguf serve``)."""
    host, src = settings.host, settings.source("host")
    where = src.what() if src.kind != "default" else f"host {host!r} (default)"
    try:
        infos = socket.getaddrinfo(host, 0, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (socket.gaierror, UnicodeError) as e:
        why = getattr(e, "strerror", None) or str(e)
        raise SettingsError([f"{where}: cannot resolve host {host!r} ({why}); allowed: a host name or address "
                             f"of this machine ({HOST_ALLOWED}), e.g. 127.0.0.1 or 0.0.0.0"]) from None
    family, type_, proto, _, addr = infos[0]
    with socket.socket(family, type_, proto) as sock:
        try:
            sock.bind(addr)
        except OSError as e:
            if e.errno == errno.EADDRNOTAVAIL:
                raise SettingsError([f"{where}: address {addr[0]} is not one of this machine's; allowed: an address "
                                     "of this machine, e.g. 127.0.0.1, 0.0.0.0 (all interfaces) or a local "
                                     "interface's address"]) from None
            # other errors (permissions, ...) concern the port; serve reports them when it binds


def setting(name: str, environ: Mapping[str, str] | None = None) -> Any:
    """The value of one setting from the variables and the default alone (no flags), for
    library code that needs a single setting (e.g. ``setting("models")``).

    Only this setting's variables are read, so a bad value elsewhere cannot break it.
    Raises KeyError for an unknown name, SettingsError for a bad value (naming the
    variable, the value and what is allowed).
    """
    if name not in Settings.model_fields:
        raise KeyError(name)
    environ = os.environ if environ is None else environ
    for src, raw, parse in candidates(name, {}, environ):
        try:
            value = parse(raw)
        except ValueError as e:
            raise SettingsError([f"{src.what()}: {e}"]) from None
        if isinstance(value, Auto):
            return value.value
        if value is not UNSET:
            return value
    return Settings.model_fields[name].get_default(call_default_factory=True)


def check_settings(settings: Settings) -> None:
    """Check combinations: ``-fa off`` with a quantized V cache, the target's or the draft
    model's (llama.cpp needs flash attention for it); a ``--spec-type`` that needs a draft
    model without one, and a draft model no ``--spec-type`` uses. Raises SettingsError
    naming where each value came from."""
    if flash_attn_conflict(settings.flash_attention, settings.cache_type_v):
        fa_src, v_src = settings.source("flash_attention"), settings.source("cache_type_v")
        raise SettingsError([
            f"flash attention is off (from {fa_src.describe()}) but the V cache type "
            f"{settings.cache_type_v} (from {v_src.describe()}) is quantized; {FLASH_ATTN_RULE}"])
    if settings.draft_model and flash_attn_conflict(settings.flash_attention, settings.cache_type_v_draft):
        fa_src, v_src = settings.source("flash_attention"), settings.source("cache_type_v_draft")
        raise SettingsError([
            f"flash attention is off (from {fa_src.describe()}) but the draft model's V cache type "
            f"{settings.cache_type_v_draft} (from {v_src.describe()}) is quantized; {FLASH_ATTN_RULE} (-ctvd)"])
    spec = settings.spec_type.split(",") if settings.spec_type else []
    needs = [t for t in spec if t in SPEC_TYPES_WITH_DRAFT]
    if needs and not settings.draft_model:
        raise SettingsError([f"--spec-type {settings.spec_type} (from {settings.source('spec_type').describe()}): "
                             f"{needs[0]} needs a draft model; give one with -md/--model-draft or TQGGUF_DRAFT_MODEL, "
                             f"or use a type without one (draft-mtp, ngram-*)"])
    if settings.draft_model and spec and not any(t in SPEC_TYPES_WITH_DRAFT for t in spec):
        raise SettingsError([f"draft model {settings.draft_model} (from {settings.source('draft_model').describe()}) "
                             f"with --spec-type {settings.spec_type} (from {settings.source('spec_type').describe()}): "
                             f"llama-server would load the draft and never use it; add draft-simple (the default "
                             f"with a draft model) or leave the draft model out"])


def settings_report(settings: Settings, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """JSON-able report for ``tqgguf env --json``: settings (value, source with its auto flag, flags,
    variables, description), variables (value or None, description), unknown
    variables (``unknown_variables``: ``TQGGUF_*``, near-miss ``OLLAMA_*``) and, for each, the closest declared name (did_you_mean; None
    when none is close)."""
    environ = os.environ if environ is None else environ
    return {
        "settings": {r.pop("name"): r for r in settings.describe()},
        "variables": {k: {"value": _present(environ, k), "description": d} for k, d in VARIABLES.items()},
        "unknown_variables": unknown_variables(environ),
        "did_you_mean": {k: closest_variable(k) for k in unknown_variables(environ)},
    }


def setting_help(name: str) -> str:
    """Help text of setting ``name`` for a CLI option, from its declaration: the
    description, then ``[env VAR, ...; default X]`` (no default part when unset)."""
    field = Settings.model_fields[name]
    desc = field.description[:1].upper() + field.description[1:]
    default = Settings.model_construct().display(name) if field.default_factory is None else str(field.default_factory())
    parts = ([f"env {', '.join(_var(name).env)}"] if _var(name).env else []) + \
        ([f"default {default}"] if default != "-" else [])
    return f"{desc} [{'; '.join(parts)}]."
