"""Pinned upstream source: fetch the llama-cpp-python sdist, verify it, patch it, overlay native/.

The pin is llama-cpp-python 0.3.36 (vendors llama.cpp commit 0c1e570, 2026-10-01). The
patched tree lives outside the repository in the cache dir (``TQGGUF_CACHE``, default
``~/.cache/tqgguf``) and is updated file by file, so unchanged files keep their mtimes
and the persistent CMake build only recompiles what changed.
"""
from __future__ import annotations

import filecmp
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ..fsutil import cache_dir, publish, sha256_file

REPO_ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Pin:
    """The upstream release tqgguf patches."""

    package: str = "llama-cpp-python"
    version: str = "0.3.36"
    sdist_name: str = "llama_cpp_python-0.3.36.tar.gz"
    sha256: str = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
    llama_cpp_commit: str = "0c1e570"

    @property
    def tree_name(self) -> str:
        return self.sdist_name.removesuffix(".tar.gz")


PIN = Pin()


class SourceError(RuntimeError):
    """The sdist could not be fetched or did not verify."""


class PatchError(RuntimeError):
    """A patch in patches/series does not apply; the message names the patch and file."""


def patches_dir() -> Path:
    return REPO_ROOT / "patches"


def native_dir() -> Path:
    return REPO_ROOT / "native"


def _read_series(directory: Path) -> list[Path]:
    names = []
    for line in (directory / "series").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            names.append(directory / line)
    return names


def series() -> list[Path]:
    """Patch files for vendor/llama.cpp in application order (``patches/series``; '#' starts a comment)."""
    return _read_series(patches_dir())


def sdist_series() -> list[Path]:
    """Patch files for the llama-cpp-python sdist's own files (its Python package, outside
    vendor/llama.cpp), applied at the sdist root, in order (``patches/sdist/series``)."""
    return _read_series(patches_dir() / "sdist")


#: Which backends' builds compile the files under a llama.cpp path (native/ mirrors vendor/llama.cpp;
#: patches name the files they touch): the longest matching prefix wins; a path under none is
#: compiled by every build. The one place for this rule: the fingerprint (:func:`native_files`,
#: :func:`patch_read_by`) leaves out what a backend does not compile, so a CUDA-only change is no
#: rebuild of a CPU engine. Metal reads the flash-attention pairs from the CUDA directory.
READ_BY: dict[str, tuple[str, ...]] = {
    "ggml/src/ggml-cuda/": ("cuda",),
    "ggml/src/ggml-cuda/turbo-pairs.h": ("cuda", "metal"),
    "ggml/src/ggml-metal/": ("metal",),
}


def compiled_by(rel: str | Path, backend: str) -> bool:
    """Whether a build for ``backend`` compiles the llama.cpp file ``rel`` (:data:`READ_BY`)."""
    text = Path(rel).as_posix()
    match = max((k for k in READ_BY if text.startswith(k)), key=len, default=None)
    return match is None or backend in READ_BY[match]


def native_files(backend: str | None = None) -> list[Path]:
    """Files under native/ (relative to native/, which mirrors vendor/llama.cpp): all of them
    (the overlay copies every one), or those a build for ``backend`` compiles (:data:`READ_BY`)."""
    root = native_dir()
    files = (p.relative_to(root) for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    return sorted(rel for rel in files if backend is None or compiled_by(rel, backend))


_PATCHED_FILE = re.compile(r"^diff --git a/(\S+) b/", re.M)


def patch_read_by(patch: Path, backend: str) -> bool:
    """Whether a patch of the series changes a file a build for ``backend`` compiles (one that
    touches only ``ggml-cuda/`` does not matter to a CPU build; a patch that names no file counts)."""
    files = _PATCHED_FILE.findall(patch.read_text(errors="replace"))
    return not files or any(compiled_by(f, backend) for f in files)


WAYS_OUT = (f"Either download {PIN.sdist_name} (sha256 {PIN.sha256}) yourself and set TQGGUF_SDIST=PATH, "
            f"or point pip at an index that has {PIN.package}=={PIN.version} (PIP_INDEX_URL / PIP_EXTRA_INDEX_URL "
            f"or pip.conf; proxy and certificates as for pip install).")


def fetch_sdist(log=print) -> Path:
    """Return the verified pinned sdist, fetching it through pip when it is not cached.

    Order: ``TQGGUF_SDIST`` (a local file; nothing is downloaded), else the cached copy
    ``<cache>/sdist/<name>`` (a copy that no longer verifies is removed and fetched
    again), else ``python -m pip download --no-deps --no-binary :all:`` of the pin, so the
    user's index, proxy and certificate settings (pip.conf, ``PIP_*``) apply exactly as
    for ``pip install``. A fetched file is checked against ``PIN.sha256`` before it enters
    the cache, so a bad download never stays behind.

    Raises SourceError: ``TQGGUF_SDIST`` missing or not a regular file, or its sha256 not
    the pin's; the cache directory not writable; pip missing or failing (what was run and
    pip's own last lines are quoted, with the two ways out); a fetched file whose sha256
    is not the pin's (both digests named).
    """
    override = os.environ.get("TQGGUF_SDIST")
    if override:
        target = Path(override).expanduser()
        if not target.exists():
            raise SourceError(f"TQGGUF_SDIST={override} does not exist; point it at {PIN.sdist_name} "
                              f"(sha256 {PIN.sha256}) or unset it to fetch the sdist through pip")
        if not target.is_file():
            raise SourceError(f"TQGGUF_SDIST={override} is not a file (a directory?); point it at "
                              f"{PIN.sdist_name} itself")
        digest = sha256_file(target)
        if digest != PIN.sha256:
            raise SourceError(f"TQGGUF_SDIST={override}: sha256 {digest} does not match the pin {PIN.sha256} of "
                              f"{PIN.package}=={PIN.version}: a corrupt or truncated file, or another release")
        return target
    target = cache_dir() / "sdist" / PIN.sdist_name
    if target.is_file():
        digest = sha256_file(target)
        if digest == PIN.sha256:
            return target
        log(f"{target}: sha256 {digest} does not match the pin {PIN.sha256}; removed, fetching it again")
        target.unlink()
    _pip_download(target, log)
    return target


def pip_download_command(dest: Path) -> list[str]:
    """The pip command that fetches the pinned sdist into ``dest`` (a directory).

    ``--no-build-isolation``: pip reads the sdist's metadata with the scikit-build-core
    that tqgguf depends on, instead of installing build requirements from the index.
    """
    return [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "--no-build-isolation",
            "--disable-pip-version-check", "--no-input", "--progress-bar", "off",
            "-d", str(dest), f"{PIN.package}=={PIN.version}"]


def _pip_download(target: Path, log) -> None:
    """Fetch the pinned sdist with pip into a temp dir beside ``target``, verify its sha256
    there, then rename it onto ``target``. Raises SourceError (see ``fetch_sdist``)."""
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp_ctx = tempfile.TemporaryDirectory(prefix=".sdist-", dir=target.parent)
    except OSError as e:
        raise SourceError(f"cannot write the sdist cache {target.parent}: {e.strerror or e}; set TQGGUF_CACHE to a "
                          f"writable directory, or TQGGUF_SDIST to a copy of {PIN.sdist_name}") from e
    with tmp_ctx as tmp:
        cmd = pip_download_command(Path(tmp))
        log(f"fetching {PIN.package}=={PIN.version} (sdist) through pip")
        try:
            r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=1800)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise SourceError(f"could not run pip to fetch {PIN.package}=={PIN.version} ({' '.join(cmd)}): {e}\n"
                              f"{WAYS_OUT}") from e
        if r.returncode != 0:
            lines = [ln.rstrip() for ln in r.stdout.splitlines() if ln.strip()]
            if any("No module named pip" in ln for ln in lines):
                why = f"pip is not installed for {sys.executable} (python -m ensurepip installs it)"
            else:
                where = [ln for ln in lines if ln.startswith("Looking in")][:1]
                tail = [ln for ln in lines[-6:] if ln not in where]
                why = "pip said:\n  " + "\n  ".join(where + tail)
            raise SourceError(f"could not fetch {PIN.package}=={PIN.version} through pip (ran: {' '.join(cmd)}); "
                              f"exit status {r.returncode}; {why}\n{WAYS_OUT}")
        got = Path(tmp) / PIN.sdist_name
        if not got.is_file():
            found = ", ".join(p.name for p in Path(tmp).iterdir()) or "nothing"
            raise SourceError(f"pip fetched {found} instead of {PIN.sdist_name}.\n{WAYS_OUT}")
        digest = sha256_file(got)
        if digest != PIN.sha256:
            raise SourceError(f"the {PIN.sdist_name} that pip fetched has sha256 {digest}, not the pin {PIN.sha256} "
                              f"of {PIN.package}=={PIN.version}: a corrupt or truncated download, or another file "
                              f"under that name on the index; nothing was kept.\n{WAYS_OUT}")
        publish(got, target)


def apply_patches(llama_dir: Path) -> None:
    """Apply patches/series to an unpacked vendor/llama.cpp; dry-run each patch first.

    Raises PatchError naming the patch and the failing file(s).
    """
    _apply_series(series(), llama_dir, f"llama.cpp {PIN.llama_cpp_commit}")


def apply_sdist_patches(sdist_root: Path) -> None:
    """Apply patches/sdist/series at the root of an unpacked llama-cpp-python sdist (its
    Python files: llama_cpp/llama.py, ...); dry-run each patch first.

    Raises PatchError naming the patch and the failing file(s).
    """
    _apply_series(sdist_series(), sdist_root, f"{PIN.package} {PIN.version}")


def _apply_series(patches: list[Path], root: Path, what: str) -> None:
    for patch in patches:
        cmd = ["patch", "-p1", "--forward", "--batch", "-d", str(root), "-i", str(patch)]
        dry = subprocess.run(cmd + ["--dry-run"], capture_output=True, text=True)
        if dry.returncode != 0:
            current, failed, details = "?", [], []
            for ln in dry.stdout.splitlines():
                for verb in ("checking file ", "patching file "):
                    if ln.startswith(verb):
                        current = ln[len(verb):].strip()
                if "FAILED" in ln or "can't find" in ln.lower() or "No file to patch" in ln:
                    details.append(f"{current}: {ln.strip()}")
                    if current not in failed:
                        failed.append(current)
            raise PatchError(
                f"patch {patch.name} does not apply to {what}; failing file(s): "
                f"{', '.join(failed) or '?'}\n" + "\n".join(details or dry.stdout.splitlines()[-5:]))
        subprocess.run(cmd, check=True, capture_output=True)


def source_tree() -> Path:
    """Where `tqgguf build` prepares the patched source tree: ``<cache>/src/<PIN.tree_name>``
    (the sdist's layout: llama.cpp under ``vendor/llama.cpp``). A path only; it exists after a
    build. The cache is $TQGGUF_CACHE, else ~/.cache/tqgguf (tqgguf.fsutil.cache_dir)."""
    return cache_dir() / "src" / PIN.tree_name


def prepare_tree(dest: Path, log=print) -> Path:
    """Make ``dest`` the patched source tree: sdist + patches (vendor/llama.cpp and the
    sdist's Python files) + native overlay.

    Files whose content did not change are left untouched (mtimes kept).
    Returns the llama-cpp-python source dir (contains pyproject.toml).
    """
    sdist = fetch_sdist(log)
    with tempfile.TemporaryDirectory(prefix="tqgguf-src-") as tmp:
        with tarfile.open(sdist) as tf:
            tf.extractall(tmp, filter="data") if hasattr(tarfile, "data_filter") else tf.extractall(tmp)
        fresh = Path(tmp) / PIN.tree_name
        llama_dir = fresh / "vendor" / "llama.cpp"
        apply_patches(llama_dir)
        apply_sdist_patches(fresh)
        for rel in native_files():
            out = llama_dir / rel
            out.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(native_dir() / rel, out)
        _sync(fresh, dest)
    return dest


def _sync(src: Path, dst: Path) -> None:
    """Mirror src into dst, copying only files whose bytes differ; remove stale files."""
    dst.mkdir(parents=True, exist_ok=True)
    seen = set()
    for root, dirs, files in os.walk(src):
        rel_root = Path(root).relative_to(src)
        (dst / rel_root).mkdir(parents=True, exist_ok=True)
        for name in files:
            rel = rel_root / name
            seen.add(rel)
            s, d = src / rel, dst / rel
            if s.is_symlink():
                continue
            if not d.exists() or not filecmp.cmp(s, d, shallow=False):
                shutil.copy2(s, d)
                os.utime(d)  # newer than any object built from the old content
    for root, dirs, files in os.walk(dst):
        rel_root = Path(root).relative_to(dst)
        for name in files:
            rel = rel_root / name
            if rel not in seen and rel.name != "_tqgguf_build.json":
                (dst / rel).unlink()
