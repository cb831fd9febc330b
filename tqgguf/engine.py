"""The engine's process-wide switches: importing the patched llama_cpp, capturing its log,
and the environment variables it reads when a KV cache is created.

The lowest engine layer: ``runtime`` (open a model), ``kcenter`` (calibration) and
``center`` (RoPE type lookup) build on it; it imports only ``cachetypes`` (and, for
``gpu_offload_error``, the build record through ``builder``).
"""
from __future__ import annotations

import ctypes
import os
import sys
import threading
from contextlib import contextmanager

from .cachetypes import EngineNotBuiltError, libggml_base


class EngineError(RuntimeError):
    """llama.cpp refused the model or context; the message carries its error lines."""


class GPUOffloadError(EngineError):
    """``-ngl`` asks for GPU layers that cannot be placed on a GPU (an engine or llama-server
    without a GPU backend, or no device found): a bad flag, which the CLI reports as a usage
    error (exit 2) in every verb."""


class LogCapture:
    """Collects llama.cpp / ggml log text through ``llama_log_set`` (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._buf: list[str] = []
        self._dropped = 0  # entries trimmed from the front; marks are absolute positions
        self.echo = False
        self._cb = None

    def install(self) -> None:
        import llama_cpp

        @llama_cpp.llama_log_callback
        def _cb(level, text, user_data):  # noqa: ARG001
            s = text.decode("utf-8", errors="replace")
            with self._lock:
                self._buf.append(s)
                if len(self._buf) > 20000:
                    del self._buf[:10000]
                    self._dropped += 10000
            if self.echo:
                sys.stderr.write(s)

        self._cb = _cb  # keep a reference: ctypes callbacks must outlive their use
        llama_cpp.llama_log_set(_cb, ctypes.c_void_p(0))

    def mark(self) -> int:
        with self._lock:
            return self._dropped + len(self._buf)

    def since(self, mark: int) -> str:
        with self._lock:
            return "".join(self._buf[max(mark - self._dropped, 0):])


capture = LogCapture()
"""The process-wide capture of llama.cpp's log (installed by ``ensure_engine``)."""
_installed = False
_env_lock = threading.Lock()


def ensure_engine() -> None:
    """Import llama_cpp, check it is the patched build, install the log capture (once).

    Raises EngineNotBuiltError when llama_cpp is missing or is a stock build.
    """
    global _installed
    libggml_base()  # raises EngineNotBuiltError for a stock build
    try:
        import llama_cpp  # noqa: F401
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise EngineNotBuiltError(f"llama_cpp cannot be imported ({e}); run `tqgguf build`") from e
    if not _installed:
        capture.install()
        _installed = True


def gpu_offload_error(n_gpu_layers: int) -> str | None:
    """Why ``-ngl n_gpu_layers`` cannot be honoured by the installed engine, or None.

    0 needs nothing. Otherwise the engine must have an offload device: a GPU backend
    (``tqgguf build --backend cuda|metal``) that sees a device, or an RPC worker (``--rpc``);
    llama.cpp itself would quietly run every layer on the CPU. Call after :func:`ensure_engine`
    (and after registering any ``--rpc`` workers).
    """
    if n_gpu_layers == 0 or gpu_devices():
        return None
    from .builder import installed_build_info

    backend = (installed_build_info() or {}).get("backend", "cpu")
    if backend == "cpu":
        return (f"-ngl {n_gpu_layers} asks for GPU layers, but the installed engine was built for the CPU only and no "
                "--rpc worker was given: build the GPU engine with `tqgguf build --backend cuda` (or metal), "
                "add --rpc HOST:PORT workers, or use -ngl 0")
    return (f"-ngl {n_gpu_layers} asks for GPU layers; the installed engine has the {backend.upper()} backend but "
            f"found no {backend.upper()} device (driver missing, or CUDA_VISIBLE_DEVICES hides it): "
            "use -ngl 0 to run on the CPU")


def check_gpu_offload(n_gpu_layers: int) -> None:
    """Raise GPUOffloadError with :func:`gpu_offload_error`'s reason when ``-ngl n_gpu_layers``
    cannot be honoured; -ngl 0 passes without loading the engine. EngineNotBuiltError when
    the engine is missing."""
    if n_gpu_layers == 0:
        return
    ensure_engine()
    if (why := gpu_offload_error(n_gpu_layers)) is not None:
        raise GPUOffloadError(why)


def _libggml() -> ctypes.CDLL:
    """ctypes handle of the installed libggml (the backend registry): the copy libllama loads
    (tqgguf.cachetypes.engine_library), so devices registered here are the engine's."""
    from .cachetypes import _lib_dir, engine_library

    path = engine_library("ggml")
    if path is None:
        raise EngineNotBuiltError(f"no libggml in {_lib_dir()}; run `tqgguf build`")
    return ctypes.CDLL(str(path))  # RTLD_LOCAL: see cachetypes.libggml_base


def backend_names() -> list[str]:
    """Names of the ggml backends the installed engine registered (``ggml_backend_reg_name``
    over ``ggml_backend_reg_count``), e.g. ``["CPU"]`` or ``["CUDA", "CPU"]``. Call after
    :func:`ensure_engine`."""
    lib = _libggml()
    base = libggml_base()
    lib.ggml_backend_reg_count.restype = ctypes.c_size_t
    lib.ggml_backend_reg_get.restype = ctypes.c_void_p
    lib.ggml_backend_reg_get.argtypes = [ctypes.c_size_t]
    base.ggml_backend_reg_name.restype = ctypes.c_char_p
    base.ggml_backend_reg_name.argtypes = [ctypes.c_void_p]
    return [base.ggml_backend_reg_name(lib.ggml_backend_reg_get(i)).decode()
            for i in range(lib.ggml_backend_reg_count())]


#: ggml-backend.h's enum ggml_backend_dev_type
DEV_CPU, DEV_GPU, DEV_IGPU = 0, 1, 2


def dev_api() -> tuple[ctypes.CDLL, ctypes.CDLL]:
    """(libggml, libggml-base) with the device functions' signatures declared: dev_count/get
    (registry, libggml), dev_name/description/type/memory (libggml-base)."""
    lib, base = _libggml(), libggml_base()
    lib.ggml_backend_dev_count.restype = ctypes.c_size_t
    lib.ggml_backend_dev_get.restype = ctypes.c_void_p
    lib.ggml_backend_dev_get.argtypes = [ctypes.c_size_t]
    for fn, res in (("ggml_backend_dev_name", ctypes.c_char_p), ("ggml_backend_dev_description", ctypes.c_char_p),
                    ("ggml_backend_dev_type", ctypes.c_int)):
        getattr(base, fn).restype = res
        getattr(base, fn).argtypes = [ctypes.c_void_p]
    base.ggml_backend_dev_memory.restype = None
    base.ggml_backend_dev_memory.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t),
                                             ctypes.POINTER(ctypes.c_size_t)]
    return lib, base


def gpu_devices() -> list[str]:
    """Descriptions of the devices of type GPU or integrated GPU the engine offers
    (ggml_backend_dev_count / _get / _type), e.g. ["NVIDIA H200"], RPC workers registered so
    far included ("127.0.0.1:50052"); [] on a CPU engine without workers, or a CUDA engine that
    found no device. Not ``llama_supports_gpu_offload``: with the RPC backend compiled in, that
    is true on every build, worker or not. Call after :func:`ensure_engine`."""
    lib, base = dev_api()
    devs = [lib.ggml_backend_dev_get(i) for i in range(lib.ggml_backend_dev_count())]
    return [(base.ggml_backend_dev_description(d) or b"").decode() for d in devs
            if base.ggml_backend_dev_type(d) in (DEV_GPU, DEV_IGPU)]


def bench_backend() -> str:
    """llama-bench's ``backends`` field (tools/llama-bench/llama-bench.cpp, ``get_backend``):
    the registered backends other than CPU, RPC only when it has devices (a worker given), or
    "CPU" when none is left. Call after :func:`ensure_engine`."""
    lib, base = _libggml(), libggml_base()
    lib.ggml_backend_reg_count.restype = ctypes.c_size_t
    lib.ggml_backend_reg_get.restype = ctypes.c_void_p
    lib.ggml_backend_reg_get.argtypes = [ctypes.c_size_t]
    base.ggml_backend_reg_name.restype = ctypes.c_char_p
    base.ggml_backend_reg_name.argtypes = [ctypes.c_void_p]
    base.ggml_backend_reg_dev_count.restype = ctypes.c_size_t
    base.ggml_backend_reg_dev_count.argtypes = [ctypes.c_void_p]
    names, rpc = [], False
    for i in range(lib.ggml_backend_reg_count()):
        reg = lib.ggml_backend_reg_get(i)
        name = base.ggml_backend_reg_name(reg).decode()
        if name.startswith("RPC"):
            rpc = rpc or base.ggml_backend_reg_dev_count(reg) > 0
        elif name != "CPU":
            names.append(name)
    names += ["RPC"] if rpc else []
    return ",".join(names) if names else "CPU"


class _InitParams(ctypes.Structure):
    """``struct ggml_init_params`` (ggml.h)."""

    _fields_ = [("mem_size", ctypes.c_size_t), ("mem_buffer", ctypes.c_void_p), ("no_alloc", ctypes.c_bool)]


#: ggml.h's GGML_TYPE_F32
_GGML_F32 = 0


#: the bytes of each tensor :func:`copy_bandwidth` copies by default: on the H200 ggml's copy of
#: 2 x 256 MiB reached 3913 GB/s, of 2 x 1 GiB 2668 (docs/SHAPES.md)
COPY_BYTES = 256 << 20


def copy_bandwidth(*, device: str | None = None, n_threads: int = 1, nbytes: int = COPY_BYTES, reps: int = 10
                   ) -> tuple[float, str]:
    """Copy bandwidth of the device a model runs on, measured through the engine's own ggml
    backend: a ggml graph of one ``GGML_OP_CPY`` between two f32 tensors of ``nbytes`` each
    (rows of 4 MiB, so the CPU backend splits the rows over its threads; CUDA copies
    device-to-device), computed once untimed and then ``reps`` times, each timed from before
    ``ggml_backend_graph_compute`` to after ``ggml_backend_synchronize``. Returns (bytes/s of
    the fastest repetition, counting each byte read and each byte written: 2 · nbytes / s;
    the device's description, e.g. "NVIDIA H200" or the CPU's name). ``device``: a ggml device
    name as llama.cpp's load log gives it (``ggml_backend_dev_by_name``, e.g. "CUDA0"); None: the
    CPU device with ``n_threads`` threads. Raises EngineError when there is no such device (the
    message lists the engine's) or ggml cannot allocate the tensors.
    """
    import time

    ensure_engine()
    lib, base = dev_api()  # dev_count/get, dev_name/description declared there
    vp, sz = ctypes.c_void_p, ctypes.c_size_t
    lib.ggml_backend_dev_by_type.restype = vp
    lib.ggml_backend_dev_by_type.argtypes = [ctypes.c_int]
    lib.ggml_backend_dev_by_name.restype = vp
    lib.ggml_backend_dev_by_name.argtypes = [ctypes.c_char_p]
    for name, res, args in (("ggml_backend_dev_init", vp, [vp, ctypes.c_char_p]),
                            ("ggml_backend_dev_backend_reg", vp, [vp]),
                            ("ggml_backend_reg_get_proc_address", vp, [vp, ctypes.c_char_p]),
                            ("ggml_tensor_overhead", sz, []), ("ggml_graph_overhead", sz, []),
                            ("ggml_init", vp, [_InitParams]), ("ggml_free", None, [vp]),
                            ("ggml_new_tensor_2d", vp, [vp, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]),
                            ("ggml_cpy", vp, [vp, vp, vp]), ("ggml_new_graph", vp, [vp]),
                            ("ggml_build_forward_expand", None, [vp, vp]),
                            ("ggml_backend_alloc_ctx_tensors", vp, [vp, vp]),
                            ("ggml_backend_graph_compute", ctypes.c_int, [vp, vp]),
                            ("ggml_backend_synchronize", None, [vp]), ("ggml_backend_buffer_free", None, [vp]),
                            ("ggml_backend_free", None, [vp])):
        fn = getattr(base, name)
        fn.restype, fn.argtypes = res, args
    dev = lib.ggml_backend_dev_by_type(DEV_CPU) if device is None else lib.ggml_backend_dev_by_name(device.encode())
    if not dev:
        names = [(base.ggml_backend_dev_name(lib.ggml_backend_dev_get(i)) or b"").decode()
                 for i in range(lib.ggml_backend_dev_count())] if device is not None else []
        raise EngineError(f"no {device or 'CPU'} device in the engine to measure the copy bandwidth of"
                          + (f"; it has: {', '.join(names)}" if names else ""))
    desc = (base.ggml_backend_dev_description(dev) or b"").decode() or (device or "CPU")
    backend = base.ggml_backend_dev_init(dev, None)
    if not backend:
        raise EngineError(f"ggml could not start a backend on {desc}")
    ctx = buf = None
    try:
        if device is None:
            addr = base.ggml_backend_reg_get_proc_address(base.ggml_backend_dev_backend_reg(dev), b"ggml_backend_set_n_threads")
            if addr:
                ctypes.CFUNCTYPE(None, vp, ctypes.c_int)(addr)(backend, n_threads)
        ctx = base.ggml_init(_InitParams(4 * base.ggml_tensor_overhead() + base.ggml_graph_overhead() + 4096, None, True))
        row = 1 << 20  # f32 values: 4 MiB rows
        n_rows = max(1, nbytes // (4 * row))
        a = base.ggml_new_tensor_2d(ctx, _GGML_F32, row, n_rows)
        b = base.ggml_new_tensor_2d(ctx, _GGML_F32, row, n_rows)
        graph = base.ggml_new_graph(ctx)
        base.ggml_build_forward_expand(graph, base.ggml_cpy(ctx, a, b))
        buf = base.ggml_backend_alloc_ctx_tensors(ctx, backend)
        if not buf:
            raise EngineError(f"ggml could not allocate 2 x {4 * row * n_rows / 2**20:.0f} MiB on {desc}")
        best = float("inf")
        for i in range(reps + 1):
            t0 = time.perf_counter()
            if base.ggml_backend_graph_compute(backend, graph) != 0:
                raise EngineError(f"ggml could not run a copy on {desc}")
            base.ggml_backend_synchronize(backend)
            if i:  # the first run warms up (allocation, kernel load, page faults)
                best = min(best, time.perf_counter() - t0)
        return 2 * 4 * row * n_rows / best, desc
    finally:
        if buf:
            base.ggml_backend_buffer_free(buf)
        if ctx:
            base.ggml_free(ctx)
        base.ggml_backend_free(backend)


#: ggml.h's GGML_MAX_N_THREADS: the length of ggml_threadpool_params.cpumask
GGML_MAX_N_THREADS = 512


class _ThreadpoolParams(ctypes.Structure):
    """``struct ggml_threadpool_params`` (ggml.h)."""

    _fields_ = [("cpumask", ctypes.c_bool * GGML_MAX_N_THREADS), ("n_threads", ctypes.c_int),
                ("prio", ctypes.c_int), ("poll", ctypes.c_uint32), ("strict_cpu", ctypes.c_bool),
                ("paused", ctypes.c_bool)]


@contextmanager
def cpu_threadpool(ctx, n_threads: int):
    """Attach a ggml CPU threadpool of ``n_threads`` threads (ggml's default parameters:
    polling level 50, normal priority, no CPU mask) to the llama context ``ctx`` (a ctypes
    ``llama_context`` pointer) while the block runs; detach and free it after. This is
    llama-bench's setup (tools/llama-bench/llama-bench.cpp: ggml_threadpool_new through the
    CPU backend's proc address, llama_attach_threadpool). Without a pool, ggml-cpu creates
    and joins n_threads - 1 threads for every graph it computes (ggml-cpu.c's disposable
    threadpool), a cost per decoded token that llama-bench does not pay.

    Raises EngineError when the CPU backend does not export the threadpool functions, the
    structure read back does not match (another ggml ABI), or the pool cannot be made."""
    import llama_cpp

    ggml, base = _libggml(), libggml_base()
    ggml.ggml_backend_reg_by_name.restype = ctypes.c_void_p
    ggml.ggml_backend_reg_by_name.argtypes = [ctypes.c_char_p]
    base.ggml_backend_reg_get_proc_address.restype = ctypes.c_void_p
    base.ggml_backend_reg_get_proc_address.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    base.ggml_threadpool_params_init.restype = None
    base.ggml_threadpool_params_init.argtypes = [ctypes.POINTER(_ThreadpoolParams), ctypes.c_int]
    reg = ggml.ggml_backend_reg_by_name(b"CPU")
    addr_new = base.ggml_backend_reg_get_proc_address(reg, b"ggml_threadpool_new") if reg else None
    addr_free = base.ggml_backend_reg_get_proc_address(reg, b"ggml_threadpool_free") if reg else None
    if not (addr_new and addr_free):
        raise EngineError("the engine's CPU backend does not export ggml_threadpool_new/free")
    tp_new = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.POINTER(_ThreadpoolParams))(addr_new)
    tp_free = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(addr_free)
    params = _ThreadpoolParams()
    base.ggml_threadpool_params_init(ctypes.byref(params), n_threads)
    if (params.n_threads, params.strict_cpu, params.paused) != (n_threads, False, False):
        raise EngineError("ggml_threadpool_params does not have the layout tqgguf expects (another ggml version?)")
    pool = tp_new(ctypes.byref(params))
    if not pool:
        raise EngineError(f"ggml_threadpool_new failed for {n_threads} threads")
    lib = llama_cpp.llama_cpp._lib
    lib.llama_attach_threadpool.restype = None
    lib.llama_attach_threadpool.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    lib.llama_detach_threadpool.restype = None
    lib.llama_detach_threadpool.argtypes = [ctypes.c_void_p]
    lib.llama_attach_threadpool(ctx, pool, None)
    try:
        yield
    finally:
        lib.llama_detach_threadpool(ctx)
        tp_free(pool)


@contextmanager
def engine_env(*, rotation: bool = True, k_center: str = "off", kv_plan: str = "", extra: dict[str, str] | None = None):
    """Set the variables the patched llama.cpp reads when it creates a KV cache:
    ``LLAMA_ATTN_ROT_DISABLE`` (upstream's rotation switch) and ``LLAMA_K_CENTER``
    (tqgguf's K centering: off, bias[:N], file:PATH; see tqgguf.kcenter) and
    ``LLAMA_KV_PLAN`` (per-layer K/V types, "" = none; see tqgguf.kvplan), and any ``extra``
    engine variables (name -> value; the A/B switches of docs/SETTINGS.md). Restores them
    after; serialised with a lock, since the environment is process-wide."""
    wanted = {"LLAMA_ATTN_ROT_DISABLE": "0" if rotation else "1", "LLAMA_K_CENTER": k_center, "LLAMA_KV_PLAN": kv_plan,
              **(extra or {})}
    with _env_lock:
        old = {k: os.environ.get(k) for k in wanted}
        os.environ.update(wanted)
        try:
            yield
        finally:
            for k, v in old.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
