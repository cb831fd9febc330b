#!/usr/bin/env python3
"""Decode speed of the turbo codec in isolation: ns per 64-value block.

    python scripts/tools/bench_codec.py [--lib DIR ...] [--paths best,avx2,scalar] [--types turbo4,turbo3,turbo2,q4_0]
                                  [--values 1048576] [--reps 30]

Times the two functions CPU flash attention calls per key, dequantize_row (V, ggml's
``to_float``) and vec_dot (K·Q, the CPU ``vec_dot``), over a row of --values values, in two
call patterns:

  fa64  one call per 64-value block, the output / the query fixed (what ggml's CPU flash
        attention does for head dim 64: one vec_dot and one to_float per key);
  row   one call for the whole row (throughput; output 4 bytes per value).

q4_0 / q8_0 for comparison go through ggml's own traits: ``to_float`` of ggml-base and the
CPU ``vec_dot`` of ggml-cpu with the query converted to its ``vec_dot_type`` (q8_0) once.

The timing loop is a small C helper compiled on the fly (cc -O2), so no Python overhead is
measured; each figure is the minimum over --reps passes (robust to other load on the
machine; --rounds R repeats the whole set R times, interleaved, and keeps the minimum, for a
busy machine). Every --lib DIR (a folder holding libggml-base.so and libggml-cpu.so, e.g. a copy
of an older build) and every --paths entry runs in its own process:

  best    whatever the library dispatches to on this CPU
  avx2    GGML_TURBO_SIMD_MAX=1 (turbo only: AVX2 even where AVX-512 exists; builds before
          the AVX-512 path ignore it)
  scalar  GGML_TURBO_NO_SIMD=1 (turbo only: the portable C code)

Without --lib the installed engine (``tqgguf build``) is used. Single-threaded; prints a
table, asserts nothing.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

HELPER_C = r"""
#include <stdint.h>
#include <stddef.h>
#include <time.h>
typedef void (*to_float_t)(const void *, float *, int64_t);
typedef void (*vec_dot_t)(int, float *, size_t, const void *, size_t, const void *, size_t, int);
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + 1e-9*t.tv_nsec; }
/* n_calls calls of chunk values each; x advances by x_step bytes, out by out_step floats */
double bench_to_float(void * f, const char * x, float * out, int64_t n_calls, int64_t chunk,
                      size_t x_step, size_t out_step, int reps) {
    to_float_t fn = (to_float_t) f;
    double best = 1e30;
    for (int r = 0; r < reps; ++r) {
        const double t0 = now();
        for (int64_t i = 0; i < n_calls; ++i) fn(x + i*x_step, out + i*out_step, chunk);
        const double t = now() - t0;
        if (t < best) best = t;
    }
    return best;
}
double bench_vec_dot(void * f, const char * x, const char * y, int64_t n_calls, int chunk,
                     size_t x_step, size_t y_step, int reps, float * sink) {
    vec_dot_t fn = (vec_dot_t) f;
    double best = 1e30;
    float acc = 0.0f;
    for (int r = 0; r < reps; ++r) {
        const double t0 = now();
        for (int64_t i = 0; i < n_calls; ++i) { float s; fn(chunk, &s, 0, x + i*x_step, 0, y + i*y_step, 0, 1); acc += s; }
        const double t = now() - t0;
        if (t < best) best = t;
    }
    *sink = acc;
    return best;
}
"""


class _TraitsCpu(ctypes.Structure):
    _fields_ = [("from_float", ctypes.c_void_p), ("vec_dot", ctypes.c_void_p),
                ("vec_dot_type", ctypes.c_int), ("nrows", ctypes.c_int64)]


class _Traits(ctypes.Structure):
    _fields_ = [("type_name", ctypes.c_char_p), ("blck_size", ctypes.c_int64),
                ("blck_size_interleave", ctypes.c_int64), ("type_size", ctypes.c_size_t),
                ("is_quantized", ctypes.c_bool), ("to_float", ctypes.c_void_p),
                ("from_float_ref", ctypes.c_void_p)]


def _installed_lib_dir() -> Path:
    from tqgguf.cachetypes import _lib_dir
    return _lib_dir()


def _helper(tmp: Path) -> ctypes.CDLL:
    src, so = tmp / "bench_helper.c", tmp / "bench_helper.so"
    src.write_text(HELPER_C)
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", str(so), str(src)], check=True)
    h = ctypes.CDLL(str(so))
    vp, i64, sz = ctypes.c_void_p, ctypes.c_int64, ctypes.c_size_t
    h.bench_to_float.argtypes = [vp, vp, vp, i64, i64, sz, sz, ctypes.c_int]
    h.bench_to_float.restype = ctypes.c_double
    h.bench_vec_dot.argtypes = [vp, vp, vp, i64, ctypes.c_int, sz, sz, ctypes.c_int, vp]
    h.bench_vec_dot.restype = ctypes.c_double
    return h


def _ptr(a: np.ndarray) -> int:
    return a.ctypes.data


def child(lib_dir: Path, types: list[str], n_values: int, reps: int) -> dict:
    """Measure in this process; returns {type: {fn_mode: ns_per_block}} plus the SIMD level."""
    base = ctypes.CDLL(str(next(iter(sorted(lib_dir.glob("libggml-base.so*"))))), mode=ctypes.RTLD_GLOBAL)
    cpu = ctypes.CDLL(str(next(iter(sorted(lib_dir.glob("libggml-cpu.so*"))))), mode=ctypes.RTLD_GLOBAL)
    base.ggml_type_name.restype = ctypes.c_char_p
    base.ggml_type_name.argtypes = [ctypes.c_int]
    base.ggml_blck_size.restype = ctypes.c_int64
    base.ggml_blck_size.argtypes = [ctypes.c_int]
    base.ggml_get_type_traits.restype = ctypes.POINTER(_Traits)
    base.ggml_get_type_traits.argtypes = [ctypes.c_int]
    cpu.ggml_get_type_traits_cpu.restype = ctypes.POINTER(_TraitsCpu)
    cpu.ggml_get_type_traits_cpu.argtypes = [ctypes.c_int]
    cpu.ggml_cpu_init.restype = None
    cpu.ggml_cpu_init()
    ids = {}
    for i in range(base.ggml_type_count()):
        if base.ggml_blck_size(i) > 0:
            ids[base.ggml_type_name(i).decode()] = i
    base.ggml_turbo_simd_level.restype = ctypes.c_int
    out: dict = {"simd": base.ggml_turbo_simd_level(), "types": {}}

    rng = np.random.default_rng(0)
    x = rng.standard_normal(n_values).astype(np.float32)
    q = rng.standard_normal(64).astype(np.float32)
    with tempfile.TemporaryDirectory() as tmp:
        h = _helper(Path(tmp))
        for name in types:
            tid = ids[name]
            tr = base.ggml_get_type_traits(tid).contents
            trc = cpu.ggml_get_type_traits_cpu(tid).contents
            bs, ts = tr.blck_size, tr.type_size
            n_blocks = n_values // bs
            raw = np.zeros(n_blocks * ts, dtype=np.uint8)
            quantize = cpu.ggml_get_type_traits_cpu(tid).contents.from_float
            ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)(quantize)(
                _ptr(x), _ptr(raw), n_values)
            # the query in the K type's vec_dot_type: converted once (fa64) / a whole row (row)
            vt = trc.vec_dot_type
            vtr = base.ggml_get_type_traits(vt).contents
            vfrom = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)(
                cpu.ggml_get_type_traits_cpu(vt).contents.from_float)
            row_bytes = lambda n: n // vtr.blck_size * vtr.type_size  # noqa: E731
            qv = np.zeros(row_bytes(64) + 64, dtype=np.uint8)
            vfrom(_ptr(q), _ptr(qv), 64)
            yv = np.zeros(row_bytes(n_values) + 64, dtype=np.uint8)
            vfrom(_ptr(x), _ptr(yv), n_values)
            fbuf = np.zeros(n_values + 64, dtype=np.float32)
            sink = np.zeros(1, dtype=np.float32)
            res = {}
            n64 = n_values // 64
            b64 = 64 // bs * ts
            res["to_float fa64"] = h.bench_to_float(tr.to_float, _ptr(raw), _ptr(fbuf), n64, 64, b64, 0, reps) / n64
            res["to_float row"] = h.bench_to_float(tr.to_float, _ptr(raw), _ptr(fbuf), 1, n_values, 0, 0, reps) / n64
            res["vec_dot fa64"] = h.bench_vec_dot(trc.vec_dot, _ptr(raw), _ptr(qv), n64, 64, b64, 0, reps,
                                                  _ptr(sink)) / n64
            res["vec_dot row"] = h.bench_vec_dot(trc.vec_dot, _ptr(raw), _ptr(yv), 1, n_values, 0, 0, reps,
                                                 _ptr(sink)) / n64
            out["types"][name] = {k: v * 1e9 for k, v in res.items()}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", action="append", type=Path, default=None,
                    help="folder with libggml-base.so / libggml-cpu.so (repeatable; default: installed engine)")
    ap.add_argument("--paths", default="best", help="comma list of best, avx2, scalar")
    ap.add_argument("--types", default="turbo4,turbo3,turbo2,q4_0")
    ap.add_argument("--values", type=int, default=1 << 20)
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=1,
                    help="repeat every (lib, path) run this many times, interleaved, and keep the minimum")
    ap.add_argument("--json", type=Path, default=None, help="also write the results as JSON")
    ap.add_argument("--child", type=Path, default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    types = a.types.split(",")
    if a.child is not None:
        print(json.dumps(child(a.child, types, a.values, a.reps)))
        return 0

    libs = a.lib or [_installed_lib_dir()]
    runs = [(lib_dir, path) for lib_dir in libs for path in a.paths.split(",")]
    best: dict = {}
    for _ in range(a.rounds):
        for lib_dir, path in runs:
            env = dict(os.environ)
            env.pop("GGML_TURBO_NO_SIMD", None)
            env.pop("GGML_TURBO_SIMD_MAX", None)
            if path == "scalar":
                env["GGML_TURBO_NO_SIMD"] = "1"
            elif path == "avx2":
                env["GGML_TURBO_SIMD_MAX"] = "1"
            elif path != "best":
                ap.error(f"unknown path {path!r}")
            ty = types if path == "best" else [t for t in types if t.startswith("turbo")]
            proc = subprocess.run([sys.executable, __file__, "--child", str(lib_dir), "--types", ",".join(ty),
                                   "--values", str(a.values), "--reps", str(a.reps)],
                                  env=env, capture_output=True, text=True)
            if proc.returncode != 0:
                print(f"{lib_dir} {path}: failed\n{proc.stderr[-2000:]}", file=sys.stderr)
                return 1
            r = json.loads(proc.stdout.strip().splitlines()[-1])
            prev = best.setdefault((str(lib_dir), path), {"lib": str(lib_dir), "path": path, **r})
            for t, v in r["types"].items():
                prev["types"][t] = {k: min(x, prev["types"][t][k]) for k, x in v.items()}
    results = list(best.values())

    cols = ["to_float fa64", "vec_dot fa64", "to_float row", "vec_dot row"]
    print(f"ns per 64-value block, min of {a.reps} passes x {a.rounds} rounds over {a.values} values, 1 thread")
    print(f"{'lib':<40} {'path':<7} {'simd':>4} {'type':<7} " + " ".join(f"{c:>14}" for c in cols))
    for r in results:
        for t, v in r["types"].items():
            print(f"{r['lib'][-40:]:<40} {r['path']:<7} {r['simd']:>4} {t:<7} "
                  + " ".join(f"{v[c]:>14.1f}" for c in cols))
    if a.json:
        a.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
