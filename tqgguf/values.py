"""Setting values: the parsers that turn a flag's or a variable's text into a value, the
value types they return (:class:`HostPort`, :class:`Endpoint`, :class:`KCenter`) and the
short forms values are shown in (``5m``, ``32 MiB``).

Stricter than Ollama: Ollama silently falls back to a default (or to ``true``) when a
variable cannot be parsed; here every parser raises ValueError whose message says what is
allowed (tqgguf.config adds the variable or flag and the value). Each grammar follows the
tool users know it from: booleans and durations as Ollama's ``envconfig`` reads them (Go
durations), addresses as ``OLLAMA_HOST``, ``-ngl``/``-sm``/``-ts``/``--rpc`` as llama.cpp's
``common/arg.cpp``.

Plain functions of text; imports nothing of ours but the cache-type registry.
"""
from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .cachetypes import FLASH_ATTN_MODES, KV_CACHE_TYPES, CacheTypeError, check_cache_type


#: The most CPU threads ggml runs (GGML_MAX_N_THREADS, ggml/include/ggml.h): its threadpool indexes per-thread
#: arrays of this size, and llama-server given more crashes (-t 100000: SIGSEGV at the threadpool's start).
MAX_THREADS = 512

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


def parse_split_mode(value: Any) -> str:
    """``-sm`` value: none, layer, row or tensor (case-insensitive); ValueError otherwise."""
    s = str(value).strip().lower()
    if s not in SPLIT_MODES:
        raise ValueError(f"unknown split mode; allowed: {', '.join(SPLIT_MODES)}")
    return s


#: What an allowed-origin entry without a ``*`` must start with: gin-contrib/cors's schemes, browser
#: extensions included (Ollama allows them); Ollama refuses to start on any other entry.
ORIGIN_SCHEMES = ("http://", "https://", "chrome-extension://", "safari-extension://", "moz-extension://",
                  "ms-browser-extension://")


def parse_origins(value: Any) -> tuple[str, ...]:
    """``OLLAMA_ORIGINS``: comma-separated browser origins, each exact (``scheme://host[:port]``) or
    with one ``*`` that matches any text (``chrome-extension://*``, ``https://*.example.com``);
    ``*`` alone is every origin. ValueError, as Ollama refuses them (gin-contrib/cors), for more
    than one ``*`` in an entry or an entry with neither a ``*`` nor one of :data:`ORIGIN_SCHEMES`."""
    out = []
    for raw in str(value).split(","):
        e = raw.strip().strip("\"'")
        if not e:
            continue
        if e.count("*") > 1:
            raise ValueError(f"{e!r} has more than one '*' (one wildcard per origin, as in Ollama)")
        if "*" not in e and not e.lower().startswith(ORIGIN_SCHEMES):
            raise ValueError(f"{e!r} is not an origin; allowed: scheme://host[:port] with a scheme of "
                             f"{', '.join(ORIGIN_SCHEMES)}, an entry with one '*' wildcard, or '*' for every origin")
        out.append(e)
    return tuple(out)


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


def parse_port(value: Any) -> int:
    """A TCP port, 1 to 65535 (ValueError otherwise)."""
    return parse_int(value, 1, 65535)


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
