"""The settings model: one place that declares every setting, its variables and its flag.

Sources, highest first: CLI flag > ``TQGGUF_*`` variable > ``OLLAMA_*`` variable > default.
Every resolved value remembers where it came from (:class:`Source`), so ``tqgguf env``
and the server's startup log can say "V turbo4 (from TQGGUF_KV_CACHE_TYPE_V)".

Stricter than Ollama: Ollama silently falls back to a default (or to ``true``) when a
variable cannot be parsed; here a bad boolean, number, duration, host or cache type is a
:class:`SettingsError` naming the variable (or flag), the value and what is allowed. An
empty variable counts as unset (as in Ollama). Only the value that wins is parsed: a
variable shadowed by a flag is shown by ``tqgguf env`` but cannot break a run.

Use::

    settings = resolve_settings({"cache_type_k": "q8_0"})   # overrides: field -> raw flag value
    settings.cache_type_k, settings.source("cache_type_k")   # 'q8_0', Source(kind='flag', ...)

Settings are plain data: the server, the runtime and the measurement verbs read them;
this module imports nothing heavy (no engine, no server).
"""
from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Callable, Literal, Mapping

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, model_validator

from .cachetypes import (FLASH_ATTN_MODES, FLASH_ATTN_RULE, KV_CACHE_TYPES, CacheTypeError, check_cache_type,
                         flash_attn_conflict)
from .fsutil import cache_dir
from .kvplan import PLAN_FORMS, is_plan_file, parse_boundary, parse_map, parse_pair

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 11434
#: Smallest context per slot serve runs with (-c, and a request's num_ctx), in tokens.
MIN_CONTEXT = 64

#: Every environment variable tqgguf reads, declared once with its description
#: (like Ollama's ``envconfig``). ``tqgguf env`` lists them all.
VARIABLES: dict[str, str] = {
    "TQGGUF_KV_CACHE_TYPE": "K and V cache type together (like OLLAMA_KV_CACHE_TYPE)",
    "TQGGUF_KV_CACHE_TYPE_K": "K cache type; overrides TQGGUF_KV_CACHE_TYPE for K",
    "TQGGUF_KV_CACHE_TYPE_V": "V cache type; overrides TQGGUF_KV_CACHE_TYPE for V",
    "TQGGUF_FLASH_ATTENTION": "flash attention: on, off, auto or a boolean",
    "TQGGUF_ATTN_ROTATION": "Hadamard rotation of Q/K/V for quantized caches (boolean)",
    "TQGGUF_K_CENTER": "K centering in the engine: auto (default), off, bias, bias:N, full, calib or calib:FILE",
    "TQGGUF_KV_BOUNDARY": "first and last N layers at other K/V types: N[:K/V] (default K/V q8_0/q8_0)",
    "TQGGUF_KV_SWA": "K/V types of the sliding-window layers: K/V or one type for both",
    "TQGGUF_KV_PLAN": "per-layer K/V types: a map like 0-1,22-23:q8_0/q8_0 or a plan file from tqgguf mix",
    "TQGGUF_N_GPU_LAYERS": "layers to offload to GPUs and RPC workers: auto (as many as fit), all, or a number "
                           "(0 = CPU only)",
    "TQGGUF_RPC": "RPC workers (tqgguf rpc-server) to use: host:port[,host:port...]",
    "TQGGUF_SPLIT_MODE": "how a model is split over several devices: none, layer, row or tensor (llama.cpp's -sm)",
    "TQGGUF_TENSOR_SPLIT": "share of the model per device, e.g. 3,1 (llama.cpp's -ts)",
    "TQGGUF_MAIN_GPU": "device index for the whole model with -sm none, for small tensors with -sm row (-mg)",
    "TQGGUF_DEVICE": "devices to offload to, a comma list of names such as CUDA0,RPC0 (none = CPU only; -dev)",
    "TQGGUF_HOST": "address to serve on: host, :port, host:port or http(s)://host:port",
    "TQGGUF_CONTEXT_LENGTH": "context length in tokens, per parallel slot",
    "TQGGUF_NUM_PARALLEL": "number of parallel request slots (each has its own KV cache)",
    "TQGGUF_KEEP_ALIVE": "how long the model stays loaded when idle (5m, 1h, 30s, 0, -1 = forever)",
    "TQGGUF_MODELS": "directory of downloaded models",
    "TQGGUF_TEXT": "evaluation text of ppl and sweep when -f is not given",
    "TQGGUF_LLAMA_SERVER": "llama-server binary tqgguf serve runs (default: the one `tqgguf build` installed)",
    "TQGGUF_LLAMA_SERVER_PORT": "loopback port of serve's first llama-server child (0 = a free one; the "
                                "next models use the following ports)",
    "TQGGUF_MAX_CONTEXT_LENGTH": "largest per-slot context a request's num_ctx may ask for (0 = the model's "
                                 "training context)",
    "TQGGUF_MAX_LOADED_MODELS": "models tqgguf serve keeps loaded at once (like OLLAMA_MAX_LOADED_MODELS)",
    "TQGGUF_MAX_REQUEST_BODY": "largest request body tqgguf serve accepts (32MiB, 64MB, bytes); larger: 413",
    "TQGGUF_DRAFT_MODEL": "draft model of serve's speculative decoding: a GGUF path or a `tqgguf models list` name (-md)",
    "TQGGUF_KV_CACHE_TYPE_K_DRAFT": "K cache type of the draft model (-ctkd; default f16, as llama-server's)",
    "TQGGUF_KV_CACHE_TYPE_V_DRAFT": "V cache type of the draft model (-ctvd; default f16, as llama-server's)",
    "TQGGUF_DRAFT_MAX": "most tokens the draft model proposes per step (--spec-draft-n-max; default llama-server's, 3)",
    "TQGGUF_DRAFT_MIN": "fewest draft tokens worth verifying (--spec-draft-n-min; default llama-server's, 0)",
    "TQGGUF_N_GPU_LAYERS_DRAFT": "draft model layers to offload (-ngld: auto, all, N; default: as -ngl)",
    "TQGGUF_SPEC_TYPE": "speculative decoding types, a comma list (--spec-type; default draft-simple with a draft model)",
    "TQGGUF_MMPROJ": "multimodal projector GGUF of serve's model (--mmproj): images on /api/chat, /api/generate and "
                     "/v1/chat/completions",
    "OLLAMA_KV_CACHE_TYPE": "Ollama's K and V cache type; used when no TQGGUF_KV_CACHE_TYPE* is set",
    "OLLAMA_FLASH_ATTENTION": "Ollama's flash attention switch; used when TQGGUF_FLASH_ATTENTION is unset",
    "OLLAMA_HOST": "Ollama's listen address; used when TQGGUF_HOST is unset",
    "OLLAMA_CONTEXT_LENGTH": "Ollama's context length; used when TQGGUF_CONTEXT_LENGTH is unset",
    "OLLAMA_NUM_PARALLEL": "Ollama's parallel requests; used when TQGGUF_NUM_PARALLEL is unset",
    "OLLAMA_KEEP_ALIVE": "Ollama's keep-alive duration; used when TQGGUF_KEEP_ALIVE is unset",
    "OLLAMA_MODELS": "Ollama's model directory; used when TQGGUF_MODELS is unset",
    "OLLAMA_MAX_LOADED_MODELS": "Ollama's loaded-model limit; used when TQGGUF_MAX_LOADED_MODELS is unset",
    "TQGGUF_CACHE": "root of tqgguf's caches: sdist, build trees, models (default ~/.cache/tqgguf)",
    "TQGGUF_SDIST": "path of a local copy of the pinned llama-cpp-python sdist (tqgguf build)",
    "TQGGUF_REQUIRE_ENGINE": "tests: 1 makes a missing engine a failure instead of a skip",
}

#: Every ``OLLAMA_*`` variable Ollama itself reads (users set them for Ollama; never a typo
#: of ours): ``envconfig.AsMap`` in ollama/ollama's ``envconfig/config.go`` (commit fb30760,
#: 2026-08-21), plus the ones older releases read (OLLAMA_TMPDIR, OLLAMA_RUNNERS_DIR,
#: OLLAMA_MAX_VRAM, OLLAMA_HOME, OLLAMA_INTEL_GPU) and the client's OLLAMA_API_KEY.
OLLAMA_OWN_VARIABLES: frozenset[str] = frozenset({
    "OLLAMA_DEBUG", "OLLAMA_DEBUG_LOG_REQUESTS", "OLLAMA_GO_TEMPLATE", "OLLAMA_FLASH_ATTENTION",
    "OLLAMA_KV_CACHE_TYPE", "OLLAMA_GPU_OVERHEAD", "OLLAMA_IGPU_ENABLE", "OLLAMA_HOST", "OLLAMA_KEEP_ALIVE",
    "OLLAMA_LLM_LIBRARY", "OLLAMA_LOAD_TIMEOUT", "OLLAMA_MAX_LOADED_MODELS", "OLLAMA_MAX_TRANSFER_STREAMS",
    "OLLAMA_MAX_QUEUE", "OLLAMA_MODELS", "OLLAMA_NO_CLOUD", "OLLAMA_NOHISTORY", "OLLAMA_NOPRUNE",
    "OLLAMA_NUM_PARALLEL", "OLLAMA_ORIGINS", "OLLAMA_SCHED_SPREAD", "OLLAMA_CONTEXT_LENGTH", "OLLAMA_EDITOR",
    "OLLAMA_REMOTES", "OLLAMA_VULKAN", "OLLAMA_AUTH",
    "OLLAMA_TMPDIR", "OLLAMA_RUNNERS_DIR", "OLLAMA_MAX_VRAM", "OLLAMA_HOME", "OLLAMA_INTEL_GPU", "OLLAMA_API_KEY",
})


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
class Source:
    """Where a resolved value came from.

    kind: "flag", "env" or "default"; name: the flag (``--ctk``) or variable
    (``OLLAMA_HOST``), None for a default; raw: the text as given (None for a default).
    """

    kind: Literal["flag", "env", "default"]
    name: str | None = None
    raw: str | None = None

    def __str__(self) -> str:
        if self.kind == "default":
            return "default"
        return f"{self.kind} {self.name}"

    def describe(self) -> str:
        """``flag --ctk='q8_0'``, ``env TQGGUF_HOST='0.0.0.0'`` or ``default``."""
        if self.kind == "default":
            return "default"
        return f"{self.kind} {self.name}={self.raw!r}"


# ----------------------------------------------------------------------------------------
# Parsers: text -> value, raising ValueError with "what is allowed" in the message.


_TRUE = {"1", "t", "true", "yes", "y", "on"}
_FALSE = {"0", "f", "false", "no", "n", "off"}
BOOL_ALLOWED = "1/0, true/false, yes/no, on/off"


def parse_bool(value: Any) -> bool:
    """Parse a boolean: ``1/0, t/f, true/false, yes/no, y/n, on/off`` (any case).

    Raises ValueError for anything else (Ollama would treat it as true).
    """
    if isinstance(value, bool):
        return value
    s = str(value).strip().lower()
    if s in _TRUE:
        return True
    if s in _FALSE:
        return False
    raise ValueError(f"not a boolean; allowed: {BOOL_ALLOWED}")


def parse_int(value: Any, lo: int, hi: int) -> int:
    """Parse a decimal integer in [lo, hi]; raises ValueError otherwise."""
    if isinstance(value, bool):
        raise ValueError(f"not an integer; allowed: an integer from {lo} to {hi}")
    if isinstance(value, int):
        n = value
    else:
        s = str(value).strip()
        if not re.fullmatch(r"[+-]?\d+", s):
            raise ValueError(f"not an integer; allowed: an integer from {lo} to {hi}")
        n = int(s)
    if not lo <= n <= hi:
        raise ValueError(f"out of range; allowed: an integer from {lo} to {hi}")
    return n


_DUR_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_DUR_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")
#: Longest finite keep-alive (100 years): beyond it timers and timestamps overflow.
MAX_DURATION_S = 100 * 365 * 86400
DURATION_ALLOWED = ("a duration like 5m, 1h30m, 30s, 500ms, a number of seconds (300), "
                    "0 (unload at once) or a negative value (-1: forever)")


def parse_duration(value: Any) -> float:
    """Parse an Ollama keep-alive duration to seconds.

    Accepts Go durations (``5m``, ``1h30m``, ``1.5h``, ``300ms``) and plain numbers of
    seconds (``300``, ``-1``, also floats from JSON). Negative means forever and is
    returned as ``-1.0``. Raises ValueError for anything else.
    """
    if isinstance(value, bool):
        raise ValueError(f"not a duration; allowed: {DURATION_ALLOWED}")
    if isinstance(value, (int, float)):
        secs = float(value)
    else:
        s = str(value).strip()
        if re.fullmatch(r"[+-]?\d+(\.\d+)?", s):
            secs = float(s)
        else:
            sign = -1.0 if s.startswith("-") else 1.0
            body = s.lstrip("+-") if s[:1] in "+-" else s
            if not body:
                raise ValueError(f"not a duration; allowed: {DURATION_ALLOWED}")
            pos, total = 0, 0.0
            for m in _DUR_PART.finditer(body):
                if m.start() != pos:
                    break
                total += float(m.group(1)) * _DUR_UNITS[m.group(2)]
                pos = m.end()
            if pos != len(body):
                raise ValueError(f"not a duration; allowed: {DURATION_ALLOWED}")
            secs = sign * total
    if math.isnan(secs) or (math.isinf(secs) and secs > 0):
        raise ValueError(f"not a duration; allowed: {DURATION_ALLOWED}")
    if secs > MAX_DURATION_S:
        raise ValueError(f"{secs:.0f} s is longer than {MAX_DURATION_S // (365 * 86400)} years; "
                         f"use -1 to keep the model loaded forever. Allowed: {DURATION_ALLOWED}")
    return -1.0 if secs < 0 else secs


_SIZE_UNITS = {"": 1, "b": 1, "kb": 1000, "mb": 1000 ** 2, "gb": 1000 ** 3, "kib": 1 << 10, "mib": 1 << 20,
               "gib": 1 << 30, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
SIZE_ALLOWED = "a size in bytes (33554432) or with a unit: 32MiB, 64MB, 512KiB, 1GiB (k/m/g alone = KiB/MiB/GiB)"


def parse_size(value: Any, lo: int = 1 << 10, hi: int = 1 << 40) -> int:
    """Parse a size to bytes: a plain integer, or a number with a unit (``KB``/``MB``/``GB``
    decimal, ``KiB``/``MiB``/``GiB`` and ``k``/``m``/``g`` binary; case-insensitive), in
    [lo, hi]. Raises ValueError naming what is allowed."""
    if isinstance(value, bool):
        raise ValueError(f"not a size; allowed: {SIZE_ALLOWED}")
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*", str(value))
    if not m or m.group(2).lower() not in _SIZE_UNITS:
        raise ValueError(f"not a size; allowed: {SIZE_ALLOWED}")
    n = int(float(m.group(1)) * _SIZE_UNITS[m.group(2).lower()])
    if not lo <= n <= hi:
        raise ValueError(f"out of range; allowed: {format_size(lo)} to {format_size(hi)}")
    return n


def format_size(n: int) -> str:
    """Bytes as the largest binary unit that divides them (``32 MiB``), else bytes."""
    for unit, k in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n % k == 0:
            return f"{n // k} {unit}"
    return f"{n} B"


def format_duration(seconds: float) -> str:
    """Seconds to a short Ollama-style text: ``forever`` (negative), ``0s``, ``5m``, ``1h30m``, ``2.5s``."""
    if seconds < 0:
        return "forever"
    if seconds == 0:
        return "0s"
    if seconds != int(seconds) or seconds < 1:
        return f"{seconds:g}s"
    s = int(seconds)
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    return "".join(f"{v}{u}" for v, u in ((h, "h"), (m, "m"), (sec, "s")) if v) or "0s"


@dataclass(frozen=True)
class HostPort:
    """A parsed listen address. port is None when the text named no port (bare host)."""

    scheme: str
    host: str
    port: int | None


HOST_ALLOWED = ("host, :port, host:port, [ipv6]:port or http(s)://host[:port], "
                "with a port from 1 to 65535")
_HOSTNAME = re.compile(r"[A-Za-z0-9_]([A-Za-z0-9._-]*[A-Za-z0-9_])?")


def parse_host(value: Any) -> HostPort:
    """Parse an address the way Ollama reads ``OLLAMA_HOST``.

    ``0.0.0.0`` (no port: port left to the next source, finally 11434), ``:8080``
    (all interfaces), ``host:port``, ``[::1]:8080``, ``http://host:port``;
    ``http://host`` means port 80 and ``https://host`` 443, as in Ollama. A trailing
    ``/`` is allowed. Raises ValueError for an unknown scheme, a path, a bad port or a
    malformed host (Ollama would silently use its default).
    """
    s = str(value).strip()
    scheme, default_port = "http", None
    if "://" in s:
        scheme, s = s.split("://", 1)
        scheme = scheme.lower()
        if scheme not in ("http", "https"):
            raise ValueError(f"unknown scheme {scheme!r}; allowed: {HOST_ALLOWED}")
        default_port = 80 if scheme == "http" else 443
    s = s.rstrip("/")
    if re.fullmatch(r"\d+", s):
        raise ValueError(f"{s!r} is ambiguous: write :{s} for a port or give a host name; allowed: {HOST_ALLOWED}")
    if "/" in s:
        raise ValueError(f"a path is not allowed; allowed: {HOST_ALLOWED}")
    host, port_text = s, None
    if s.startswith("["):
        end = s.find("]")
        if end < 0:
            raise ValueError(f"unclosed '['; allowed: {HOST_ALLOWED}")
        host, rest = s[1:end], s[end + 1:]
        if rest:
            if not rest.startswith(":"):
                raise ValueError(f"malformed address; allowed: {HOST_ALLOWED}")
            port_text = rest[1:]
    elif s.count(":") == 1:
        host, port_text = s.split(":")
    elif s.count(":") > 1:  # bare IPv6 address
        host = s
    if port_text is not None:
        try:
            port = parse_int(port_text, 1, 65535)
        except ValueError:
            raise ValueError(f"bad port {port_text!r}; allowed: {HOST_ALLOWED}") from None
    else:
        port = default_port
    if host == "":
        if port_text is None:
            raise ValueError(f"empty address; allowed: {HOST_ALLOWED}")
        host = "0.0.0.0"  # ":8080" listens on every interface, as in Ollama
    elif ":" in host:
        if not re.fullmatch(r"[0-9A-Fa-f:.]+", host):
            raise ValueError(f"malformed IPv6 address {host!r}; allowed: {HOST_ALLOWED}")
    elif not _HOSTNAME.fullmatch(host):
        raise ValueError(f"malformed host {host!r}; allowed: {HOST_ALLOWED}")
    return HostPort(scheme, host, port)


def parse_flash_attention(value: Any) -> str:
    """``on``, ``off``, ``auto``, or a boolean (true -> on, false -> off, as Ollama's
    ``OLLAMA_FLASH_ATTENTION=1``). Raises ValueError otherwise."""
    if isinstance(value, bool):
        return "on" if value else "off"
    s = str(value).strip().lower()
    if s in FLASH_ATTN_MODES:
        return s
    try:
        return "on" if parse_bool(s) else "off"
    except ValueError:
        raise ValueError(f"not a flash attention mode; allowed: on, off, auto or a boolean ({BOOL_ALLOWED})") from None


def parse_cache_type(value: Any) -> str:
    """A KV cache type name (case-insensitive) -> canonical name; ValueError lists the valid ones."""
    try:
        return check_cache_type(value)
    except CacheTypeError:
        raise ValueError(f"unknown cache type; allowed: {', '.join(KV_CACHE_TYPES)}") from None


K_CENTER_ALLOWED = ("off, bias, bias:N (N = period threshold in tokens), full, calib, calib:FILE.gguf "
                    "(FILE.gguf: where the calibration vectors are read, or written when missing), "
                    "auto (full when the model's keys carry a bias and K is quantized, else off; bias instead for "
                    "sliding-window models and serve -np > 1)")


class KCenterError(ValueError):
    """A bad ``--k-center`` value or a calibration file that does not fit the model."""


@dataclass(frozen=True)
class KCenter:
    """A parsed ``--k-center`` value.

    mode: "auto", "off", "bias", "full" or "calib" (auto is resolved per model and cache by
    tqgguf.kcenter.resolve_auto); ctx: bias period threshold in tokens (None = the
    model's training context); path: calib file (None = beside the model).
    """

    mode: str = "off"
    ctx: int | None = None
    path: Path | None = None

    def __str__(self) -> str:
        if self.mode == "bias" and self.ctx:
            return f"bias:{self.ctx}"
        if self.mode == "calib" and self.path:
            return f"calib:{self.path}"
        return self.mode

    @property
    def on(self) -> bool:
        return self.mode not in ("off", "auto")


def parse_k_center(value: object) -> KCenter:
    """Parse a ``--k-center`` value (the modes are described in tqgguf.kcenter); None/"" mean off
    (the settings' default is auto).

    Raises KCenterError naming the value and the allowed forms.
    """
    if value is None or isinstance(value, KCenter):
        return value or KCenter()
    if isinstance(value, bool):
        return KCenter("bias" if value else "off")
    s = str(value).strip()
    low = s.lower()
    if low in ("", "off", "0", "false", "no", "none"):
        return KCenter()
    if low == "auto":
        return KCenter("auto")
    if low in ("bias", "on", "1", "true", "yes"):
        return KCenter("bias")
    if low.startswith("bias:"):
        n = s[5:].strip()
        if not re.fullmatch(r"\d+", n) or not 1 <= int(n) < 2**32:
            raise KCenterError(f"{s!r}: the threshold after 'bias:' must be a number of tokens from 1 to "
                               f"{2**32 - 1}; allowed: {K_CENTER_ALLOWED}")
        return KCenter("bias", ctx=int(n))
    if low == "full":
        return KCenter("full")
    if low == "calib":
        return KCenter("calib")
    if low.startswith("calib:") and s[6:].strip():
        path = Path(os.path.expanduser(s[6:].strip()))
        if path.suffix.lower() != ".gguf":
            raise KCenterError(f"{s!r}: calib:FILE names the GGUF file that holds the calibration vectors (read "
                               f"if it exists, written otherwise), not a text; give it a .gguf name. "
                               f"Allowed: {K_CENTER_ALLOWED}")
        return KCenter("calib", path=path)
    raise KCenterError(f"{s!r} is not a K-center mode; allowed: {K_CENTER_ALLOWED}")


def parse_k_center_setting(value: Any) -> str:
    """A ``--k-center`` value (off, bias, bias:N, full, calib, calib:FILE; booleans mean
    bias/off) in canonical form; ValueError (KCenterError) names what is allowed."""
    return str(parse_k_center(value))


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


#: llama.cpp's ``-sm/--split-mode`` values (common/arg.cpp), in its order.
SPLIT_MODES = ("none", "layer", "row", "tensor")
GPU_LAYERS_ALLOWED = "auto (as many layers as fit the devices), all, or a number of layers from 0 (0 = CPU only)"
ENDPOINT_ALLOWED = "host:port or [ipv6]:port, comma separated (e.g. 127.0.0.1:50052,10.0.0.2:50052)"


def parse_gpu_layers(value: Any) -> str:
    """An ``-ngl`` value in canonical text: ``auto``, ``all`` or a decimal count (``-1`` and
    any count are kept as given; ``-1`` means all, as in llama.cpp). Raises ValueError naming
    what is allowed."""
    s = str(value).strip().lower()
    if s in ("auto", "all"):
        return s
    if s == "-1":
        return "all"
    try:
        return str(parse_int(s, 0, 1 << 20))
    except ValueError:
        raise ValueError(f"not a layer count; allowed: {GPU_LAYERS_ALLOWED}") from None


@dataclass(frozen=True)
class Endpoint:
    """An RPC worker address: ``host`` (name, IPv4 or IPv6 without brackets) and ``port``."""

    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def parse_endpoints(value: Any) -> tuple[Endpoint, ...]:
    """Parse ``--rpc`` text (llama.cpp's form: ``host:port[,host:port...]``) to Endpoints, in
    order. A port is required (llama.cpp's workers have no default on the client side); the
    same worker twice is refused (llama.cpp would register it as two devices over one
    connection). Raises ValueError naming the bad item and what is allowed."""
    items = [x.strip() for x in str(value).split(",")]
    if not any(items):
        raise ValueError(f"no worker given; allowed: {ENDPOINT_ALLOWED}")
    out: list[Endpoint] = []
    for item in items:
        if not item:
            raise ValueError(f"an empty item in the list; allowed: {ENDPOINT_ALLOWED}")
        if "://" in item or "/" in item:
            raise ValueError(f"{item!r}: no scheme or path; allowed: {ENDPOINT_ALLOWED}")
        if item.startswith("["):
            host, _, rest = item[1:].partition("]")
            port_text = rest[1:] if rest.startswith(":") else None
            if not re.fullmatch(r"[0-9A-Fa-f:.]+", host or "-"):
                raise ValueError(f"{item!r}: malformed IPv6 address; allowed: {ENDPOINT_ALLOWED}")
        else:
            host, sep, port_text = item.rpartition(":")
            if not sep or ":" in host:
                raise ValueError(f"{item!r}: a port is required; allowed: {ENDPOINT_ALLOWED}")
            if not _HOSTNAME.fullmatch(host):
                raise ValueError(f"{item!r}: malformed host {host!r}; allowed: {ENDPOINT_ALLOWED}")
        try:
            port = parse_int(port_text if port_text is not None else "", 1, 65535)
        except ValueError:
            raise ValueError(f"{item!r}: bad port; allowed: {ENDPOINT_ALLOWED}") from None
        ep = Endpoint(host, port)
        if ep in out:
            raise ValueError(f"{item!r} is given twice; allowed: {ENDPOINT_ALLOWED}")
        out.append(ep)
    return tuple(out)


def _rpc(value: Any) -> str:
    return ",".join(str(e) for e in parse_endpoints(value))


def parse_split_mode(value: Any) -> str:
    """``-sm`` value: none, layer, row or tensor (case-insensitive); ValueError otherwise."""
    s = str(value).strip().lower()
    if s not in SPLIT_MODES:
        raise ValueError(f"unknown split mode; allowed: {', '.join(SPLIT_MODES)}")
    return s


def parse_tensor_split(value: Any) -> tuple[float, ...]:
    """``-ts`` value: proportions per device, separated by ``,`` or ``/`` as llama.cpp takes
    them (``3,1``, ``3/1``); each a finite number >= 0, not all 0. Whether the count matches
    the devices is checked when the devices are known (tqgguf.devices). ValueError otherwise."""
    parts = [p.strip() for p in re.split(r"[,/]", str(value))]
    allowed = "numbers >= 0 separated by , or / (e.g. 3,1), one per device, not all 0"
    try:
        vals = tuple(float(p) for p in parts)
    except ValueError:
        raise ValueError(f"not a list of proportions; allowed: {allowed}") from None
    if any(not math.isfinite(v) or v < 0 for v in vals) or not any(vals):
        raise ValueError(f"not a list of proportions; allowed: {allowed}")
    return vals


def _devices(value: Any) -> str:
    names = [x.strip() for x in str(value).split(",")]
    if any(not re.fullmatch(r"[A-Za-z0-9_.:\[\]-]+", n) for n in names):
        raise ValueError("not a list of device names; allowed: none, or names as `tqgguf info` lists them, "
                         "comma separated (e.g. CUDA0,RPC0)")
    return ",".join(names)


def _host_part(value: Any) -> Any:
    return parse_host(value).host


def parse_port(value: Any) -> int:
    """A TCP port, 1 to 65535 (ValueError otherwise)."""
    return parse_int(value, 1, 65535)


def _port_part(value: Any) -> Any:
    port = parse_host(value).port
    return UNSET if port is None else port


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


#: llama-server's ``--spec-type`` names in the engine tqgguf builds (``common_speculative_type_to_str``
#: in llama.cpp's common/speculative.cpp); the ``draft-*`` ones but draft-mtp run a separate draft model.
SPEC_TYPES: tuple[str, ...] = ("none", "draft-simple", "draft-eagle3", "draft-mtp", "draft-dflash", "draft-dspark",
                               "ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache")
#: The --spec-type values that need a draft model (-md); draft-mtp uses the model's own MTP head.
SPEC_TYPES_WITH_DRAFT: tuple[str, ...] = ("draft-simple", "draft-eagle3", "draft-dflash", "draft-dspark")


def parse_spec_type(value: Any) -> str:
    """A ``--spec-type`` comma list (names from :data:`SPEC_TYPES`, any case) in canonical
    text: lower case, no spaces, no repeats. Raises ValueError naming the unknown name and
    what is allowed."""
    names = [x.strip().lower() for x in str(value).split(",")]
    for n in names:
        if n not in SPEC_TYPES:
            raise ValueError(f"unknown speculative decoding type {n!r}; allowed: a comma list of "
                             f"{', '.join(SPEC_TYPES)}")
    if "none" in names and len(names) > 1:
        raise ValueError("'none' cannot be combined with other types")
    return ",".join(dict.fromkeys(names))


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
                                     lambda v: parse_int(v, 1, 256))] = Field(
        1, description="parallel request slots (each its own context and KV cache)")
    keep_alive: Annotated[float, Var((("keep_alive", "--keep-alive"),), ("TQGGUF_KEEP_ALIVE", "OLLAMA_KEEP_ALIVE"),
                                     parse_duration)] = Field(
        300.0, description="seconds an idle model stays loaded (-1 = forever, 0 = unload after each request)")
    models: Annotated[Path, Var((), ("TQGGUF_MODELS", "OLLAMA_MODELS"), _models_dir)] = Field(
        default_factory=default_models_dir, description="directory of downloaded models")

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
                                          lambda v: parse_int(v, 1, 64))] = Field(
        3, description="models serve keeps loaded at once; the least recently used idle one unloads for another")
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
        if name == "keep_alive":
            return format_duration(v)
        if name == "max_request_body":
            return format_size(v)
        if name == "tensor_split":
            return ",".join(f"{x:g}" for x in v)
        if isinstance(v, bool):
            return "on" if v else "off"
        return str(v)

    def describe(self) -> list[dict[str, Any]]:
        """One dict per setting: name, value (JSON-able), display, source (kind, name, raw),
        flags, env (variables, highest first) and description."""
        rows = []
        for name, field in type(self).model_fields.items():
            var = _var(name)
            v = getattr(self, name)
            src = self.source(name)
            rows.append({
                "name": name, "value": str(v) if isinstance(v, Path) else v, "display": self.display(name),
                "source": {"kind": src.kind, "name": src.name, "raw": src.raw}, "source_text": str(src),
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
                what = f"{src.name} {raw!r}" if src.kind == "flag" else f"{src.name}={raw!r}"
                # a parser that already names the flag and value (kvplan's) is not prefixed again
                msg = str(e) if str(e).startswith(what) else f"{what}: {e}"
                if msg not in errors:
                    errors.append(msg)
                break
            if parsed is UNSET:
                continue
            values[name], sources[name] = parsed, src
            break
    if errors:
        raise SettingsError(errors)
    settings = Settings.model_construct(**{**Settings().model_dump(), **values})
    settings._sources = sources
    if check:
        check_settings(settings)
    return settings


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
            raise SettingsError([f"{src.name}={raw!r}: {e}"]) from None
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


def unknown_variables(environ: Mapping[str, str] | None = None) -> list[str]:
    """Variables that are set but that tqgguf does not read (likely typos), sorted: every
    undeclared ``TQGGUF_*`` (any case: ``tqgguf_models`` too), and an ``OLLAMA_*`` (any case)
    that is close to one tqgguf reads (``closest_variable``) and is not one Ollama reads
    itself (``OLLAMA_OWN_VARIABLES``: users set those for Ollama)."""
    environ = os.environ if environ is None else environ

    def unknown(k: str) -> bool:
        if k in VARIABLES:
            return False
        if k.upper().startswith("TQGGUF_"):
            return True
        return (k.upper().startswith("OLLAMA_") and k not in OLLAMA_OWN_VARIABLES
                and closest_variable(k) is not None)

    return sorted(k for k in environ if unknown(k))


def closest_variable(name: str) -> str | None:
    """The declared variable of the same prefix (``TQGGUF_*``, or ``OLLAMA_*`` for a name
    starting so) closest to ``name`` (a likely typo of it), or None when none is close
    (difflib ratio of the parts after the prefix below 0.75, compared in upper case, as the
    variables are declared): ``TQGGUF_KV_CACHE_TYP`` -> ``TQGGUF_KV_CACHE_TYPE``,
    ``TQGGUF_KV_CACHE_TYPE_k`` -> ``TQGGUF_KV_CACHE_TYPE_K``, ``OLLAMA_KV_CACHE_TYP`` ->
    ``OLLAMA_KV_CACHE_TYPE``."""
    import difflib

    prefix = "OLLAMA_" if name.upper().startswith("OLLAMA_") else "TQGGUF_"
    suffixes = [v[len(prefix):] for v in VARIABLES if v.startswith(prefix)]
    near = difflib.get_close_matches(name.upper().removeprefix(prefix), suffixes, n=1, cutoff=0.75)
    return prefix + near[0] if near else None


def settings_report(settings: Settings, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """JSON-able report for ``tqgguf env --json``: settings (value, source, flags,
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
