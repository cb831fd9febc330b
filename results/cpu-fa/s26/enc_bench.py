import ctypes, os, sys, time
import numpy as np
from tqgguf.cachetypes import _lib_dir
lib = ctypes.CDLL(str(_lib_dir() / "libggml-base.so"))
x = np.random.default_rng(0).standard_normal(64 * 4096).astype(np.float32)
out = np.zeros(64 * 4096, dtype=np.uint8)
for name in ("turbo4_0", "turbo3_0", "turbo2_0"):
    f = getattr(lib, f"quantize_row_{name}")
    f.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
    f(x.ctypes.data, out.ctypes.data, len(x))
    best = 1e9
    for _ in range(7):
        t = time.perf_counter(); f(x.ctypes.data, out.ctypes.data, len(x)); best = min(best, time.perf_counter() - t)
    print(f"{name} level {os.environ.get('GGML_TURBO_SIMD_MAX', 'max')}: {best / 4096 * 1e9:.0f} ns per block")
