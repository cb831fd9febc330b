"""The device functions of the CUDA turbo code (native/ggml/src/ggml-cuda/turbo.cuh) run on
the CPU and checked against the numpy reference: no GPU needed, so every CI run checks them.

tests/cuda_host/common.cuh stands in for ggml-cuda's common.cuh (CUDA qualifiers as nothing,
IEEE fp16 conversions, __byte_perm, dp4a); tests/cuda_host/turbo_host_check.cpp calls the
functions the flash-attention vector kernel, GET_ROWS and the f16 conversion use, one emulated
thread at a time, on random blocks (every index value, scales from subnormal to large fp16):

- the index of every element (ggml_cuda_turbo_index) and dequantize_turbo: d * c[idx];
- dequantize_V_turbo (the V rows of the FA kernel, fp16 codebook planes in registers): fp32
  path d * fp16(c), half path fp16(fp16(d) * fp16(c));
- vec_dot_fattn_vec_KQ_turbo (K.Q of the FA kernel: int8 codebook round(c * 127 / max|c|),
  dp4a with q8_1 Q) summed over the threads of a row, at head dims 64/128/256 and 2, 4, 8 and
  16 and 32 threads per row (up to D/4), against the same sum in float64.

And one host-side choice: ggml_cuda_turbo_fa_gqa_cols, the Q heads per block of the FA vector
kernel (grouped only when the grid still fills a wave of the GPU; the GGML_CUDA_TURBO_FA_GQA knob).

The kernels themselves (launch shapes, shared memory, the upstream kernel around these
functions) are checked on the GPU machine (scripts/gpu/cuda.sh, docs/CUDA.md).
"""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tqgguf.builder.source import source_tree
from tqgguf.reference import codec

ROOT = Path(__file__).resolve().parents[1]
HERE = ROOT / "tests" / "cuda_host"
TYPES = {"turbo4_0": codec.Turbo4_0, "turbo3_0": codec.Turbo3_0, "turbo2_0": codec.Turbo2_0}
NBLK = 64  # 16 rows of head dim 256
THREADS = (2, 4, 8, 16, 32)  # threads per K row, at most D/4 (one Q int each), as the kernel allows


@pytest.fixture(scope="module")
def harness(tmp_path_factory) -> Path:
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        pytest.skip("no C++ compiler")
    tree = source_tree() / "vendor" / "llama.cpp"
    if not (tree / "ggml" / "src" / "ggml-common.h").exists():
        pytest.skip(f"no patched source tree at {tree} (tqgguf build makes it)")
    exe = tmp_path_factory.mktemp("cuda-host") / "turbo_host_check"
    cmd = [cxx, "-std=c++17", "-O1", "-Wall", "-Werror", "-Wno-unused-function", "-Wno-unknown-pragmas",
           "-ffp-contract=off", f"-I{HERE}", f"-I{ROOT / 'native/ggml/src/ggml-cuda'}", f"-I{ROOT / 'native/ggml/src'}",
           f"-I{tree / 'ggml/src'}", f"-I{tree / 'ggml/include'}", str(HERE / "turbo_host_check.cpp"), "-o", str(exe)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-4000:]
    return exe


def _random_blocks(tt, rng) -> np.ndarray:
    """NBLK raw blocks: uniform random index bytes, fp16 scales from 1e-7 (subnormal) to 1e2."""
    d = (rng.standard_normal(NBLK) * 10.0 ** rng.uniform(-7, 2, NBLK)).astype(np.float16)
    _, idx = tt.encode(rng.standard_normal((NBLK, 64)).astype(np.float32))
    raw = tt.pack(d, idx)
    qs = raw[:, 2:]
    qs[:] = rng.integers(0, 256, qs.shape, dtype=np.uint8)  # every bit pattern, not only encoder output
    return raw


def _run(harness: Path, name: str, raw: np.ndarray, q: np.ndarray, qd: np.ndarray, tmp_path: Path) -> dict:
    inp, out = tmp_path / f"{name}.in", tmp_path / f"{name}.out"
    inp.write_bytes(raw.tobytes() + q.astype(np.int8).tobytes() + qd.astype(np.float32).tobytes())
    r = subprocess.run([str(harness), name, str(NBLK), str(inp), str(out)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    data = out.read_bytes()
    n = NBLK * 64
    res, off = {}, 0
    for key, dt in (("index", np.int32), ("deq", np.float32), ("v_f32", np.float32), ("v_f16", np.float32),
                    ("rows", np.float32)):
        res[key] = np.frombuffer(data, dt, n, off)
        off += 4 * n
    for d in (64, 128, 256):
        for nt in (t for t in THREADS if t <= d // 4):
            res[(d, nt)] = np.frombuffer(data, np.float32, n // d, off)
            off += 4 * (n // d)
    assert off == len(data)
    return res


def _i8_codebook(c: np.ndarray) -> np.ndarray:
    """turbo.cuh's int8 K codebook in float32 arithmetic, as its constexpr code computes it:
    step = c[-1] / 127, byte = trunc(c/step +- 0.5)."""
    step = np.float32(c[-1]) / np.float32(127)
    q = c.astype(np.float32) / step
    return np.trunc(np.where(q >= 0, q + np.float32(0.5), q - np.float32(0.5))).astype(np.int64), step


@pytest.mark.parametrize("name", list(TYPES))
def test_cuda_turbo_device_functions_match_the_reference(harness, name, tmp_path):
    tt = TYPES[name]
    rng = np.random.default_rng(list(TYPES).index(name) + 7)
    raw = _random_blocks(tt, rng)
    q = rng.integers(-127, 128, NBLK * 64)
    qd = rng.uniform(1e-3, 1e-1, NBLK * 2).astype(np.float32)
    got = _run(harness, name, raw, q, qd, tmp_path)

    d16, idx = tt.unpack(raw)
    d = d16.astype(np.float32).reshape(-1, 1)
    c = tt.centroids().astype(np.float32)
    assert np.array_equal(got["index"].reshape(NBLK, 64), idx)
    assert {int(v) for v in np.unique(idx)} == set(range(len(c)))  # every level was exercised
    assert np.array_equal(got["deq"].reshape(NBLK, 64), d * c[idx])
    assert np.array_equal(got["rows"].reshape(NBLK, 64), d * c[idx])  # NaN (an element no quarter wrote) fails
    c16 = c.astype(np.float16).astype(np.float32)
    assert np.array_equal(got["v_f32"].reshape(NBLK, 64), d * c16[idx])
    assert np.array_equal(got["v_f16"].reshape(NBLK, 64), (d * c16[idx]).astype(np.float16).astype(np.float32))

    i8, step = _i8_codebook(c)
    assert np.abs(i8).max() == 127 and np.all(np.diff(i8) > 0)
    k = (d.astype(np.float64) * i8[idx] * np.float64(step)).reshape(-1)   # the values K.Q sees
    qv = q.astype(np.float64) * np.repeat(qd.astype(np.float64), 32)
    for dim in (64, 128, 256):
        terms = (k * qv).reshape(-1, dim)
        want, scale = terms.sum(axis=1), np.abs(terms).sum(axis=1)
        for nt in (t for t in THREADS if t <= dim // 4):
            err = np.abs(got[(dim, nt)] - want)
            assert np.all(err <= 2e-6 * scale + 1e-30), (dim, nt, float((err / np.maximum(scale, 1e-30)).max()))


@pytest.mark.parametrize("case, want", [
    # SmolLM2-135M (head dim 64, 9 Q heads, 3 KV heads), one sequence, H200 (132 SMs): at
    # small depth the grid of 3 blocks x 4 KV parts would leave the GPU empty -> no grouping;
    # at 8K and 32K the grouped grid still fills a wave (132 x 2 blocks) -> G = 3
    (("64", "turbo4_0", "turbo4_0", "9", "3", "256", "1", "132"), 1),
    (("64", "turbo4_0", "turbo4_0", "9", "3", "8448", "1", "132"), 3),
    (("64", "turbo4_0", "turbo4_0", "9", "3", "32896", "1", "132"), 3),
    (("64", "q8_0", "turbo4_0", "9", "3", "32896", "1", "132"), 3),
    # 64 sequences of 4K in their own streams: G = 3 even at n_kv 4224
    (("64", "turbo4_0", "turbo4_0", "9", "3", "4224", "64", "132"), 3),
    # the FA micro-benchmark case (hd 128, 8 KV heads, GQA 4, KV 32768): G = 2 (the most at hd 128)
    (("128", "turbo4_0", "turbo4_0", "32", "8", "32768", "1", "132"), 2),
    # a smaller GPU fills sooner: 20 SMs -> G = 3 at 2K already, not at 256
    (("64", "turbo3_0", "turbo3_0", "9", "3", "2048", "1", "20"), 3),
    (("64", "turbo3_0", "turbo3_0", "9", "3", "256", "1", "20"), 1),
    # head dim 256 (Gemma-3), no turbo side, ALiBi: never grouped
    (("256", "turbo4_0", "turbo4_0", "4", "1", "32768", "1", "132"), 1),
    (("64", "f16", "q8_0", "9", "3", "32896", "1", "132"), 1),
    (("64", "turbo4_0", "turbo4_0", "9", "3", "32896", "1", "132", "8.0"), 1),
    # GQA 8 at head dim 64: the largest divisor <= 4
    (("64", "turbo4_0", "turbo4_0", "64", "8", "7680", "1", "132"), 4),
])
def test_cuda_fa_grouping_needs_a_full_wave(harness, case, want):
    """ggml_cuda_turbo_fa_gqa_cols: Q heads per block of the FA vector kernel (docs/CUDA.md)."""
    r = subprocess.run([str(harness), "gqa", *case], capture_output=True, text=True, env={})
    assert r.returncode == 0, r.stderr
    assert int(r.stdout) == want


@pytest.mark.parametrize("env, n_kv, want", [("1", "32896", 1), ("4", "256", 3), ("2", "256", 1), ("8", "256", 3),
                                               ("9", "256", 1)])
def test_cuda_fa_grouping_knob(harness, env, n_kv, want):
    """GGML_CUDA_TURBO_FA_GQA=N: the largest G <= N dividing the GQA ratio, whatever the grid
    (SmolLM2's ratio 3: N = 2 gives 1; the vector kernel has at most 4, so 8 gives 3); a value
    outside 1..8 is reported and the rule applies."""
    r = subprocess.run([str(harness), "gqa", "64", "turbo4_0", "turbo4_0", "9", "3", n_kv, "1", "132"],
                       capture_output=True, text=True, env={"GGML_CUDA_TURBO_FA_GQA": env})
    assert r.returncode == 0, r.stderr
    assert int(r.stdout) == want
    assert ("not an integer from 1 to 8" in r.stderr) == (env == "9")


def test_cuda_fa_decode_kernel_emulated(tmp_path):
    """The turbo FA decode kernel (turbo-fattn-dec.cuh) itself, run on the CPU by
    tests/cuda_host/fa_dec_emul.cpp (one OS thread per CUDA thread, shuffles and barriers
    emulated) against double-precision attention: every case NMSE < 1e-4 (measured ~1e-6)."""
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        pytest.skip("no C++ compiler")
    tree = source_tree() / "vendor" / "llama.cpp"
    if not (tree / "ggml" / "src" / "ggml-common.h").exists():
        pytest.skip(f"no patched source tree at {tree} (tqgguf build makes it)")
    exe = tmp_path / "fa_dec_emul"
    cmd = [cxx, "-std=c++20", "-O1", "-pthread", "-ffp-contract=off", "-Wno-unknown-pragmas", f"-I{HERE}",
           f"-I{ROOT / 'native/ggml/src/ggml-cuda'}", f"-I{ROOT / 'native/ggml/src'}", f"-I{tree / 'ggml/src'}",
           f"-I{tree / 'ggml/include'}", str(HERE / "fa_dec_emul.cpp"), "-o", str(exe)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0 and "<barrier>" in r.stderr:
        pytest.skip("the C++ library has no std::barrier (C++20)")
    assert r.returncode == 0, r.stderr[-4000:]
    r = subprocess.run([str(exe)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert "all OK" in r.stdout
