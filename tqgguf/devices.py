"""Devices, RPC workers, and where a model's layers and KV cache live.

One place for llama.cpp's scale-out as tqgguf uses it (``--rpc``, ``-sm``, ``-ts``, ``-mg``,
``-dev``, ``-ngl auto``):

- :func:`probe_worker` talks to a ``ggml-rpc-server`` worker before the engine does: ggml's
  RPC client aborts the process when a worker cannot be reached or speaks another protocol
  (``GGML_ABORT`` in ggml-rpc.cpp), so every worker is checked here first — reachable within
  a timeout, the same protocol version, and the turbo types known with this engine's layout —
  and refused by name with a :class:`WorkerError`.
- :func:`use_workers` registers checked workers as ggml devices (llama.cpp's ``--rpc``:
  ``ggml_backend_rpc_add_server`` + ``ggml_backend_register``, common/arg.cpp).
- :func:`list_devices` lists the devices the engine can offload to; :func:`device_array`
  turns ``-dev`` names into the engine's device list.
- :func:`watch_workers` turns the abort of a worker that dies mid-run into an error that
  names the worker (ggml's abort callback), instead of a core dump.
- :func:`fit_layers` is ``-ngl auto``: as many layers as the devices' free memory holds.
- :func:`parse_placement` reads where llama.cpp put each layer range and how many MiB of
  K and V cache each device holds, from its log (in-process or llama-server's).

The wire facts (command numbers, structure sizes) are those of ggml-rpc.cpp in the pinned
tree (RPC protocol 7.0.0, ggml/include/ggml-rpc.h); ``tests/test_rpc.py`` checks them
against that source.
"""
from __future__ import annotations

import ctypes
import os
import re
import socket
import struct
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from .cachetypes import TURBO_TYPES, ggml_type_id, libggml_base, type_info
from .values import Endpoint, parse_endpoints
from .engine import EngineError, _libggml, dev_api, ensure_engine

#: RPC_PROTO_MAJOR_VERSION / RPC_PROTO_MINOR_VERSION (ggml/include/ggml-rpc.h): a worker must
#: have the same major and a minor no newer than ours (ggml-rpc.cpp negotiate_hello).
RPC_PROTO_MAJOR = 7
RPC_PROTO_MINOR = 0
#: enum rpc_cmd (ggml-rpc.cpp)
RPC_CMD_GET_DEVICE_MEMORY = 11
RPC_CMD_GET_ALLOC_SIZE = 13
RPC_CMD_HELLO = 14
RPC_CMD_DEVICE_COUNT = 15
#: RPC_CONN_CAPS_SIZE (ggml-rpc/transport.h): the HELLO request is these bytes, the reply
#: major, minor, patch, padding and these bytes.
RPC_CONN_CAPS_SIZE = 24
#: sizeof(rpc_tensor), packed (ggml-rpc.cpp): id u64, type u32, buffer u64, ne u32[4], nb u32[4],
#: op u32, op_params i32[16], flags i32, src u64[10], view_src, view_offs, data u64, name[64],
#: use_count i32 — 296 bytes.
RPC_TENSOR_SIZE = 296
GGML_MAX_SRC = 10
#: Row length of the probe tensor: a multiple of every turbo block and of CUDA's
#: MATRIX_ROW_PADDING (512), so a worker's buffer type adds no padding to it.
PROBE_ROW = 512
#: Seconds to wait for a worker's connection and each of its answers.
WORKER_TIMEOUT_S = 5.0


class DeviceError(ValueError):
    """``-dev``, ``-mg``, ``-ts`` or ``--rpc`` values that do not fit the devices there are (a usage error)."""


def check_distinct(endpoints: Iterable[Endpoint]) -> None:
    """Refuse one worker given under two names (``127.0.0.1:50071,localhost:50071``): llama.cpp
    would open two connections to it, and a worker serves one client at a time, so the second
    would wait forever. Names are resolved (getaddrinfo); one that does not resolve is left to
    :func:`probe_worker`. Raises DeviceError naming both."""
    seen: dict[tuple, Endpoint] = {}
    for ep in endpoints:
        try:
            addrs = {(a[4][0], a[4][1]) for a in socket.getaddrinfo(ep.host, ep.port, type=socket.SOCK_STREAM)}
        except OSError:
            continue
        for a in addrs:
            if a in seen and seen[a] != ep:
                raise DeviceError(f"--rpc {seen[a]} and {ep} are the same worker ({a[0]}:{a[1]}); give each worker once")
            seen[a] = ep


class WorkerError(EngineError):
    """An RPC worker that cannot be used; the message names it and says why and what to do."""


@dataclass(frozen=True)
class WorkerInfo:
    """What :func:`probe_worker` learnt: ``endpoint``; ``version`` (major, minor, patch) of its
    RPC protocol; ``memory`` one (free, total) byte pair per device the worker exposes."""

    endpoint: Endpoint
    version: tuple[int, int, int]
    memory: tuple[tuple[int, int], ...]


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("closed the connection")
        buf += chunk
    return buf


def _call(sock: socket.socket, cmd: int, payload: bytes, reply_size: int) -> bytes:
    """One RPC request (``cmd`` u8, size u64, payload) and its reply (size u64, data):
    ggml-rpc.cpp send_rpc_cmd. Raises ConnectionError when the worker closes the connection
    (what it does on a request it cannot serve) or sends a reply of another size."""
    sock.sendall(struct.pack("<BQ", cmd, len(payload)) + payload)
    (size,) = struct.unpack("<Q", _recv_exact(sock, 8))
    if size != reply_size:
        raise ConnectionError(f"answered {size} bytes where {reply_size} were expected")
    return _recv_exact(sock, size)


def _probe_tensor(type_id: int, type_size: int, block: int) -> bytes:
    """A serialized ``rpc_tensor`` of one row of PROBE_ROW values of ggml type ``type_id``,
    with no buffer (the worker sizes it for its default buffer type)."""
    row = PROBE_ROW // block * type_size
    ne = (PROBE_ROW, 1, 1, 1)
    nb = (type_size, row, row, row)
    t = struct.pack("<QIQ4I4II16ii", 1, type_id, 0, *ne, *nb, 0, *([0] * 16), 0)
    t += b"\0" * (8 * GGML_MAX_SRC + 8 * 3 + 64 + 4)
    assert len(t) == RPC_TENSOR_SIZE
    return t


def probe_worker(endpoint: Endpoint | str, timeout: float = WORKER_TIMEOUT_S,
                 types: Iterable[str] = TURBO_TYPES) -> WorkerInfo:
    """Check an RPC worker before the engine connects to it.

    Connects (``timeout`` seconds), does the HELLO handshake, counts its devices, asks each
    device's memory, and asks device 0 the allocation size of one row of each of ``types``
    (default: the turbo types), which must equal this engine's row size: a worker built
    without the turbo types closes the connection (ggml-rpc.cpp deserialize_tensor refuses
    a type id past its GGML_TYPE_COUNT), one with another layout answers another size.
    Needs the engine (type ids and sizes come from the built library).

    Raises:
        WorkerError: nothing listens there, it does not answer within ``timeout`` (a worker
            serves one client at a time: another process may hold it), it speaks another
            protocol version, it has no device, or it lacks a type — the message names the
            worker and what to do.
    """
    ep = parse_endpoints(endpoint)[0] if isinstance(endpoint, str) else endpoint
    start = f"tqgguf rpc-server --port {ep.port}"
    try:
        sock = socket.create_connection((ep.host, ep.port), timeout=timeout)
    except ConnectionRefusedError:
        raise WorkerError(f"no RPC worker at {ep} (connection refused): start one there with `{start}`") from None
    except (socket.timeout, TimeoutError):
        raise WorkerError(f"RPC worker {ep}: no connection within {timeout:g} s (host down or port filtered)") from None
    except OSError as e:
        raise WorkerError(f"RPC worker {ep}: cannot connect ({e.strerror or e})") from None
    with sock:
        sock.settimeout(timeout)
        try:
            try:
                rsp = _call(sock, RPC_CMD_HELLO, b"\0" * RPC_CONN_CAPS_SIZE, 4 + RPC_CONN_CAPS_SIZE)
            except ConnectionError as e:
                raise WorkerError(
                    f"RPC worker {ep} {e} during the handshake: it speaks another RPC protocol than this engine "
                    f"(v{RPC_PROTO_MAJOR}.{RPC_PROTO_MINOR}.x); run a worker built by `tqgguf build` "
                    f"(`{start}`)") from None
            version = tuple(rsp[:3])
            if version[0] != RPC_PROTO_MAJOR or version[1] > RPC_PROTO_MINOR:
                raise WorkerError(
                    f"RPC worker {ep} speaks RPC protocol v{'.'.join(map(str, version))}, this engine "
                    f"v{RPC_PROTO_MAJOR}.{RPC_PROTO_MINOR}.x: run a worker built by `tqgguf build` (`{start}`)")
            (n_dev,) = struct.unpack("<I", _call(sock, RPC_CMD_DEVICE_COUNT, b"", 4))
            if n_dev == 0:
                raise WorkerError(f"RPC worker {ep} exposes no device")
            memory = tuple(struct.unpack("<QQ", _call(sock, RPC_CMD_GET_DEVICE_MEMORY, struct.pack("<I", d), 16))
                           for d in range(n_dev))
            for name in types:
                ti = type_info(name)
                req = struct.pack("<I", 0) + _probe_tensor(ggml_type_id(name), ti.type_size, ti.block_size) \
                    + b"\0" * (RPC_TENSOR_SIZE * GGML_MAX_SRC)
                want = ti.row_bytes(PROBE_ROW)
                try:
                    (got,) = struct.unpack("<Q", _call(sock, RPC_CMD_GET_ALLOC_SIZE, req, 8))
                except ConnectionError:
                    raise WorkerError(
                        f"RPC worker {ep} does not know the KV cache type {name} (it refused ggml type id "
                        f"{ggml_type_id(name)}): it is not a tqgguf build; run `{start}` there") from None
                if got != want:
                    raise WorkerError(
                        f"RPC worker {ep} sizes {name} differently ({got} bytes for {PROBE_ROW} values, this engine "
                        f"{want}): another build of the turbo types; run `{start}` from the same tqgguf there")
        except (socket.timeout, TimeoutError):
            raise WorkerError(
                f"RPC worker {ep} accepted the connection but did not answer within {timeout:g} s: a worker serves "
                "one client at a time; is another process (a serve child, a ppl run) using it?") from None
        except OSError as e:
            raise WorkerError(f"RPC worker {ep}: connection lost during the check ({e.strerror or e})") from None
    return WorkerInfo(ep, version, memory)


# ------------------------------------------------------------------------------- devices

GGML_BACKEND_DEVICE_TYPES = ("CPU", "GPU", "IGPU", "ACCEL", "META")  # enum ggml_backend_dev_type, in order


@dataclass(frozen=True)
class Device:
    """A ggml device: ``name`` (CUDA0, RPC0[host:port], CPU), ``description``, ``kind`` (CPU,
    GPU, IGPU, ACCEL, META), ``free``/``total`` memory in bytes, ``handle`` the
    ggml_backend_dev_t (an address)."""

    name: str
    description: str
    kind: str
    free: int
    total: int
    handle: int = field(repr=False, compare=False, default=0)

    @property
    def offload(self) -> bool:
        """True for devices llama.cpp offloads layers to (GPUs, integrated GPUs, RPC workers)."""
        return self.kind in ("GPU", "IGPU")


def list_devices() -> list[Device]:
    """Every device the engine has registered (ggml_backend_dev_count/get), RPC workers added
    by :func:`use_workers` included, in llama.cpp's order. Loads the engine."""
    ensure_engine()
    ggml, base = dev_api()
    out = []
    for i in range(ggml.ggml_backend_dev_count()):
        d = ggml.ggml_backend_dev_get(i)
        free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
        base.ggml_backend_dev_memory(d, ctypes.byref(free), ctypes.byref(total))
        kind = base.ggml_backend_dev_type(d)
        out.append(Device(base.ggml_backend_dev_name(d).decode(), (base.ggml_backend_dev_description(d) or b"").decode(),
                          GGML_BACKEND_DEVICE_TYPES[kind] if 0 <= kind < len(GGML_BACKEND_DEVICE_TYPES) else str(kind),
                          free.value, total.value, d))
    return out


def offload_devices() -> list[Device]:
    """The devices llama.cpp offloads to when no ``-dev`` is given (GPU kinds, RPC workers)."""
    return [d for d in list_devices() if d.offload]


_registered: set[str] = set()
_reg_lock = threading.Lock()


def use_workers(endpoints: Iterable[Endpoint] | str | None, timeout: float = WORKER_TIMEOUT_S) -> list[WorkerInfo]:
    """Check each worker (:func:`probe_worker`) and register it as a device of this process,
    as llama.cpp's ``--rpc`` does; a worker registered before is not registered again.
    Returns what each probe learnt. Raises WorkerError for the first unusable worker (before
    any is registered), EngineError when the engine has no RPC backend (an engine built before
    tqgguf built GGML_RPC: run ``tqgguf build``)."""
    if not endpoints:
        return []
    eps = parse_endpoints(endpoints) if isinstance(endpoints, str) else tuple(endpoints)
    check_distinct(eps)
    ensure_engine()
    # a registered worker is held by this process's connection (a worker serves one client at a
    # time), so it is not probed again
    infos = [probe_worker(ep, timeout) for ep in eps if str(ep) not in _registered]
    ggml, base = _libggml(), libggml_base()
    ggml.ggml_backend_reg_by_name.restype = ctypes.c_void_p
    ggml.ggml_backend_reg_by_name.argtypes = [ctypes.c_char_p]
    base.ggml_backend_reg_get_proc_address.restype = ctypes.c_void_p
    base.ggml_backend_reg_get_proc_address.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    reg = ggml.ggml_backend_reg_by_name(b"RPC")
    addr = base.ggml_backend_reg_get_proc_address(reg, b"ggml_backend_rpc_add_server") if reg else None
    if not addr:
        raise EngineError("the installed engine has no RPC backend (built before tqgguf enabled GGML_RPC): "
                          "run `tqgguf build`")
    add_server = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_char_p)(addr)
    ggml.ggml_backend_register.restype = None
    ggml.ggml_backend_register.argtypes = [ctypes.c_void_p]
    with _reg_lock:
        for ep in eps:
            if str(ep) in _registered:
                continue
            ggml.ggml_backend_register(add_server(str(ep).encode()))
            _registered.add(str(ep))
    watch_workers(eps)
    return infos




def device_array(names: str | None, devices: list[Device] | None = None):
    """The engine's ``llama_model_params.devices`` for a ``-dev`` value: None (unset: every
    offload device, llama.cpp's default), or a NULL-terminated ctypes array of
    ggml_backend_dev_t (``none``: empty, the CPU only). Raises DeviceError naming an unknown
    device and listing the ones there are."""
    if names is None:
        return None
    devices = list_devices() if devices is None else devices
    wanted = [] if names.strip().lower() == "none" else [n for n in names.split(",") if n]
    by_name = {d.name: d for d in devices}
    handles = []
    for n in wanted:
        d = by_name.get(n) or next((x for x in devices if x.name.lower() == n.lower()), None)
        if d is None or not d.offload:
            there = ", ".join(x.name for x in devices if x.offload) or "none (CPU only)"
            raise DeviceError(f"-dev {names}: no offload device {n!r}; devices: {there} (or none)")
        handles.append(d.handle)
    arr = (ctypes.c_void_p * (len(handles) + 1))(*handles, None)
    return arr


def check_split(*, split_mode: str, tensor_split, main_gpu: int, n_devices: int) -> None:
    """Refuse ``-ts`` with another count than the devices used, and ``-mg`` past them
    (DeviceError naming both counts). llama.cpp itself reads past the end of a short split
    or silently uses device 0."""
    if tensor_split is not None and len(tensor_split) != n_devices:
        raise DeviceError(f"-ts {','.join(f'{x:g}' for x in tensor_split)} gives {len(tensor_split)} proportion(s) "
                          f"for {n_devices} device(s); give one per device (`tqgguf info [--rpc ...]` lists them)")
    if main_gpu and main_gpu >= max(n_devices, 1):
        allowed = f"0 to {n_devices - 1}" if n_devices else "0: there is no offload device"
        raise DeviceError(f"-mg {main_gpu} is past the {n_devices} device(s) (allowed: {allowed})")


def check_tensor_split(split_mode: str, kv_types: Iterable[str], rpc: bool) -> None:
    """Refuse ``-sm tensor`` where it does not give the model's results (DeviceError naming
    why): with a turbo K or V cache (ggml's meta backend splits the cache write, read and
    flash attention by heads, and the turbo types' rotation and block codec are not split
    with them: over two workers turbo4/turbo4 measured PPL 23.9975 against 23.9464 unsplit,
    SmolLM2-135M, c=128, 2 chunks) and over RPC workers at all (f16/f16 through two CPU
    workers gave NaN PPL). ``-sm layer`` and ``row`` have neither problem."""
    if split_mode == "row" and rpc:
        raise DeviceError("-sm row cannot use RPC workers (llama.cpp: \"device RPC0 does not support split "
                          "buffers\"); use -sm layer with --rpc")
    if split_mode != "tensor":
        return
    turbo = sorted({t for t in kv_types if t in TURBO_TYPES})
    if turbo:
        raise DeviceError(f"-sm tensor cannot split a {'/'.join(turbo)} KV cache (the meta backend's per-head split "
                          "does not carry the turbo rotation and codec: its PPL differs from the unsplit model's); "
                          "use -sm layer (layer ranges and their caches per device)" + ("" if rpc else " or -sm row"))
    if rpc:
        raise DeviceError("-sm tensor over RPC workers gives NaN logits with this llama.cpp (f16/f16 through two "
                          "workers); use -sm layer with --rpc")


# --------------------------------------------------------------------------- dead workers

_watch: dict = {"endpoints": (), "note": "", "cb": None}


def set_fatal_note(note: str) -> None:
    """Text printed after the error when a worker dies mid-run (e.g. where the results so far
    are and that the same command resumes)."""
    _watch["note"] = note


def dead_workers(endpoints: Iterable[Endpoint], timeout: float = 1.0) -> list[tuple[Endpoint, str]]:
    """Workers among ``endpoints`` that refuse or time out a new connection, with the reason."""
    out = []
    for ep in endpoints:
        try:
            socket.create_connection((ep.host, ep.port), timeout=timeout).close()
        except ConnectionRefusedError:
            out.append((ep, "connection refused: the worker process is gone"))
        except OSError as e:
            out.append((ep, f"no connection ({e.strerror or e})"))
    return out


def watch_workers(endpoints: Iterable[Endpoint]) -> None:
    """Install ggml's abort callback so that ggml-rpc's abort on a lost worker ("Remote RPC
    server crashed or returned malformed response") ends the process with an error naming the
    worker (exit 1, stderr) instead of SIGABRT and a core dump. Other aborts are left as they
    are. Results written as they go (sweep, bench) stay written."""
    _watch["endpoints"] = tuple(dict.fromkeys([*_watch["endpoints"], *endpoints]))
    if _watch["cb"] is not None:
        return
    base = libggml_base()
    proto = ctypes.CFUNCTYPE(None, ctypes.c_char_p)

    def on_abort(msg):
        text = (msg or b"").decode("utf-8", "replace").strip()
        dead = dead_workers(_watch["endpoints"]) if ("RPC" in text or "connect" in text.lower()
                                                    or any(str(ep) in text for ep in _watch["endpoints"])) else []
        if not dead and "Remote RPC server" not in text:
            sys.stderr.write(text + "\n")  # not a lost worker: what ggml itself prints, then its abort
            sys.stderr.flush()
            return
        who = "; ".join(f"{ep}: {why}" for ep, why in dead) or \
            ", ".join(map(str, _watch["endpoints"])) + " (all still accept connections; one answered wrongly)"
        last = text.splitlines()[-1] if text else ""
        sys.stderr.write(f"\nerror: lost an RPC worker mid-run — {who} (ggml: {last})\n")
        if _watch["note"]:
            sys.stderr.write(_watch["note"].rstrip() + "\n")
        sys.stderr.flush()
        os._exit(1)

    cb = proto(on_abort)
    base.ggml_set_abort_callback.restype = ctypes.c_void_p
    base.ggml_set_abort_callback.argtypes = [proto]
    base.ggml_set_abort_callback(cb)
    _watch["cb"] = cb  # ctypes callbacks must outlive their use


# ------------------------------------------------------------------------------ -ngl auto

#: Memory llama.cpp's fit leaves free on each device (common/common.h fit_params_target: 1 GiB).
FIT_MARGIN = 1 << 30


def layer_bytes(model_path: str | os.PathLike) -> tuple[list[int], int]:
    """Bytes of each repeating layer's weights (``blk.N.*``) and of the output layer
    (``output.*``, ``output_norm.*``) in a GGUF file (tensor sizes as stored)."""
    from gguf import GGUFReader

    r = GGUFReader(str(model_path))
    per: dict[int, int] = {}
    out = 0
    for t in r.tensors:
        m = re.match(r"blk\.(\d+)\.", t.name)
        if m:
            per[int(m.group(1))] = per.get(int(m.group(1)), 0) + int(t.n_bytes)
        elif t.name.startswith("output"):
            out += int(t.n_bytes)
    return [per.get(i, 0) for i in range(max(per) + 1 if per else 0)], out


def fit_layers(model_path: str | os.PathLike, kv_bytes_per_layer: int, devices: list[Device],
               margin: int = FIT_MARGIN) -> tuple[int, str]:
    """``-ngl auto``: how many layers to offload so that their weights and KV cache fit the
    ``devices``' free memory less ``margin`` each, and a sentence saying so. llama.cpp puts
    the last N repeating layers on the devices (and the output layer when N = n_layer + 1),
    so the count is taken from the end. 0 when there is no offload device.

    kv_bytes_per_layer: one layer's K + V cache at the context's size, in bytes."""
    if not devices:
        return 0, "no GPU or RPC worker: the CPU"
    per, out = layer_bytes(model_path)
    room = sum(max(d.free - margin, 0) for d in devices)
    need = out + sum(per) + kv_bytes_per_layer * len(per)
    names = ", ".join(d.name for d in devices)
    if need <= room:
        return len(per) + 1, (f"all {len(per)} layers and the output fit {names} (weights and KV cache {need >> 20} MiB; "
                              f"{room >> 20} MiB free after a {margin >> 20} MiB margin each)")
    n, used = 0, 0
    for b in reversed(per):
        if used + b + kv_bytes_per_layer > room:
            break
        used += b + kv_bytes_per_layer
        n += 1
    return n, (f"{n} of {len(per)} layers fit {names} ({used >> 20} of {room >> 20} MiB free after a "
               f"{margin >> 20} MiB margin each); the rest and the output run on the CPU")


# ------------------------------------------------------------------------------ placement

@dataclass
class DevicePlacement:
    """One device's share: ``layers`` (first, last) ranges of repeating layers (inclusive),
    ``output`` whether the output layer is there, ``model_mib`` its weight buffer, ``k_mib`` /
    ``v_mib`` its K and V cache, in MiB."""

    device: str
    layers: list[tuple[int, int]] = field(default_factory=list)
    output: bool = False
    model_mib: float = 0.0
    k_mib: float = 0.0
    v_mib: float = 0.0


_ASSIGNED = re.compile(r"load_tensors: layer\s+(\d+) assigned to device (\S+?),")
_MODEL_BUF = re.compile(r"load_tensors:\s+(\S+) model buffer size\s*=\s*([\d.]+) MiB")
_KV_BUF = re.compile(r"llama_kv_cache:\s+(\S+) KV buffer size\s*=\s*([\d.]+) MiB")
_OFFLOADED = re.compile(r"offloaded (\d+)/(\d+) layers to GPU")


def _ranges(ix: list[int]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for i in sorted(ix):
        if out and out[-1][1] == i - 1:
            out[-1] = (out[-1][0], i)
        else:
            out.append((i, i))
    return out


def _buffer_of(buffer: str, device: str, descriptions: dict[str, str]) -> bool:
    """Whether a buffer name in llama.cpp's log belongs to ``device``: the device's own name
    (CUDA0, CPU_Mapped for CPU), or for an RPC device the worker's address in brackets (its
    buffers are named by the worker's own device index: ``RPC0[127.0.0.1:50062]`` for RPC1)."""
    if "[" in buffer:
        return buffer[buffer.index("[") + 1:].rstrip("]") == descriptions.get(device) and buffer[:3] == device[:3]
    return buffer == device or buffer.startswith(device)


def parse_placement(log: str, n_layer: int, k_row_bytes: list[int], v_row_bytes: list[int],
                    cells: int, descriptions: dict[str, str] | None = None) -> list[DevicePlacement]:
    """Where llama.cpp placed a model, from its load and context log.

    Layer → device from its ``layer N assigned to device D`` lines (debug level: the
    in-process engine logs them); without them (llama-server at its default verbosity) the
    ranges follow from the per-device KV buffer sizes, layers being assigned in order. The
    output layer is on the last device when every layer was offloaded ("offloaded N/N").
    K and V MiB per device: ``cells`` × the bytes of each of its layers' K and V rows
    (``k_row_bytes[il]``, ``v_row_bytes[il]``: one cell of layer il). ``descriptions``: device
    name -> description (an RPC device's is its worker's address), to match RPC buffers.
    Returns one entry per device holding anything, in layer order.
    """
    descriptions = descriptions or {}

    def device_of(buffer: str) -> str:  # a buffer name as the device's name (RPC buffers: by address)
        for name in descriptions:
            if _buffer_of(buffer, name, descriptions) and (name.startswith("RPC") or "[" not in buffer):
                return name
        return "CPU" if buffer.startswith("CPU") else buffer

    assigned: dict[int, str] = {}
    for m in _ASSIGNED.finditer(log):
        assigned[int(m.group(1))] = m.group(2)
    # the last load wins: keep only the final block of lines of each kind
    model = {m.group(1): float(m.group(2)) for m in _MODEL_BUF.finditer(log)}
    kv = {m.group(1): float(m.group(2)) for m in _KV_BUF.finditer(log)}
    if len(assigned) < n_layer and kv and cells:
        per_layer = [(k + v) * cells for k, v in zip(k_row_bytes, v_row_bytes)]
        il = 0
        for buf, mib in kv.items():
            have = mib * (1 << 20)
            while il < n_layer and have > per_layer[il] / 2:
                assigned[il] = device_of(buf)
                have -= per_layer[il]
                il += 1
    by: dict[str, DevicePlacement] = {}
    for il in range(n_layer):
        dev = assigned.get(il, "CPU")
        p = by.setdefault(dev, DevicePlacement(dev))
        p.layers.append((il, il))
        p.k_mib += cells * k_row_bytes[il] / (1 << 20)
        p.v_mib += cells * v_row_bytes[il] / (1 << 20)
    for buf, mib in model.items():  # a device with weights but no layer (the CPU's token embeddings, an output)
        by.setdefault(device_of(buf), DevicePlacement(device_of(buf)))
    # the output layer: on a device when llama.cpp says it offloaded it, else on the CPU
    out_dev = "CPU"
    if "offloading output layer to GPU" in log or any(a == b for a, b in _OFFLOADED.findall(log)[-1:]):
        top = assigned.get(n_layer - 1, "CPU")
        with_weights = [device_of(b) for b in model if device_of(b) != "CPU"]
        out_dev = top if top != "CPU" else (with_weights[-1] if with_weights else "CPU")
    if by:
        by.setdefault(out_dev, DevicePlacement(out_dev)).output = True
    for p in by.values():
        p.layers = _ranges([a for a, _ in p.layers])
        p.model_mib = sum(v for k, v in model.items() if device_of(k) == p.device)
        if p.device in descriptions and p.device.startswith("RPC"):
            p.device = f"{p.device} ({descriptions[p.device]})"
    return sorted(by.values(), key=lambda p: (p.layers[0][0] if p.layers else -1 if p.device == "CPU" else n_layer))


def placement_lines(placement: list[DevicePlacement]) -> list[str]:
    """One line per device: ``CUDA0: layers 0-15 (+ output), model 812.3 MiB, K 64.00 MiB,
    V 64.00 MiB``."""
    lines = []
    for p in placement:
        rng = "layers " + ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in p.layers) if p.layers else \
            ("no layers (token embeddings)" if p.device == "CPU" and not p.output else "no layers")
        extra = " + output" if p.output else ""
        model = f", model {p.model_mib:.1f} MiB" if p.model_mib else ""
        lines.append(f"{p.device}: {rng}{extra}{model}, K {p.k_mib:.2f} MiB, V {p.v_mib:.2f} MiB")
    return lines


# ------------------------------------------------------------------------ the offload plan

#: llama.cpp's enum llama_split_mode (include/llama.h), by -sm name.
SPLIT_MODE_IDS = {"none": 0, "layer": 1, "row": 2, "tensor": 3}


@dataclass(frozen=True)
class Offload:
    """Where a model goes: the ``-ngl``, ``--rpc``, ``-sm``, ``-ts``, ``-mg`` and ``-dev``
    settings (tqgguf.config), as one value the verbs pass down.

    n_gpu_layers: ``auto`` (:func:`fit_layers`), ``all`` or a count (text or int); rpc:
    ``host:port[,...]`` or None; split_mode: none/layer/row/tensor; tensor_split: one
    proportion per device or None; main_gpu: device index; device: ``-dev`` names or None.
    """

    n_gpu_layers: str | int = "auto"
    rpc: str | None = None
    split_mode: str = "layer"
    tensor_split: tuple[float, ...] | None = None
    main_gpu: int = 0
    device: str | None = None

    @classmethod
    def from_settings(cls, settings) -> "Offload":
        """The Offload of resolved tqgguf.config Settings."""
        return cls(settings.n_gpu_layers, settings.rpc, settings.split_mode, settings.tensor_split,
                   settings.main_gpu, settings.device)

    @property
    def cpu_only(self) -> bool:
        """True when nothing is offloaded whatever the machine (``-ngl 0`` or ``-dev none``)."""
        return str(self.n_gpu_layers) == "0" or (self.device or "").lower() == "none"

    def prepare(self) -> "Placed":
        """Check and register the workers, select the devices, check ``-ts``/``-mg`` against
        them, and refuse an explicit ``-ngl`` > 0 with no device. Raises WorkerError,
        DeviceError (a ValueError: a usage error), GPUOffloadError."""
        from .engine import GPUOffloadError

        ensure_engine()
        use_workers(self.rpc)
        devices = list_devices()
        offload = [d for d in devices if d.offload]
        arr = device_array(self.device, devices)
        if self.device is not None:
            chosen = [] if self.device.lower() == "none" else \
                [next(d for d in offload if d.name.lower() == n.lower()) for n in self.device.split(",")]
        else:
            chosen = offload
        check_split(split_mode=self.split_mode, tensor_split=self.tensor_split, main_gpu=self.main_gpu,
                    n_devices=len(chosen))
        if self.split_mode == "none" and chosen:
            chosen = [chosen[self.main_gpu]]
        ngl = str(self.n_gpu_layers)
        if ngl not in ("auto", "0") and not chosen:
            n = -1 if ngl == "all" else int(ngl)
            from .engine import gpu_offload_error

            raise GPUOffloadError(gpu_offload_error(n) or
                                  f"-ngl {ngl} asks for GPU layers, but -dev {self.device} selects no device")
        return Placed(self, [] if self.cpu_only else chosen, arr)

    def key(self) -> str:
        """What a stored measurement was made on, for resume checks (sweep, bench rows):
        ``cpu`` for a CPU-only run, else the ``-ngl``, the workers, ``-sm``, ``-ts``, ``-mg`` and ``-dev``
        given. Does not load the engine."""
        if self.cpu_only or (str(self.n_gpu_layers) == "auto" and not self.rpc and not _has_gpu_backend()):
            return "cpu"
        parts = [f"ngl={self.n_gpu_layers}"]
        if self.rpc:
            parts.append(f"rpc={self.rpc}")
        parts.append(f"sm={self.split_mode}")
        if self.tensor_split:
            parts.append("ts=" + ",".join(f"{x:g}" for x in self.tensor_split))
        if self.split_mode in ("none", "row") and self.main_gpu:
            parts.append(f"mg={self.main_gpu}")
        if self.device:
            parts.append(f"dev={self.device}")
        return " ".join(parts)


def _has_gpu_backend() -> bool:
    from .builder import installed_build_info

    return (installed_build_info() or {}).get("backend", "cpu") != "cpu"


@dataclass
class Placed:
    """An :class:`Offload` after :meth:`Offload.prepare`: ``devices`` the ones layers may go to
    (empty: the CPU), ``array`` the engine's device list (None: llama.cpp's default)."""

    offload: Offload
    devices: list[Device]
    array: object = None

    def layers(self, model_path, kv_bytes_per_layer: int) -> tuple[int, str]:
        """The ``-ngl`` count for the engine (-1 = all) and a sentence saying how it was chosen."""
        ngl = str(self.offload.n_gpu_layers)
        if not self.devices:
            return 0, "-ngl 0: the CPU" if ngl == "0" else "no GPU or RPC worker: the CPU"
        if ngl == "all":
            return -1, f"-ngl all: every layer on {', '.join(d.name for d in self.devices)}"
        if ngl == "auto":
            n, why = fit_layers(model_path, kv_bytes_per_layer, self.devices)
            return n, f"-ngl auto: {why}"
        return int(ngl), f"-ngl {ngl}"

    def llama_kwargs(self) -> dict:
        """llama_cpp.Llama keyword arguments for the split (split_mode, main_gpu, tensor_split, devices)."""
        o = self.offload
        kw = {"split_mode": SPLIT_MODE_IDS[o.split_mode], "main_gpu": o.main_gpu if o.split_mode != "none" else 0}
        if o.split_mode == "none" and self.devices:
            kw["devices"] = (ctypes.c_void_p * 2)(self.devices[0].handle, None)
        elif self.array is not None:
            kw["devices"] = self.array
        if o.tensor_split:
            kw["tensor_split"] = list(o.tensor_split)
        return kw
