"""Files: the cache directory, sha256 of a file, and publishing a finished file atomically.

The one home of these helpers (the builder, models, texts, K centering and the sweep all
use them). Imports nothing from tqgguf, so every layer may import it.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator


def cache_dir() -> Path:
    """Root of tqgguf's caches: ``$TQGGUF_CACHE`` (``~`` expanded), else ``~/.cache/tqgguf``.

    An empty variable counts as unset. Not created here.
    """
    root = os.environ.get("TQGGUF_CACHE") or os.path.join("~", ".cache", "tqgguf")
    return Path(os.path.expanduser(root))


def sha256_file(path: str | os.PathLike) -> str:
    """Hex sha256 (64 lower-case characters) of a file's bytes, read in 1 MiB blocks.

    Raises OSError when the file cannot be read.
    """
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def sha256_file_cached(path: str | os.PathLike) -> str:
    """``sha256_file`` remembered in ``<cache>/sha256.json`` under (absolute path, size,
    mtime_ns), so a model of hundreds of MB is hashed once until it changes.

    A cache that cannot be read or written only costs the hashing. Raises OSError when
    ``path`` cannot be read.
    """
    path = Path(path).resolve()
    st = path.stat()
    key = f"{path}|{st.st_size}|{st.st_mtime_ns}"
    db_path = cache_dir() / "sha256.json"
    try:
        db = json.loads(db_path.read_text())
    except (OSError, ValueError):
        db = {}
    if not isinstance(db, dict):
        db = {}
    if key in db:
        return db[key]
    db[key] = sha256_file(path)
    try:
        db_path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_output(db_path) as tmp:
            tmp.write_text(json.dumps(db))
    except OSError:
        pass
    return db[key]


def publish(tmp: str | os.PathLike, out: str | os.PathLike) -> None:
    """Give a finished temp file the mode of an ordinary new file (0666 & ~umask;
    ``tempfile.mkstemp`` makes 0600) and rename it onto ``out`` atomically (same
    filesystem). Raises OSError."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)
    os.replace(tmp, out)


@contextmanager
def atomic_output(out: str | os.PathLike, *, suffix: str = ".part") -> Iterator[Path]:
    """Write ``out`` all at once: yields a new empty temp file in ``out``'s directory
    (``.<name>.XXXX<suffix>``); when the block ends normally the file is published onto
    ``out`` (see ``publish``), when it raises the temp file is removed and ``out`` is
    left as it was.

    Raises OSError when the directory does not exist or is not writable.
    """
    out = Path(out)
    fd, name = tempfile.mkstemp(prefix=f".{out.name}.", suffix=suffix, dir=out.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        publish(tmp, out)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
