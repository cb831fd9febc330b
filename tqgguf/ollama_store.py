"""Ollama's model store, read-only: the models ``ollama pull`` left under ``OLLAMA_MODELS``
(default ``~/.ollama/models``), so that ``tqgguf serve llama3.2:1b`` and an API request's
``model`` run them by their Ollama names, with their parameters.

Layout (Ollama's ``manifest/paths.go``, ``manifest/manifest.go``, ``types/model/name.go``,
commit fb30760): ``manifests/<host>/<namespace>/<model>/<tag>`` is a JSON manifest (schema
2: ``config`` and ``layers``, each ``{mediaType, digest, size}``); a layer's bytes are in
``blobs/<digest with ':' as '-'>`` (``blobs/sha256-<64 hex>``). A name is
``[host/][namespace/]model[:tag]``, the missing parts being ``registry.ollama.ai``,
``library`` and ``latest``; shown shortest (``llama3.2:1b``, ``user/model:tag``, or the full
name for another host), case-insensitively equal. Layer media types used here:
``application/vnd.ollama.image.model`` (the GGUF), ``.params`` (a JSON object of Modelfile
parameters: ``num_ctx``, ``stop``, ``temperature``...), ``.template`` (Ollama's Go
template), ``.system`` (the default system prompt), ``.license``, ``.projector`` (a vision
projector GGUF), ``.adapter`` (a LoRA); the config blob
(``application/vnd.docker.container.image.v1+json``) names the format, family and
quantization that ``/api/tags`` shows.

Nothing here writes to the store: it belongs to Ollama (``ollama rm``/``ollama cp`` manage it).
"""
from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .config import SettingsError, setting

DEFAULT_HOST, DEFAULT_NAMESPACE, DEFAULT_TAG = "registry.ollama.ai", "library", "latest"

MEDIA_MODEL = "application/vnd.ollama.image.model"
MEDIA_PARAMS = "application/vnd.ollama.image.params"
MEDIA_TEMPLATE = "application/vnd.ollama.image.template"
MEDIA_SYSTEM = "application/vnd.ollama.image.system"
MEDIA_LICENSE = "application/vnd.ollama.image.license"
MEDIA_PROJECTOR = "application/vnd.ollama.image.projector"
MEDIA_ADAPTER = "application/vnd.ollama.image.adapter"

# the parts' patterns of Ollama's ParseName (types/model/name.go): first character alphanumeric
# or "_", then the part's own set; lengths 1..350 (host) and 1..80 (the others)
_PARTS = {"host": (r"[A-Za-z0-9_][A-Za-z0-9_.:-]*", 350), "namespace": (r"[A-Za-z0-9_][A-Za-z0-9_-]*", 80),
          "model": (r"[A-Za-z0-9_][A-Za-z0-9_.-]*", 80), "tag": (r"[A-Za-z0-9_][A-Za-z0-9_.-]*", 80)}
_DIGEST = re.compile(r"^sha256[:-][0-9a-fA-F]{64}$")


class OllamaStoreError(ValueError):
    """A manifest in Ollama's store that cannot be served (bad JSON, a missing blob, no GGUF layer)."""


@dataclass(frozen=True)
class OllamaName:
    """A model name as Ollama parses it (``ParseName``: defaults merged in). Compare with
    :meth:`key` (Ollama compares names case-insensitively)."""

    host: str
    namespace: str
    model: str
    tag: str

    @classmethod
    def parse(cls, text: str) -> "OllamaName | None":
        """``[host/][namespace/]model[:tag]`` -> a name with Ollama's defaults, or None when a
        part is empty or has a character Ollama does not allow (``../x``, ``a b``, a path).
        A ``:`` after the last ``/`` starts the tag; ``scheme://`` before the host is dropped.
        An ``@digest`` suffix is not accepted (tqgguf serves names, not digests)."""
        s = text.strip()
        if not s or "@" in s:
            return None
        tag = None
        if s.rfind(":") > s.rfind("/"):
            s, tag = s.rsplit(":", 1)
        if "://" in s:
            s = s.split("://", 1)[1]
        parts = s.split("/")
        if len(parts) > 3:
            return None
        host, namespace, model = [None] * (3 - len(parts)) + parts
        # a part that is written but empty ("/abs", "m:") is invalid, as Ollama's cutPromised makes it
        n = cls(DEFAULT_HOST if host is None else host, DEFAULT_NAMESPACE if namespace is None else namespace, model,
                DEFAULT_TAG if tag is None else tag)
        for part, value in (("host", n.host), ("namespace", n.namespace), ("model", n.model), ("tag", n.tag)):
            pattern, most = _PARTS[part]
            if not (0 < len(value) <= most and re.fullmatch(pattern, value)):
                return None
        return n

    def key(self) -> tuple[str, str, str, str]:
        return (self.host.lower(), self.namespace.lower(), self.model.lower(), self.tag.lower())

    def shortest(self) -> str:
        """Ollama's ``DisplayShortest``: ``model:tag``, ``namespace/model:tag`` outside
        ``library``, ``host/namespace/model:tag`` on another registry."""
        if self.host.lower() != DEFAULT_HOST:
            return f"{self.host}/{self.namespace}/{self.model}:{self.tag}"
        if self.namespace.lower() != DEFAULT_NAMESPACE:
            return f"{self.namespace}/{self.model}:{self.tag}"
        return f"{self.model}:{self.tag}"

    def relpath(self) -> Path:
        return Path(self.host, self.namespace, self.model, self.tag)


def short_name(text: str) -> str:
    """``text`` with Ollama's default registry and namespace dropped, as Ollama resolves a name:
    ``registry.ollama.ai/library/smol:latest`` and ``library/smol`` -> ``smol:latest`` (the
    tag as given, ``latest`` when none); any other text (another registry or namespace, a path,
    a name Ollama would not parse) unchanged, stripped."""
    name = OllamaName.parse(text) if "/" in text else None
    if name is None or (name.host.lower(), name.namespace.lower()) != (DEFAULT_HOST, DEFAULT_NAMESPACE):
        return text.strip()
    return name.shortest()


@dataclass
class OllamaModel:
    """One model in Ollama's store.

    name: its parsed name; manifest: the manifest file; digest: sha256 (hex) of the manifest's
    bytes, as Ollama reports it in ``/api/tags``; size: bytes of every layer and the config
    (Ollama's ``Manifest.Size``); modified: the manifest's mtime (s); gguf: the model blob;
    params: the params layer (Modelfile parameters, Ollama's option names); template: the Go
    template text (shown by ``/api/show``, not run: llama-server formats chats with the GGUF's
    own chat template); system: the default system prompt; license: license texts;
    projector: a vision projector blob, or None; adapters: LoRA blobs; config: the config
    blob's JSON (model_format, model_family, model_families, model_type, file_type), or {}.
    """

    name: OllamaName
    manifest: Path
    digest: str
    size: int
    modified: float
    gguf: Path
    params: dict[str, Any] = field(default_factory=dict)
    template: str = ""
    system: str = ""
    license: list[str] = field(default_factory=list)
    projector: Path | None = None
    adapters: list[Path] = field(default_factory=list)
    config: dict[str, Any] = field(default_factory=dict)

    @property
    def display(self) -> str:
        return self.name.shortest()


def store_dir() -> Path:
    """Ollama's store: the ``ollama_models`` setting (``OLLAMA_MODELS``, default
    ``~/.ollama/models``). Raises OllamaStoreError when the variable names a file."""
    try:
        return setting("ollama_models")
    except SettingsError as e:
        raise OllamaStoreError(str(e)) from None


def blob_path(root: Path, digest: str) -> Path:
    """``blobs/sha256-<hex>`` for a digest ``sha256:<hex>`` (Ollama's ``BlobsPath``); raises
    OllamaStoreError for anything but a sha256 digest (so a manifest cannot name ``../x``)."""
    if not isinstance(digest, str) or not _DIGEST.match(digest):
        raise OllamaStoreError(f"layer digest {digest!r} is not sha256:<64 hex digits>")
    return root / "blobs" / digest.replace(":", "-")


def read_manifest(root: Path, name: OllamaName) -> OllamaModel:
    """The model ``name`` from the manifest under ``root``; raises FileNotFoundError when
    there is none, OllamaStoreError when it cannot be served (the message says why)."""
    path = root / "manifests" / name.relpath()
    raw = path.read_bytes()
    where = f"Ollama manifest {path}"
    try:
        m = json.loads(raw)
    except ValueError as e:
        raise OllamaStoreError(f"{where} is not JSON: {e}") from None
    if not isinstance(m, dict) or not isinstance(m.get("layers"), list):
        raise OllamaStoreError(f"{where} has no layers list")
    layers = [x for x in m["layers"] if isinstance(x, dict)]
    config_layer = m.get("config") if isinstance(m.get("config"), dict) else {}
    size = sum(int(x.get("size") or 0) for x in [*layers, config_layer])

    def blob(layer: dict) -> Path:
        p = blob_path(root, layer.get("digest"))
        if not p.is_file():
            raise OllamaStoreError(f"{where}: blob {p.name} ({layer.get('mediaType')}) is missing from {root / 'blobs'}")
        return p

    def text(layer: dict) -> str:
        return blob(layer).read_text(encoding="utf-8", errors="replace")

    models = [x for x in layers if x.get("mediaType") == MEDIA_MODEL]
    if not models:
        kinds = sorted({str(x.get("mediaType")) for x in layers})
        raise OllamaStoreError(f"{where} has no GGUF layer ({MEDIA_MODEL}); its layers: {', '.join(kinds) or 'none'} "
                               "(safetensors or cloud models are not served by tqgguf)")
    out = OllamaModel(name=name, manifest=path, digest=hashlib.sha256(raw).hexdigest(), size=size,
                      modified=path.stat().st_mtime, gguf=blob(models[0]))
    for x in layers:
        mt = x.get("mediaType")
        if mt == MEDIA_PARAMS:
            try:
                params = json.loads(text(x))
            except ValueError as e:
                raise OllamaStoreError(f"{where}: the params blob is not JSON: {e}") from None
            if isinstance(params, dict):
                out.params = params
        elif mt == MEDIA_TEMPLATE:
            out.template = text(x)
        elif mt == MEDIA_SYSTEM:
            out.system = text(x)
        elif mt == MEDIA_LICENSE:
            out.license.append(text(x))
        elif mt == MEDIA_PROJECTOR:
            out.projector = blob(x)
        elif mt == MEDIA_ADAPTER:
            out.adapters.append(blob(x))
    if config_layer.get("digest"):
        try:
            cfg = json.loads(blob(config_layer).read_text())
            out.config = cfg if isinstance(cfg, dict) else {}
        except (OllamaStoreError, ValueError, OSError):
            out.config = {}  # only /api/tags' details come from it; the GGUF says the same
    return out


def find(text: str, root: Path | None = None) -> OllamaModel | None:
    """The model an Ollama name (``llama3.2:1b``, ``user/model``) names in the store, or None
    when the name is not one Ollama would parse or the store has no manifest for it (the
    store's names are matched case-insensitively, as Ollama does). Raises OllamaStoreError
    when the manifest exists but cannot be served."""
    name = OllamaName.parse(text)
    if name is None:
        return None
    root = store_dir() if root is None else root
    exact = root / "manifests" / name.relpath()
    if not exact.is_file():
        match = next((n for n in _names(root) if n.key() == name.key()), None)
        if match is None:
            return None
        name = match
    try:
        return read_manifest(root, name)
    except FileNotFoundError:
        return None


def _names(root: Path) -> list[OllamaName]:
    """Every name with a manifest file under ``root`` (Ollama's ``Manifests``: the
    ``manifests/*/*/*/*`` files)."""
    base = root / "manifests"
    if not base.is_dir():
        return []
    out = []
    for p in sorted(base.glob("*/*/*/*")):
        if p.is_file():
            n = OllamaName.parse("/".join(p.relative_to(base).parts[:3]) + ":" + p.name)
            if n is not None:
                out.append(n)
    return out


def list_models(root: Path | None = None) -> tuple[list[OllamaModel], list[str]]:
    """(the servable models in the store, a reason for each manifest that is not servable).
    A missing store is empty. Cheap: manifests and small blobs only, no GGUF is read."""
    try:
        root = store_dir() if root is None else root
    except OllamaStoreError as e:
        return [], [str(e)]
    models, problems = [], []
    for n in _names(root):
        try:
            models.append(read_manifest(root, n))
        except (OllamaStoreError, OSError) as e:
            problems.append(f"{n.shortest()}: {e}")
    return models, problems


def find_by_blob(path: Path, root: Path | None = None) -> OllamaModel | None:
    """The first store model (by name) whose GGUF is the blob ``path``, or None (not a blob of
    the store)."""
    try:
        root = store_dir() if root is None else root
    except OllamaStoreError:
        return None
    try:
        if Path(path).resolve().parent != (root / "blobs").resolve():
            return None
    except OSError:
        return None
    for m in list_models(root)[0]:
        if m.gguf.resolve() == Path(path).resolve():
            return m
    return None
