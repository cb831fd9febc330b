"""What ``tqgguf serve`` runs with besides the HTTP address: :class:`ServeConfig`, built once
at startup (``server/run.py``) and shared by the :class:`~.manager.Manager` and each
:class:`~.runner.Runner`."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ..config import Settings
from .child import DraftSpec


@dataclass
class ServeConfig:
    """Everything ``tqgguf serve`` needs besides the HTTP address.

    model_path: the GGUF file served by default; alias: the name clients use for it;
    settings: resolved :class:`~tqgguf.config.Settings`; llama_server: the binary;
    n_gpu_layers: ``-ngl`` (None: auto, as many as fit); offload: the ``--rpc``/``-sm``/``-ts``/``-mg``/``-dev``
    settings (tqgguf.devices.Offload, None: none); n_threads: ``-t`` for llama-server (None: its default, every
    core); verbose: echo every llama-server log line (otherwise only warnings, errors and
    load/exit lines); engine_env: the engine variables (LLAMA_*) of the default model's
    child; engine_env_for: the same for any model path (``--k-center auto`` and layer plans
    depend on the model; None: engine_env for every model), raising ValueError for a model
    the settings do not fit; engine_notes: startup lines saying what was chosen and why;
    draft: the default model's draft model for speculative decoding (``-md``, ``-ctkd``/``-ctvd``,
    ...; None: none); spec_type: ``--spec-type`` without a draft model (None: none); mmproj: the
    default model's multimodal projector (``--mmproj``; None: text only). The three apply to the
    model ``serve`` was started with (a draft shares its vocabulary, a projector its embedding
    width); a model loaded by name runs without them.
    """

    model_path: Path
    alias: str
    settings: Settings
    llama_server: Path
    n_gpu_layers: int | None = None
    offload: Any = None
    n_threads: int | None = None
    verbose: bool = False
    engine_env: dict[str, str] = field(default_factory=dict)
    engine_env_for: Callable[[Path], dict[str, str]] | None = None
    engine_notes: list[str] = field(default_factory=list)
    draft: DraftSpec | None = None
    spec_type: str | None = None
    mmproj: Path | None = None
