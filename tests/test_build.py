"""Build driver: patches apply to the pinned sdist, a broken patch is named, fingerprints are stable."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from tqgguf.builder import PatchError
from tqgguf.builder import source
from tqgguf.builder import driver
from tqgguf.builder.driver import BuildConfig, fingerprint, fingerprint_inputs, installed_build_info, rebuild_reason


def _files_of_series() -> set[str]:
    import re

    files = set()
    for p in source.series():
        files.update(re.findall(r"^\+\+\+ b/(\S+)", p.read_text(), flags=re.M))
    return files


@pytest.fixture(scope="module")
def upstream_files(tmp_path_factory) -> Path:
    """The upstream files the series touches, extracted from the pinned (verified) sdist."""
    sdist = source.fetch_sdist(log=lambda m: None)
    root = tmp_path_factory.mktemp("upstream")
    prefix = f"{source.PIN.tree_name}/vendor/llama.cpp/"
    wanted = {prefix + f for f in _files_of_series()}
    with tarfile.open(sdist) as tf:
        members = [m for m in tf.getmembers() if m.name in wanted]
        for m in members:
            m.name = m.name[len(prefix):]
        tf.extractall(root, members=members)
    return root


def test_every_patch_applies_cleanly_to_the_pinned_tree(upstream_files, tmp_path):
    tree = tmp_path / "llama.cpp"
    shutil.copytree(upstream_files, tree)
    source.apply_patches(tree)
    assert "GGML_TYPE_TURBO4_0" in (tree / "ggml/include/ggml.h").read_text()
    assert '"turbo3"' in (tree / "ggml/src/ggml.c").read_text()


def test_a_patch_that_no_longer_applies_stops_the_build_and_is_named(upstream_files, tmp_path):
    tree = tmp_path / "llama.cpp"
    shutil.copytree(upstream_files, tree)
    h = tree / "ggml/include/ggml.h"
    h.write_text(h.read_text().replace("GGML_TYPE_COUNT   = 43,", "GGML_TYPE_Q3_0    = 43,\n        GGML_TYPE_COUNT   = 44,"))
    with pytest.raises(PatchError) as e:
        source.apply_patches(tree)
    msg = str(e.value)
    assert "0001-ggml-turbo-types.patch" in msg
    assert "ggml/include/ggml.h" in msg


def test_sdist_python_patches_apply_to_the_pinned_sdist_and_change_its_llama_py(tmp_path):
    """patches/sdist/series patches llama-cpp-python's own files (outside vendor/llama.cpp)."""
    sdist = source.fetch_sdist(log=lambda m: None)
    prefix = f"{source.PIN.tree_name}/llama_cpp/"
    with tarfile.open(sdist) as tf:
        members = [m for m in tf.getmembers() if m.name.startswith(prefix) and m.name.endswith(".py")]
        tf.extractall(tmp_path, members=members)
    root = tmp_path / source.PIN.tree_name
    before = (root / "llama_cpp/llama.py").read_text()
    assert source.sdist_series(), "patches/sdist/series lists no patch"
    source.apply_sdist_patches(root)
    after = (root / "llama_cpp/llama.py").read_text()
    assert "tq_kv_cache_type(type_k" in after and "tq_kv_cache_type" not in before
    assert "llama_tq_errors" in (root / "llama_cpp/llama_cpp.py").read_text()
    with pytest.raises(PatchError, match="0001-llama-py-kv-type-names-and-engine-errors.patch"):
        source.apply_sdist_patches(root)  # applied already: --forward refuses, named


def test_fingerprint_changes_with_the_sdist_python_patches(monkeypatch, tmp_path):
    a = fingerprint(BuildConfig())
    d = tmp_path / "patches"
    (d / "sdist").mkdir(parents=True)
    for p in source.series():
        (d / p.name).write_bytes(p.read_bytes())
    (d / "series").write_text((source.patches_dir() / "series").read_text())
    for p in source.sdist_series():
        (d / "sdist" / p.name).write_bytes(p.read_bytes() + b"\n")
    (d / "sdist" / "series").write_text((source.patches_dir() / "sdist" / "series").read_text())
    monkeypatch.setattr(source, "patches_dir", lambda: d)
    assert fingerprint(BuildConfig()) != a


def test_fingerprint_is_stable_and_changes_with_flags_and_backend():
    a, b = fingerprint(BuildConfig()), fingerprint(BuildConfig())
    assert a == b and len(a) == 64
    assert fingerprint(BuildConfig(backend="cuda", cuda_arch="90")) != a
    assert fingerprint(BuildConfig(extra_defines={"GGML_AVX512": "OFF"})) != a


@pytest.fixture
def native_copy(monkeypatch, tmp_path) -> Path:
    """A copy of native/ that the fingerprint reads instead of the checkout's."""
    copy = tmp_path / "native"
    shutil.copytree(source.native_dir(), copy)
    monkeypatch.setattr(source, "native_dir", lambda: copy)
    monkeypatch.setattr(driver, "native_dir", lambda: copy)
    return copy


def _fingerprints() -> dict[str, str]:
    return {b: fingerprint(BuildConfig(backend=b, cuda_arch="90" if b == "cuda" else None)) for b in driver.BACKENDS}


@pytest.mark.parametrize("rel,changes", [
    ("ggml/src/ggml-cuda/turbo-fattn.cuh", {"cuda"}),           # a CUDA-only commit: no CPU or Metal rebuild
    ("ggml/src/ggml-cuda/turbo-pairs.h", {"cuda", "metal"}),    # the FA pairs list, which Metal reads too
    ("ggml/src/ggml-metal/kernels/turbo-fa.h", {"metal"}),
    ("ggml/src/ggml-turbo.c", {"cpu", "cuda", "metal"}),        # the codec: every build compiles it
])
def test_the_fingerprint_covers_only_what_the_backend_compiles(native_copy, rel, changes):
    before = _fingerprints()
    f = native_copy / rel
    f.write_bytes(f.read_bytes() + b"\n// changed\n")
    after = _fingerprints()
    assert {b for b in before if before[b] != after[b]} == changes


def test_patches_that_touch_only_another_backend_are_left_out_of_the_fingerprint():
    cpu = fingerprint_inputs(BuildConfig())
    cuda = fingerprint_inputs(BuildConfig(backend="cuda", cuda_arch="90"))
    metal = fingerprint_inputs(BuildConfig(backend="metal"))
    assert "patches/0008-cuda-turbo.patch" in cuda and "patches/0008-cuda-turbo.patch" not in cpu | metal
    assert "patches/0010-metal-turbo.patch" in metal and "patches/0010-metal-turbo.patch" not in cpu | cuda
    assert "patches/0001-ggml-turbo-types.patch" in cpu.keys() & cuda.keys() & metal.keys()
    assert "native/ggml/src/ggml-cuda/turbo-fattn.cuh" in cuda and not any("ggml-cuda" in k for k in cpu)


def test_a_rebuild_says_what_changed(native_copy):
    cfg = BuildConfig()
    installed = {"fingerprint": fingerprint(cfg), "inputs": fingerprint_inputs(cfg)}
    (native_copy / "ggml/src/ggml-turbo.c").write_text("// changed\n")
    (native_copy / "ggml/src/ggml-turbo-new.h").write_text("// new\n")
    why = rebuild_reason(fingerprint_inputs(cfg), installed)
    assert why == ("rebuilding: changed native/ggml/src/ggml-turbo.c; new native/ggml/src/ggml-turbo-new.h since "
                   "the installed engine")
    assert rebuild_reason(fingerprint_inputs(cfg), None) == "building: no tqgguf engine is installed"
    assert rebuild_reason(fingerprint_inputs(cfg), installed, force=True) == "rebuilding: --force"
    assert "names no inputs" in rebuild_reason(fingerprint_inputs(cfg), {"fingerprint": "0f73"})


def test_an_engine_recorded_before_per_input_digests_is_restamped_not_rebuilt(native_copy, monkeypatch, tmp_path):
    """build() with a record that has only the old fingerprint, and it matches: no compile, the
    record gets the new fingerprint and inputs (nothing fetched or compiled: those would fail here)."""
    cfg = BuildConfig()
    record = tmp_path / "site" / "llama_cpp" / driver.BUILD_INFO_NAME
    record.parent.mkdir(parents=True)
    record.write_text(json.dumps({"fingerprint": driver.legacy_fingerprint(cfg), "backend": "cpu"}))
    cache = tmp_path / "cache"
    tools = cache / "build" / "tools-cpu"
    (tools / "bin").mkdir(parents=True)
    for t in cfg.targets:
        (tools / "bin" / t).write_text("")
    (tools / "fingerprint").write_text(driver.legacy_fingerprint(cfg))
    monkeypatch.setattr(driver, "cache_dir", lambda: cache)
    monkeypatch.setattr(driver, "_installed_record", lambda: record)
    lines: list[str] = []
    result = driver.build(cfg, log=lines.append)
    assert result.skipped and lines == ["the installed engine is this checkout's build; its record now names its inputs"]
    assert json.loads(record.read_text())["inputs"] == fingerprint_inputs(cfg)
    assert (tools / "fingerprint").read_text() == fingerprint(cfg) == result.fingerprint
    assert driver.build(cfg, log=lines.append).skipped and len(lines) == 1


def test_unknown_backend_is_refused_with_the_allowed_list():
    with pytest.raises(ValueError, match="cpu, cuda, metal"):
        BuildConfig(backend="vulkan")


def test_metal_backend_sets_metal_and_the_embedded_library():
    d = BuildConfig(backend="metal").defines()
    assert d["GGML_METAL"] == "ON" and d["GGML_METAL_EMBED_LIBRARY"] == "ON"
    assert "GGML_CUDA" not in d and "GGML_METAL" not in BuildConfig().defines()


def test_metal_backend_needs_macos():
    from tqgguf.builder.driver import missing_toolchain
    msg = missing_toolchain("metal", system="Linux")
    assert msg is not None and "needs macOS" in msg and "Linux" in msg and "--source-only" in msg
    assert missing_toolchain("metal", system="Darwin") is None


@pytest.mark.skipif(sys.platform == "darwin", reason="the refusal is for machines without macOS")
def test_build_metal_off_macos_is_refused_before_anything_is_fetched(tmp_path):
    env = dict(os.environ, TQGGUF_CACHE=str(tmp_path / "cache"))
    out = subprocess.run([sys.executable, "-m", "tqgguf", "build", "--backend", "metal"],
                         capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 1, out.stderr
    assert "--backend metal" in out.stderr and "needs macOS" in out.stderr
    assert not (tmp_path / "cache" / "src").exists() and not (tmp_path / "cache" / "sdist").exists()


def test_sdist_checksum_mismatch_is_refused(tmp_path, monkeypatch):
    bad = tmp_path / source.PIN.sdist_name
    bad.write_bytes(b"not the sdist")
    monkeypatch.setenv("TQGGUF_SDIST", str(bad))
    with pytest.raises(source.SourceError, match="does not match the pin"):
        source.fetch_sdist(log=lambda m: None)


@pytest.mark.engine
def test_second_build_with_nothing_changed_is_a_fast_no_op():
    info = installed_build_info()
    if info is None or info.get("fingerprint") != fingerprint(BuildConfig(backend=info.get("backend", "cpu"))):
        msg = "the installed engine is not this checkout's build (run tqgguf build)"
        if os.environ.get("TQGGUF_REQUIRE_ENGINE") == "1":  # CI builds first: it must be
            pytest.fail(msg, pytrace=False)
        pytest.skip(msg)
    out = subprocess.run([sys.executable, "-m", "tqgguf", "build", "--backend", info.get("backend", "cpu")],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "already built and installed" in out.stderr
    assert "nothing to do" in out.stderr


def test_generated_codebook_header_is_current():
    out = subprocess.run([sys.executable, "scripts/maintain/gen_turbo_tables.py", "--check"], capture_output=True,
                         text=True, cwd=Path(__file__).resolve().parents[1])
    assert out.returncode == 0, out.stderr


def _exported_libstdcxx(tmp_path, link_flags: str) -> int:
    """How many libstdc++ locale symbols (std::codecvt) a shared library exports when linked as
    the GPU image's compiler links: libstdc++ from its static archive (-static-libstdc++)."""
    import shutil
    import subprocess

    if shutil.which("g++") is None or shutil.which("nm") is None:
        pytest.skip("needs g++ and nm")
    src = tmp_path / "a.cpp"
    src.write_text('#include <regex>\n#include <sstream>\n#include <string>\nextern "C" int f() { std::ostringstream o; '
                   'o << "aa" << 1.5; return (int)std::regex_replace(o.str(), std::regex("a+"), "b").size(); }\n')
    lib = tmp_path / f"lib{abs(hash(link_flags))}.so"
    r = subprocess.run(["g++", "-shared", "-fPIC", "-static-libstdc++", "-o", str(lib), str(src), *link_flags.split()],
                       capture_output=True, text=True)
    if r.returncode != 0 and "libstdc++" in r.stderr:
        pytest.skip(f"no static libstdc++ here: {r.stderr.strip()[-200:]}")
    assert r.returncode == 0, r.stderr
    syms = subprocess.run(["nm", "-D", "--defined-only", "-C", str(lib)], capture_output=True, text=True, check=True).stdout
    return sum("codecvt" in line for line in syms.splitlines())


def test_the_cuda_engine_keeps_the_link_flags_ggml_rpc_needs(tmp_path):
    """-Wl,--exclude-libs,ALL hides a static libstdc++ (the GPU image's) in each library — the
    probe shows it does (>100 exported codecvt symbols without, 0 with) — but on the H200 it
    broke ggml RPC (SIGSEGV registering an RPC device; results/cuda/s10): the CUDA engine is
    linked without it, like the CPU one."""
    cuda, cpu = BuildConfig(backend="cuda").defines(), BuildConfig().defines()
    assert "CMAKE_SHARED_LINKER_FLAGS" not in cuda and "CMAKE_SHARED_LINKER_FLAGS" not in cpu
    assert _exported_libstdcxx(tmp_path, "") > 100
    assert _exported_libstdcxx(tmp_path, "-Wl,--exclude-libs,ALL") == 0


def _static_only_compiler(tmp_path) -> Path:
    """A C++ compiler as the GPU image's /opt/gcc is: the system's g++ in every answer, except that it
    has no libstdc++.so (``-print-file-name=libstdc++.so`` finds nothing, as GCC answers for a file
    it does not have: the bare name)."""
    real = shutil.which("g++")
    if real is None or subprocess.run([real, "-print-file-name=libstdc++.a"], capture_output=True,
                                      text=True).stdout.strip() == "libstdc++.a":
        pytest.skip("needs g++ with libstdc++.a")
    cxx = tmp_path / "bin" / "g++-static-only"
    cxx.parent.mkdir(parents=True, exist_ok=True)
    cxx.write_text(f'#!/bin/sh\n[ "$1" = "-print-file-name=libstdc++.so" ] && {{ echo libstdc++.so; exit 0; }}\n'
                   f'exec {real} "$@"\n')
    cxx.chmod(0o755)
    return cxx


def test_a_compiler_with_only_a_static_libstdcxx_is_refused_before_anything_is_fetched(tmp_path):
    """Linked by such a compiler, each engine library exports a private libstdc++, and torch / numpy /
    matplotlib in the same process crash (docs/CUDA.md, load order; the H200 run of session 16
    with the distribution's g++ has none of those crashes)."""
    cxx = _static_only_compiler(tmp_path)
    env = dict(os.environ, TQGGUF_CACHE=str(tmp_path / "cache"), CXX=str(cxx))
    env.pop(driver.STATIC_LIBSTDCXX_ENV, None)
    out = subprocess.run([sys.executable, "-m", "tqgguf", "build"], capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 1, out.stderr
    assert "only a static libstdc++" in out.stderr and str(cxx) in out.stderr and "CXX=/usr/bin/g++" in out.stderr
    assert not (tmp_path / "cache" / "src").exists() and not (tmp_path / "cache" / "sdist").exists()


def test_the_static_libstdcxx_check_names_the_cuda_host_compiler_and_can_be_waived(tmp_path):
    cxx = _static_only_compiler(tmp_path)
    good = shutil.which("g++")
    env = {"PATH": os.environ["PATH"], "CXX": good, "CUDAHOSTCXX": str(cxx)}
    assert driver.static_libstdcxx("cpu", env) is None          # the CPU engine never runs nvcc's host compiler
    msg = driver.static_libstdcxx("cuda", env)
    assert msg is not None and "(CUDAHOSTCXX)" in msg and "CUDAHOSTCXX=/usr/bin/g++" in msg
    assert driver.static_libstdcxx("cpu", {**env, "CXX": f"ccache {cxx}"}) is not None  # a launcher is looked through
    assert driver.static_libstdcxx("cuda", {**env, driver.STATIC_LIBSTDCXX_ENV: "1"}) is None
    assert driver.static_libstdcxx("metal", {**env, "CXX": str(cxx)}) is None
