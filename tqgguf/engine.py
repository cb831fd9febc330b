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

    0 needs nothing. Otherwise the engine must have a GPU backend (``tqgguf build --backend
    cuda|metal``) and that backend must see a device; llama.cpp itself would quietly run
    every layer on the CPU in both cases. Call after :func:`ensure_engine`.
    """
    if n_gpu_layers == 0:
        return None
    import llama_cpp

    if llama_cpp.llama_supports_gpu_offload():
        return None
    from .builder import installed_build_info

    backend = (installed_build_info() or {}).get("backend", "cpu")
    if backend == "cpu":
        return (f"-ngl {n_gpu_layers} asks for GPU layers, but the installed engine was built for the CPU only: "
                "build the GPU engine with `tqgguf build --backend cuda` (or metal), or use -ngl 0")
    return (f"-ngl {n_gpu_layers} asks for GPU layers; the installed engine has the {backend.upper()} backend but "
            f"found no {backend.upper()} device (driver missing, or CUDA_VISIBLE_DEVICES hides it): "
            "use -ngl 0 to run on the CPU")


def backend_names() -> list[str]:
    """Names of the ggml backends the installed engine registered (``ggml_backend_reg_name``
    over ``ggml_backend_reg_count``), e.g. ``["CPU"]`` or ``["CUDA", "CPU"]``. Call after
    :func:`ensure_engine`."""
    from .cachetypes import _lib_dir

    candidates = sorted(_lib_dir().glob("libggml.so*")) + sorted(_lib_dir().glob("libggml.dylib")) \
        + sorted(_lib_dir().glob("ggml.dll"))
    if not candidates:
        raise EngineNotBuiltError(f"no libggml in {_lib_dir()}; run `tqgguf build`")
    lib = ctypes.CDLL(str(candidates[0]), mode=ctypes.RTLD_GLOBAL)
    base = libggml_base()
    lib.ggml_backend_reg_count.restype = ctypes.c_size_t
    lib.ggml_backend_reg_get.restype = ctypes.c_void_p
    lib.ggml_backend_reg_get.argtypes = [ctypes.c_size_t]
    base.ggml_backend_reg_name.restype = ctypes.c_char_p
    base.ggml_backend_reg_name.argtypes = [ctypes.c_void_p]
    return [base.ggml_backend_reg_name(lib.ggml_backend_reg_get(i)).decode()
            for i in range(lib.ggml_backend_reg_count())]


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
