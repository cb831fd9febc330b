"""The CUDA pieces that can be checked without a GPU: the pair list, the CMake generator
that turns it into translation units, how `tqgguf info` reads the backend's pair list, and
`-ngl` on an engine without a GPU backend. The kernels themselves are checked on the GPU
machine (scripts/gpu/cuda.sh; docs/CUDA.md has the results)."""
from __future__ import annotations

import itertools
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tqgguf.commands.info import turbo_fa_pairs

CUDA_DIR = Path(__file__).resolve().parents[1] / "native" / "ggml" / "src" / "ggml-cuda"
TURBO = ("TURBO4_0", "TURBO3_0", "TURBO2_0")
OTHER = ("F16", "BF16", "Q8_0", "Q4_0")


def header_pairs() -> list[tuple[str, str]]:
    text = (CUDA_DIR / "turbo-pairs.h").read_text()
    return re.findall(r"X\(([A-Z0-9_]+), *([A-Z0-9_]+)\)", text)


def test_the_pair_list_is_every_kv_pair_with_a_turbo_side_once():
    pairs = header_pairs()
    types = TURBO + OTHER
    wanted = {(k, v) for k, v in itertools.product(types, types) if k in TURBO or v in TURBO}
    assert len(pairs) == len(set(pairs)) == 33
    assert set(pairs) == wanted


@pytest.mark.skipif(shutil.which("cmake") is None, reason="cmake not installed")
def test_turbo_cmake_generates_one_instance_file_per_pair(tmp_path):
    script = tmp_path / "run.cmake"
    script.write_text(
        f'set(CMAKE_CURRENT_SOURCE_DIR "{CUDA_DIR}")\n'
        f'set(CMAKE_CURRENT_BINARY_DIR "{tmp_path}")\n'
        'set(GGML_SOURCES_CUDA "upstream.cu")\n'
        f'include("{CUDA_DIR}/turbo.cmake")\n'
        'list(LENGTH GGML_SOURCES_CUDA N)\n'
        'message(STATUS "N=${N}")\n')
    r = subprocess.run(["cmake", "-P", str(script)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "N=34" in r.stdout + r.stderr  # upstream.cu + 33 generated units
    files = sorted((tmp_path / "tqgguf-fattn-vec").glob("*.cu"))
    assert len(files) == 33
    one = (tmp_path / "tqgguf-fattn-vec" / "fattn-vec-instance-q8_0-turbo4_0.cu").read_text()
    assert f'#include "{CUDA_DIR}/fattn-vec.cuh"' in one
    for d in (64, 128, 256):
        assert f"DECL_FATTN_VEC_CASE({d}, GGML_TYPE_Q8_0, GGML_TYPE_TURBO4_0);" in one
    # a second configure leaves the files alone (no recompilation of 99 kernels)
    before = {f: f.stat().st_mtime_ns for f in files}
    assert subprocess.run(["cmake", "-P", str(script)], capture_output=True).returncode == 0
    assert {f: f.stat().st_mtime_ns for f in files} == before


def test_info_reads_the_backend_pair_list_by_ggml_name():
    sysinfo = ("CUDA : ARCHS = 900 | USE_GRAPHS = 1 | FA_QUANTS = q4_0-q4_0,f16-f16 | "
               "TURBO_FA = TURBO4_0/TURBO4_0 Q8_0/TURBO4_0 TURBO3_0/BF16  | CPU : SSE3 = 1 | AVX2 = 1 |")
    assert turbo_fa_pairs(sysinfo) == ["turbo4/turbo4", "q8_0/turbo4", "turbo3/bf16"]
    assert turbo_fa_pairs("CPU : SSE3 = 1 | AVX2 = 1 |") == []


@pytest.mark.engine
def test_gpu_layers_on_an_engine_without_a_gpu_backend_are_refused(model_file):
    import json

    from tqgguf.builder import installed_build_info

    if (installed_build_info() or {}).get("backend", "cpu") != "cpu":
        pytest.skip("this check is about a CPU-only engine")
    smol = model_file("smollm2-135m")
    r = subprocess.run(["tqgguf", "ppl", str(smol), "-ngl", "99", "--chunks", "1", "-c", "128"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2  # a usage error, as in every verb (options.check_gpu_layers)
    assert "built for the CPU only" in r.stderr and "tqgguf build --backend cuda" in r.stderr
    info = json.loads(subprocess.run(["tqgguf", "info", "--json"], capture_output=True, text=True).stdout)
    assert info["gpu_offload"] is False and info["turbo_fa_pairs"] == []


def test_backend_cuda_without_nvcc_says_what_is_missing(tmp_path):
    from tqgguf.builder.driver import missing_toolchain

    root = tmp_path / "cuda"
    (root / "bin").mkdir(parents=True)
    env = {"PATH": str(root / "bin")}
    gpu = lambda: True  # noqa: E731
    msg = missing_toolchain("cuda", env, default_dirs=(), lib_dirs=(), has_gpu=gpu)
    assert msg is not None and "nvcc" in msg and "CUDACXX" in msg
    fake = root / "bin" / "nvcc"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    # nvcc but no cuBLAS (the PyPI compiler wheels alone): refused before CMake says it
    msg = missing_toolchain("cuda", env, default_dirs=(), lib_dirs=(), has_gpu=gpu)
    assert msg is not None and "cuBLAS" in msg and str(root / "lib64") in msg
    (root / "targets" / "x86_64-linux" / "lib").mkdir(parents=True)
    (root / "targets" / "x86_64-linux" / "lib" / "libcublas.so.12").write_text("")
    assert missing_toolchain("cuda", env, default_dirs=(), lib_dirs=(), has_gpu=gpu) is None
    assert missing_toolchain("cuda", {"PATH": "/nonexistent", "CUDACXX": str(fake)}, default_dirs=(), lib_dirs=(),
                             has_gpu=gpu) is None
    assert missing_toolchain("cuda", {"PATH": "/nonexistent", "CUDA_PATH": str(tmp_path)}, default_dirs=(),
                             lib_dirs=(), has_gpu=gpu) is not None  # CUDA_PATH/bin/nvcc does not exist there
    # no GPU to build for: --cuda-arch names one; with it the build needs no GPU
    msg = missing_toolchain("cuda", env, default_dirs=(), lib_dirs=(), has_gpu=lambda: False)
    assert msg is not None and "--cuda-arch" in msg and "90 (H100/H200)" in msg
    assert missing_toolchain("cuda", env, default_dirs=(), lib_dirs=(), has_gpu=lambda: False, cuda_arch="90") is None
    assert missing_toolchain("cpu", {"PATH": "/nonexistent"}, default_dirs=()) is None
