"""Configure, compile and install the patched engine; skip all of it when nothing changed.

Fingerprint = sha256 over (pin, every patch in series order (llama.cpp, then the sdist's own), every native/ file, the CMake
definitions, the backend, the machine) — of the patches and native/ files, only those the backend
compiles (``source.READ_BY``: a change under ``ggml-cuda/`` is no rebuild of a CPU engine). The
wheel carries ``llama_cpp/_tqgguf_build.json`` with it (the fingerprint and a digest per input), so
``installed_build_info()`` can tell without importing llama_cpp whether the installed engine is
the one this checkout would build, and :func:`rebuild_reason` what changed.
"""
from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from importlib.util import find_spec
from pathlib import Path
from typing import Callable

from ..fsutil import cache_dir
from .source import PIN, native_dir, native_files, patch_read_by, prepare_tree, sdist_series, series, source_tree

BACKENDS = ("cpu", "cuda", "metal")
TOOL_TARGETS = ("llama-perplexity", "llama-bench", "llama-server", "test-backend-ops")
#: Built by every ``tqgguf build`` (``tqgguf serve`` runs it); ``--tools`` adds the rest of TOOL_TARGETS.
SERVER_TARGET = "llama-server"
#: llama.cpp's RPC worker (tools/rpc), built by every ``tqgguf build`` from the same patched tree,
#: so it knows the turbo types; ``tqgguf rpc-server`` runs it.
RPC_SERVER_TARGET = "ggml-rpc-server"
#: What every build compiles next to the engine.
ALWAYS_TARGETS = (SERVER_TARGET, RPC_SERVER_TARGET)
BUILD_INFO_NAME = "_tqgguf_build.json"




@dataclass
class BuildConfig:
    """What to build.

    backend: "cpu" | "cuda" | "metal". cuda_arch: CMAKE_CUDA_ARCHITECTURES (e.g. "90").
    jobs: parallel compile jobs (default: all cores). tools: build every TOOL_TARGETS entry
    (without it, only ALWAYS_TARGETS are built next to the engine). Every backend is built
    with ggml's RPC backend (GGML_RPC=ON), so any engine can use ``--rpc`` workers.
    """

    backend: str = "cpu"
    cuda_arch: str | None = None
    jobs: int | None = None
    tools: bool = False
    extra_defines: dict[str, str] = field(default_factory=dict)

    def __post_init__(self):
        if self.backend not in BACKENDS:
            raise ValueError(f"unknown backend {self.backend!r}; allowed: {', '.join(BACKENDS)}")

    @property
    def targets(self) -> tuple[str, ...]:
        """The llama.cpp programs this build compiles into ``tools-<backend>/bin``."""
        base = TOOL_TARGETS if self.tools else ()
        return base + tuple(t for t in ALWAYS_TARGETS if t not in base)

    def defines(self) -> dict[str, str]:
        """CMake definitions for the engine (also used for the tools build)."""
        d = {
            "CMAKE_BUILD_TYPE": "Release",
            "GGML_NATIVE": "ON",
            "GGML_CCACHE": "ON",
            "LLAVA_BUILD": "OFF",
            "LLAMA_BUILD_TESTS": "OFF",
            "LLAMA_BUILD_EXAMPLES": "OFF",
            # ggml's RPC backend in the engine and in llama-server (--rpc), and its worker
            "GGML_RPC": "ON",
            # AMX from -march=native crashes in ggml_backend_amx_mul_mat on some Xeons
            # (llama.cpp issue #20824); KV caches gain nothing from it.
            "CMAKE_C_FLAGS": "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16" if _is_x86() else "",
            "CMAKE_CXX_FLAGS": "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16" if _is_x86() else "",
        }
        if self.backend == "cuda":
            d["GGML_CUDA"] = "ON"
            d["CMAKE_CUDA_ARCHITECTURES"] = self.cuda_arch or "native"
            # not -Wl,--exclude-libs,ALL: it keeps a static libstdc++ local to each library, but
            # measured on the H200 it also breaks ggml RPC (SIGSEGV in libllama when the RPC device
            # registers); a compiler with only a static libstdc++ is refused instead
            # (static_libstdcxx, docs/CUDA.md "load order")
        elif self.backend == "metal":
            # the Metal source (with our turbo kernels, inlined by ggml-metal/turbo-embed.cmake)
            # goes into the library and is compiled at run time: no default.metallib to ship
            d["GGML_METAL"] = "ON"
            d["GGML_METAL_EMBED_LIBRARY"] = "ON"
        d.update(self.extra_defines)
        return {k: v for k, v in d.items() if v != ""}


@dataclass
class BuildResult:
    fingerprint: str
    skipped: bool
    seconds: float
    wheel: Path | None
    tools_dir: Path | None
    log: Path


def _is_x86() -> bool:
    return platform.machine().lower() in ("x86_64", "amd64")


def fingerprint_inputs(cfg: BuildConfig) -> dict[str, str]:
    """Everything that determines the built engine, each as a short sha256 of its bytes, in
    order: ``pin``, ``patches/NAME``, ``patches/sdist/NAME``, ``native/PATH`` (only the patches
    and files ``cfg.backend`` compiles: ``source.READ_BY``), ``defines``, ``platform``."""
    def digest(data: bytes) -> str:
        return hashlib.sha256(data).hexdigest()[:16]

    out = {"pin": digest(f"{PIN.package}=={PIN.version} {PIN.sha256}".encode())}
    out.update({f"patches/{p.name}": digest(p.read_bytes()) for p in series() if patch_read_by(p, cfg.backend)})
    out.update({f"patches/sdist/{p.name}": digest(p.read_bytes()) for p in sdist_series()})
    out.update({f"native/{rel.as_posix()}": digest((native_dir() / rel).read_bytes())
                for rel in native_files(cfg.backend)})
    out["defines"] = digest(json.dumps(cfg.defines(), sort_keys=True).encode())
    out["platform"] = digest(f"{cfg.backend} {platform.machine()} {sys.version_info[:2]}".encode())
    return out


def fingerprint(cfg: BuildConfig) -> str:
    """sha256 of :func:`fingerprint_inputs` (see module docstring)."""
    return fingerprint_of(fingerprint_inputs(cfg))


def fingerprint_of(inputs: dict[str, str]) -> str:
    return hashlib.sha256(json.dumps(inputs).encode()).hexdigest()


def rebuild_reason(inputs: dict[str, str], installed: dict | None, *, force: bool = False,
                   missing_tools: list[str] | None = None) -> str:
    """One line saying why ``tqgguf build`` compiles: ``--force``, no engine of ours installed,
    the inputs that changed since the installed build (its record's ``inputs``: added, removed,
    changed; the first few named), or the llama.cpp programs that are missing."""
    if force:
        return "rebuilding: --force"
    if installed is None:
        return "building: no tqgguf engine is installed"
    before = installed.get("inputs")
    if installed.get("fingerprint") == fingerprint_of(inputs) or before == inputs:
        return f"building: missing or stale llama.cpp programs ({', '.join(missing_tools or []) or 'none named'})"
    if not isinstance(before, dict):
        return "rebuilding: the installed engine's build record names no inputs (built before per-file " \
               "fingerprints), so what changed is unknown"
    changed = [k for k in inputs if k in before and before[k] != inputs[k]]
    added = [k for k in inputs if k not in before]
    removed = [k for k in before if k not in inputs]
    parts = [f"{what} {', '.join(keys[:4])}{f' (+{len(keys) - 4} more)' if len(keys) > 4 else ''}"
             for what, keys in (("changed", changed), ("new", added), ("gone", removed)) if keys]
    return "rebuilding: " + "; ".join(parts) + " since the installed engine"


def _installed_record() -> Path | None:
    spec = find_spec("llama_cpp")
    if spec is None or not spec.submodule_search_locations:
        return None
    return next((f for loc in spec.submodule_search_locations if (f := Path(loc) / BUILD_INFO_NAME).exists()), None)


def installed_build_info() -> dict | None:
    """The build record of the installed llama_cpp package, or None if it is not ours."""
    f = _installed_record()
    return json.loads(f.read_text()) if f is not None else None


def legacy_fingerprint(cfg: BuildConfig) -> str:
    """The fingerprint as builds before per-input digests computed it (every native/ file and
    patch, whatever the backend): an installed engine whose record has no ``inputs`` and this
    fingerprint is this checkout's build, and :func:`build` restamps its record instead of
    compiling again."""
    h = hashlib.sha256()
    h.update(f"{PIN.package}=={PIN.version} {PIN.sha256}\n".encode())
    for p in series():
        h.update(p.name.encode() + b"\0" + p.read_bytes())
    for p in sdist_series():
        h.update(b"sdist/" + p.name.encode() + b"\0" + p.read_bytes())
    for rel in native_files():
        h.update(str(rel).encode() + b"\0" + (native_dir() / rel).read_bytes())
    h.update(json.dumps(cfg.defines(), sort_keys=True).encode())
    h.update(f"{cfg.backend} {platform.machine()} {sys.version_info[:2]}".encode())
    return h.hexdigest()


def _restamp(fp: str, inputs: dict[str, str], tools_dir: Path) -> None:
    """Write the current fingerprint and inputs into the installed engine's record and the
    tools' stamp (the engine itself is unchanged: its legacy fingerprint matched)."""
    f = _installed_record()
    if f is not None:
        f.write_text(json.dumps({**json.loads(f.read_text()), "fingerprint": fp, "inputs": inputs}, indent=1))
    (tools_dir / "fingerprint").write_text(fp)


def _run_logged(cmd: list[str], log: Path, env: dict, on_line: Callable[[str], None], cwd: Path | None = None) -> None:
    with open(log, "a") as lf:
        lf.write(f"\n$ {' '.join(cmd)}\n")
        lf.flush()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                env=env, cwd=cwd, bufsize=1)
        tail: list[str] = []
        assert proc.stdout is not None
        for line in proc.stdout:
            lf.write(line)
            lf.flush()  # the log is what a user watches during a long compile: keep it current
            tail = (tail + [line.rstrip()])[-40:]
            on_line(line)
        rc = proc.wait()
    if rc != 0:
        raise RuntimeError(f"command failed (exit {rc}): {' '.join(cmd[:4])} ...\n"
                           + "\n".join(tail) + f"\nfull log: {log}")


NINJA_PROGRESS = re.compile(r"\[(\d+)/(\d+)\]")


#: where a distribution's CUDA packages put libcublas when it is not beside nvcc
CUBLAS_SYSTEM_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib")


def _has_gpu() -> bool:
    """Whether ``nvidia-smi -L`` lists an NVIDIA GPU (False without the driver's tool)."""
    try:
        r = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return False
    return r.returncode == 0 and "GPU" in r.stdout


def missing_toolchain(backend: str, environ: dict | None = None,
                      default_dirs: tuple[str, ...] = ("/usr/local/cuda/bin",), system: str | None = None,
                      cuda_arch: str | None = None, lib_dirs: tuple[str, ...] = CUBLAS_SYSTEM_DIRS,
                      has_gpu: Callable[[], bool] = _has_gpu) -> str | None:
    """What the machine lacks to compile ``backend``, or None. Checked before anything is
    fetched or compiled.

    CUDA needs nvcc: ``CUDACXX``, else ``nvcc`` on PATH, else ``$CUDA_PATH/bin/nvcc`` or
    ``/usr/local/cuda/bin/nvcc`` (where CMake's CUDA language support looks); cuBLAS, which
    ggml-cuda links (``libcublas.*`` in the toolkit beside nvcc — ``lib64``, ``lib``,
    ``targets/*/lib`` — or in ``lib_dirs``, as CMake's FindCUDAToolkit looks); and, without
    ``cuda_arch``, a GPU to build for (``CMAKE_CUDA_ARCHITECTURES=native``; ``has_gpu``,
    default: ``nvidia-smi -L``). Metal needs macOS (``system``, default ``platform.system()``,
    must be ``"Darwin"``): ggml's Metal backend links Apple's Foundation/Metal/MetalKit
    frameworks, which exist nowhere else.
    """
    env = os.environ if environ is None else environ
    if backend == "metal":
        system = platform.system() if system is None else system
        if system != "Darwin":
            return (f"--backend metal builds ggml's Metal backend, which needs macOS (Apple's Metal and Foundation "
                    f"frameworks); this machine runs {system or 'an unknown system'}. Build on a Mac (Apple Silicon), "
                    f"use --backend cpu or cuda here, or write the patched tree with --source-only DIR and build it on a Mac")
        return None
    if backend != "cuda":
        return None
    candidates = [env.get("CUDACXX"), shutil.which("nvcc", path=env.get("PATH")),
                  str(Path(env["CUDA_PATH"]) / "bin" / "nvcc") if env.get("CUDA_PATH") else None,
                  *(str(Path(d) / "nvcc") for d in default_dirs)]
    nvcc = next((Path(c) for c in candidates if c and Path(c).is_file()), None)
    if nvcc is None:
        return ("--backend cuda needs the CUDA toolkit's compiler, nvcc, and found none (not CUDACXX, not on PATH, "
                "not $CUDA_PATH/bin, not /usr/local/cuda/bin): install the CUDA toolkit (e.g. the `cuda-toolkit` "
                "package of your distribution or NVIDIA's installer) or point CUDACXX at nvcc")
    root = nvcc.resolve().parent.parent
    where = [root / "lib64", root / "lib", *sorted((root / "targets").glob("*/lib")), *map(Path, lib_dirs)]
    if not any(any(d.glob("libcublas.*")) or any(d.glob("cublas*.lib")) for d in where if d.is_dir()):
        return (f"--backend cuda links ggml-cuda against cuBLAS and found no libcublas beside nvcc ({nvcc}: "
                f"{root}/lib64, {root}/targets/*/lib) or in {', '.join(lib_dirs)}: install the toolkit's cuBLAS "
                f"(e.g. NVIDIA's `libcublas-dev-12-*` / `cuda-libraries-dev-12-*` packages), or point CUDACXX or "
                f"CUDA_PATH at a toolkit that has it")
    if not cuda_arch and not has_gpu():
        return ("--backend cuda without --cuda-arch builds for this machine's GPUs (CMAKE_CUDA_ARCHITECTURES=native), "
                "and nvidia-smi finds none: pass --cuda-arch for the GPU the build is for, e.g. 90 (H100/H200), "
                "89 (L4, RTX 40xx), 86 (A10, RTX 30xx), 80 (A100)")
    return None


#: Set to 1 to build with a C++ compiler that has only a static libstdc++ (see static_libstdcxx;
#: described in tqgguf.variables).
STATIC_LIBSTDCXX_ENV = "TQGGUF_STATIC_LIBSTDCXX"


def _cxx_compilers(backend: str, env: dict) -> list[tuple[str, list[str]]]:
    """The C++ compilers CMake will link the engine's libraries with, each as (where it came from,
    argument list): ``CXX`` (else ``c++``, else ``g++`` on PATH: the first names of CMake's own
    search), and for CUDA also ``CUDAHOSTCXX`` (nvcc's host compiler) when set. A launcher in front
    (``ccache g++``) is skipped; a compiler named twice is listed once."""
    path = env.get("PATH")
    found = [("CXX", env.get("CXX")), ("c++ on PATH", shutil.which("c++", path=path)),
             ("g++ on PATH", shutil.which("g++", path=path))]
    cxx = next(((src, c) for src, c in found if c), None)
    out: list[tuple[str, list[str]]] = []
    for src, c in (cxx, ("CUDAHOSTCXX", env.get("CUDAHOSTCXX") if backend == "cuda" else None)):
        if c:
            args = shlex.split(c)
            if len(args) > 1 and Path(args[0]).name in ("ccache", "sccache"):
                args = args[1:]
            if all(args != known for _, known in out):
                out.append((src, args))
    return out


def _compiler_file(args: list[str], name: str, env: dict) -> str | None:
    """The path of library file ``name`` the compiler ``args`` links (``-print-file-name``), or None
    when it has none (GCC then prints the bare name) or cannot be run."""
    try:
        r = subprocess.run([*args, f"-print-file-name={name}"], capture_output=True, text=True, timeout=30, env=env)
    except (OSError, subprocess.TimeoutExpired):
        return None
    found = r.stdout.strip()
    return found if r.returncode == 0 and os.path.isabs(found) and os.path.exists(found) else None


def static_libstdcxx(backend: str, environ: dict | None = None) -> str | None:
    """Why this machine's C++ compiler must not link the engine, or None.

    A GCC that ships only ``libstdc++.a`` (``-print-file-name=libstdc++.so`` finds nothing where
    ``libstdc++.a`` is found) links a private copy of libstdc++ into every engine library, and GNU ld
    exports it: a process that loads the engine and another C++ extension (torch, numpy, matplotlib's
    ft2font) then holds two libstdc++ and crashes (measured on an H200 image whose /opt/gcc had only
    the archive; the same tree linked against the distribution's g++ runs torch, numpy and matplotlib
    in either order: docs/CUDA.md, "load order"). Checked for ``CXX`` (and ``CUDAHOSTCXX`` for
    ``backend`` cuda; see :func:`_cxx_compilers`); ``TQGGUF_STATIC_LIBSTDCXX=1`` in ``environ``
    (default ``os.environ``) skips it. A compiler that cannot be run is left to CMake's own error.
    """
    env = os.environ if environ is None else environ
    if backend == "metal" or env.get(STATIC_LIBSTDCXX_ENV) == "1":
        return None
    for src, args in _cxx_compilers(backend, env):
        if _compiler_file(args, "libstdc++.a", env) and not _compiler_file(args, "libstdc++.so", env):
            return (f"the C++ compiler {' '.join(args)} ({src}) has only a static libstdc++ (libstdc++.a, no "
                    f"libstdc++.so): every engine library would carry and export its own copy, and torch, numpy or "
                    f"matplotlib in the same process would then crash. Point CC/CXX"
                    f"{'/CUDAHOSTCXX' if backend == 'cuda' else ''} at a compiler with a shared libstdc++ (your "
                    f"distribution's gcc/g++, e.g. CC=/usr/bin/gcc CXX=/usr/bin/g++"
                    f"{' CUDAHOSTCXX=/usr/bin/g++' if backend == 'cuda' else ''}), or set {STATIC_LIBSTDCXX_ENV}=1 "
                    f"to build with it anyway")
    return None


def build(cfg: BuildConfig, *, force: bool = False, log: Callable[[str], None] = print,
          progress: Callable[[int, int, str], None] | None = None) -> BuildResult:
    """Build and install the patched llama-cpp-python wheel (and tools if asked).

    A second call with an unchanged fingerprint whose wheel is installed returns at once
    with ``skipped=True``. Raises PatchError / SourceError / RuntimeError (compile failure,
    with the tail of the log and its path).
    """
    t0 = time.time()
    inputs = fingerprint_inputs(cfg)
    fp = fingerprint_of(inputs)
    root = cache_dir()
    tree = source_tree()
    build_dir = root / "build" / cfg.backend
    tools_dir = root / "build" / f"tools-{cfg.backend}"
    wheel_dir = root / "wheels"
    log_path = root / "build" / f"build-{cfg.backend}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    have = installed_build_info()
    # a record written before per-input digests matches by the old fingerprint (then restamped)
    stamps = {fp} if have is None or "inputs" in have else {fp, legacy_fingerprint(cfg)}
    tools_ok = all((tools_dir / "bin" / t).exists() for t in cfg.targets) and \
        (tools_dir / "fingerprint").exists() and (tools_dir / "fingerprint").read_text() in stamps
    if not force and have and have.get("fingerprint") in stamps and tools_ok:
        if have.get("fingerprint") != fp:
            _restamp(fp, inputs, tools_dir)
            log("the installed engine is this checkout's build; its record now names its inputs")
        return BuildResult(fp, True, time.time() - t0, None, tools_dir, log_path)
    log(rebuild_reason(inputs, have, force=force,
                       missing_tools=[t for t in cfg.targets if not (tools_dir / "bin" / t).exists()]))

    if (missing := missing_toolchain(cfg.backend, cuda_arch=cfg.cuda_arch)) is not None:
        raise RuntimeError(missing)
    if (static := static_libstdcxx(cfg.backend)) is not None:
        raise RuntimeError(static)
    log_path.write_text("")
    if shutil.which("ccache") is None:
        log("warning: ccache not found; rebuilds will recompile everything (apt-get install ccache)")
    log(f"preparing patched source tree in {tree}")
    prepare_tree(tree, log)
    info = {"fingerprint": fp, "inputs": inputs, "pin": f"{PIN.package}=={PIN.version}", "llama_cpp_commit": PIN.llama_cpp_commit,
            "backend": cfg.backend, "defines": cfg.defines(), "built_at": time.strftime("%Y-%m-%dT%H:%M:%S")}
    (tree / "llama_cpp" / BUILD_INFO_NAME).write_text(json.dumps(info, indent=1))

    env = dict(os.environ)
    env["CMAKE_BUILD_PARALLEL_LEVEL"] = str(cfg.jobs or os.cpu_count() or 2)
    env.pop("CMAKE_ARGS", None)

    def on_line(line: str) -> None:
        m = NINJA_PROGRESS.search(line)
        if m and progress:
            progress(int(m.group(1)), int(m.group(2)), line.strip().rsplit(" ", 1)[-1][-60:])

    wheel_dir.mkdir(parents=True, exist_ok=True)
    for old in wheel_dir.glob("llama_cpp_python-*.whl"):
        old.unlink()
    cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-v", "-w", str(wheel_dir),
           str(tree), "-C", f"build-dir={build_dir}", "-C", "cmake.build-type=Release"]
    cmd += ["-C", "cmake.args=" + ";".join(f"-D{k}={v}" for k, v in cfg.defines().items())]
    log(f"compiling the engine ({cfg.backend}) in {build_dir}")
    _run_logged(cmd, log_path, env, on_line)
    wheel = next(wheel_dir.glob("llama_cpp_python-*.whl"))
    log(f"installing {wheel.name}")
    _run_logged([sys.executable, "-m", "pip", "install", "--no-deps", "--force-reinstall", str(wheel)],
                log_path, env, lambda _l: None)
    build_tools(cfg, tree, tools_dir, log_path, env, on_line, log)
    (tools_dir / "fingerprint").write_text(fp)
    return BuildResult(fp, False, time.time() - t0, wheel, tools_dir, log_path)


def build_tools(cfg: BuildConfig, tree: Path, tools_dir: Path, log_path: Path, env: dict,
                on_line: Callable[[str], None], log: Callable[[str], None]) -> None:
    """Configure vendor/llama.cpp standalone and build ``cfg.targets`` into tools_dir/bin."""
    src = tree / "vendor" / "llama.cpp"
    defines = dict(cfg.defines())
    defines.update({"LLAMA_BUILD_TESTS": "ON", "LLAMA_BUILD_TOOLS": "ON", "LLAMA_BUILD_SERVER": "ON",
                    "LLAMA_CURL": "OFF", "LLAMA_OPENSSL": "OFF", "CMAKE_RUNTIME_OUTPUT_DIRECTORY": str(tools_dir / "bin")})
    log(f"building tools ({', '.join(cfg.targets)}) in {tools_dir}; log: {log_path}")
    cmake = shutil.which("cmake") or "cmake"
    _run_logged([cmake, "-S", str(src), "-B", str(tools_dir), "-G", "Ninja"] + [f"-D{k}={v}" for k, v in defines.items()],
                log_path, env, on_line)
    _run_logged([cmake, "--build", str(tools_dir), "-j", env["CMAKE_BUILD_PARALLEL_LEVEL"], "--target", *cfg.targets],
                log_path, env, on_line)


def tool_path(name: str, backend: str = "cpu") -> Path:
    """Path of a tool built by ``tqgguf build --tools``; FileNotFoundError if it is missing."""
    p = cache_dir() / "build" / f"tools-{backend}" / "bin" / name
    if not p.exists():
        raise FileNotFoundError(f"{p} not found; run `tqgguf build --tools`")
    return p



def llama_server_path(configured: Path | None = None) -> Path:
    """The llama-server binary ``tqgguf serve`` runs.

    ``configured`` (the ``TQGGUF_LLAMA_SERVER`` setting) wins; otherwise the one built by
    ``tqgguf build`` for the installed engine's backend, else for any backend (cuda, metal,
    cpu order). Raises FileNotFoundError telling the user to run ``tqgguf build`` (or set
    TQGGUF_LLAMA_SERVER) when there is none.
    """
    if configured is not None:
        if not Path(configured).is_file():
            raise FileNotFoundError(f"TQGGUF_LLAMA_SERVER={configured} does not exist")
        return Path(configured)
    if (p := _built(SERVER_TARGET)) is not None:
        return p
    raise FileNotFoundError(f"no llama-server found (looked in {cache_dir() / 'build'}/tools-*/bin): run `tqgguf build` "
                            "(it builds llama-server from the patched tree), or point TQGGUF_LLAMA_SERVER at one")


def _built(target: str) -> Path | None:
    """``target`` as ``tqgguf build`` put it in ``tools-<backend>/bin``: the installed engine's
    backend first, then cuda, metal, cpu; None when no build has it."""
    installed = (installed_build_info() or {}).get("backend")
    order = ([installed] if installed else []) + [b for b in ("cuda", "metal", "cpu") if b != installed]
    for backend in order:
        p = cache_dir() / "build" / f"tools-{backend}" / "bin" / target
        if p.is_file():
            return p
    return None


def rpc_server_path() -> Path:
    """The ``ggml-rpc-server`` worker ``tqgguf build`` made from the patched tree (for the
    installed engine's backend first, then cuda, metal, cpu). Raises FileNotFoundError telling
    the user to run ``tqgguf build`` when there is none."""
    if (p := _built(RPC_SERVER_TARGET)) is not None:
        return p
    raise FileNotFoundError(f"no {RPC_SERVER_TARGET} found (looked in {cache_dir() / 'build'}/tools-*/bin): run "
                            "`tqgguf build` (it builds the RPC worker from the patched tree)")
