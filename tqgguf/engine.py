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


def offload_device_count() -> int:
    """How many devices the engine can offload layers to: GPUs, integrated GPUs and the RPC
    workers registered so far (ggml_backend_dev_count / ggml_backend_dev_type). Not
    ``llama_supports_gpu_offload``: with the RPC backend compiled in, that is true on every
    build, worker or not. Call after :func:`ensure_engine`."""
    lib, base = _libggml(), libggml_base()
    lib.ggml_backend_dev_count.restype = ctypes.c_size_t
    lib.ggml_backend_dev_get.restype = ctypes.c_void_p
    lib.ggml_backend_dev_get.argtypes = [ctypes.c_size_t]
    base.ggml_backend_dev_type.restype = ctypes.c_int
    base.ggml_backend_dev_type.argtypes = [ctypes.c_void_p]
    # enum ggml_backend_dev_type (ggml-backend.h): CPU 0, GPU 1, IGPU 2, ACCEL 3, META 4
    return sum(1 for i in range(lib.ggml_backend_dev_count())
               if base.ggml_backend_dev_type(lib.ggml_backend_dev_get(i)) in (1, 2))


def gpu_offload_error(n_gpu_layers: int) -> str | None:
    """Why ``-ngl n_gpu_layers`` cannot be honoured by the installed engine, or None.

    0 needs nothing. Otherwise the engine must have an offload device: a GPU backend
    (``tqgguf build --backend cuda|metal``) that sees a device, or an RPC worker (``--rpc``);
    llama.cpp itself would quietly run every layer on the CPU. Call after :func:`ensure_engine`
    (and after registering any ``--rpc`` workers).
    """
    if n_gpu_layers == 0 or offload_device_count():
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
    return ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)


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
def engine_env(*, rotation: bool = True, k_center: str = "off", kv_plan: str = ""):
    """Set the variables the patched llama.cpp reads when it creates a KV cache:
    ``LLAMA_ATTN_ROT_DISABLE`` (upstream's rotation switch) and ``LLAMA_K_CENTER``
    (tqgguf's K centering: off, bias[:N], file:PATH; see tqgguf.kcenter) and
    ``LLAMA_KV_PLAN`` (per-layer K/V types, "" = none; see tqgguf.kvplan). Restores them
    after; serialised with a lock, since the environment is process-wide."""
    wanted = {"LLAMA_ATTN_ROT_DISABLE": "0" if rotation else "1", "LLAMA_K_CENTER": k_center, "LLAMA_KV_PLAN": kv_plan}
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
