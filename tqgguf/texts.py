"""Evaluation texts: the user's file, WikiText-2 (raw test split) when it can be found, or an
offline corpus built from Python's bundled documentation.

Search order (``resolve_text(None)``): the ``text`` setting (``$TQGGUF_TEXT``); a cached copy
``<cache>/data/wiki.test.raw``; ``../shared/data/wiki.test.raw`` next to a source checkout;
a download of the standard ``wikitext-2-raw-v1.zip`` where the network allows (cached).
Else the built-in corpus: the help topics of ``pydoc_data.topics`` joined in key order.
The returned label always says which text was used.
"""
from __future__ import annotations

import hashlib
import io
import os
import zipfile
from dataclasses import dataclass
from pathlib import Path

from .config import SettingsError, setting
from .fsutil import atomic_output, cache_dir

WIKITEXT2_TEST_SHA256 = "173c87a53759e0201f33e0ccf978e510c2042d7f2cb78229d9a50d79b9e7dd08"
WIKITEXT2_TEST_BYTES = 1290590
WIKITEXT2_URL = "https://s3.amazonaws.com/research.metamind.io/wikitext/wikitext-2-raw-v1.zip"


@dataclass
class Text:
    """An evaluation text: ``content`` (str), ``label`` (what it is), ``path`` (or None)."""

    content: str
    label: str
    path: Path | None = None

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.content.encode("utf-8")).hexdigest()


def _cache_copy() -> Path:
    return cache_dir() / "data" / "wiki.test.raw"


def _read(p: Path) -> str:
    """Read UTF-8 text byte-faithfully (no newline translation, like llama-perplexity)."""
    with open(p, encoding="utf-8", newline="") as f:
        return f.read()


def is_wikitext(p: Path) -> bool:
    """Whether ``p`` is WikiText-2's raw test split (its size, WIKITEXT2_TEST_BYTES)."""
    return p.is_file() and p.stat().st_size == WIKITEXT2_TEST_BYTES


def _download_wikitext(dest: Path, timeout: float = 10.0) -> bool:
    try:
        import httpx

        r = httpx.get(WIKITEXT2_URL, timeout=timeout, follow_redirects=True)
        r.raise_for_status()
        with zipfile.ZipFile(io.BytesIO(r.content)) as z:
            data = z.read("wikitext-2-raw/wiki.test.raw")
    except Exception:  # noqa: BLE001 - any network/zip failure means "not available here"
        return False
    if hashlib.sha256(data).hexdigest() != WIKITEXT2_TEST_SHA256:
        return False
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        with atomic_output(dest) as tmp:
            tmp.write_bytes(data)
    except OSError:
        return False  # an unwritable cache: the caller falls back to the built-in corpus
    return True


def builtin_corpus() -> str:
    """Offline corpus: every ``pydoc_data.topics`` entry, in sorted key order, blank-line separated."""
    from pydoc_data.topics import topics

    return "\n\n".join(topics[k].strip() for k in sorted(topics))


def resolve_text(path: str | os.PathLike | None = None, *, allow_download: bool = True) -> Text:
    """Find the evaluation text (see module docstring).

    Raises FileNotFoundError when an explicit ``path`` or ``$TQGGUF_TEXT`` does not exist,
    ValueError when it is not UTF-8 text or is a directory.
    """
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise FileNotFoundError(f"text file not found: {p}")
        try:
            return Text(_read(p), f"{p.name} (-f)", p)
        except UnicodeDecodeError as e:
            raise ValueError(f"{p} is not UTF-8 text: {e}") from e
    try:
        p = setting("text")  # the settings model's ``text``: TQGGUF_TEXT
    except SettingsError as e:
        raise ValueError(str(e)) from None
    if p is not None:
        if not p.is_file():
            raise FileNotFoundError(f"TQGGUF_TEXT={p} does not exist")
        try:
            return Text(_read(p), f"{p.name} (TQGGUF_TEXT)", p)
        except UnicodeDecodeError as e:
            raise ValueError(f"TQGGUF_TEXT={p} is not UTF-8 text: {e}") from e
    repo_shared = Path(__file__).resolve().parents[2] / "shared" / "data" / "wiki.test.raw"
    for cand, how in ((_cache_copy(), "cached"), (repo_shared, "shared/data")):
        if is_wikitext(cand):
            return Text(_read(cand), f"WikiText-2 test ({how}: {cand})", cand)
    if allow_download and _download_wikitext(_cache_copy()):
        return Text(_read(_cache_copy()), "WikiText-2 test (downloaded)", _cache_copy())
    tried = (f"not at {_cache_copy()} or {repo_shared}" + (", and the download failed" if allow_download else ""))
    return Text(builtin_corpus(), f"built-in offline corpus (pydoc_data.topics; WikiText-2 {tried}: -f FILE names a text)")
