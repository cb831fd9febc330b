"""Ollama's load-time options in ``tqgguf serve``: which exist (:data:`LOAD_OPTIONS`), what each
does here (reload the model, change its context, or refused: :class:`LoadOptionRefused`), and
the load they describe (:class:`LoadParams`, :func:`default_load`). Comparing a request's
options with a loaded runner's is :meth:`~.manager.Manager.plan_load`.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from .serveconfig import ServeConfig


class LoadOptionRefused(ValueError):
    """A request's load-time option differs from what the model runs with and cannot be
    applied by reloading it. ``option`` is the Ollama option name."""

    def __init__(self, option: str, message: str):
        super().__init__(message)
        self.option = option


@dataclass(frozen=True)
class LoadParams:
    """How a runner's llama-server is loaded besides its context: what Ollama's load-time
    options may change by reloading the model (:meth:`~.manager.Manager.plan_load`).

    n_batch: ``-b`` (None: llama-server's default, ``LLAMA_DEFAULT_N_BATCH``); n_threads:
    ``-t`` (None: llama-server's default); n_gpu_layers: ``-ngl`` (-1: all; None: as many as
    fit, llama-server's default); use_mmap: False passes ``-lm none`` (this llama-server's
    ``--no-mmap``: the model is read into memory, not mapped).
    """

    n_batch: int | None = None
    n_threads: int | None = None
    n_gpu_layers: int | None = None
    use_mmap: bool = True


def default_load(config: ServeConfig) -> LoadParams:
    """The load serve's own settings give (``-t``, ``-ngl``; llama-server's ``-b``, mmap): what a
    request that sets no load-time option runs with."""
    return LoadParams(n_threads=config.n_threads, n_gpu_layers=config.n_gpu_layers)


#: The LoadParams field of each "reload" option of LOAD_OPTIONS.
LOAD_FIELD = {"num_batch": "n_batch", "num_thread": "n_threads", "num_gpu": "n_gpu_layers", "use_mmap": "use_mmap"}

#: Ollama's load-time options (``api.Runner`` in Ollama's api/types.go, plus the ones older
#: Ollama versions had and clients still send) and what ``tqgguf serve`` does with each:
#: "reload" (a different value reloads the model with it, as Ollama's scheduler does in
#: ``needsReload``: it compares the loaded runner's options with the request's, num_ctx
#: included, and reloads on any difference), "context" (num_ctx: the same, larger or smaller,
#: within MIN_CONTEXT and the maximum; handled by ``Manager.runner``), "fixed" (a different
#: value is refused: it cannot change per request here). An option a request leaves out gets
#: serve's setting (a model reloaded for one request's options gets its defaults back on the next
#: request that leaves them out, as Ollama fills a request's missing options with the defaults
#: before comparing). Value types: int or bool, as Ollama parses them (``Options.FromMap``).
LOAD_OPTIONS: dict[str, tuple[str, type]] = {
    "num_ctx": ("context", int), "num_batch": ("reload", int), "num_thread": ("reload", int),
    "num_gpu": ("reload", int), "use_mmap": ("reload", bool), "main_gpu": ("fixed", int),
    "use_mlock": ("fixed", bool), "numa": ("fixed", bool), "low_vram": ("fixed", bool), "f16_kv": ("fixed", bool),
    "logits_all": ("fixed", bool), "vocab_only": ("fixed", bool), "embedding_only": ("fixed", bool),
    "num_gqa": ("fixed", int),
}


def layers_offloaded(n_gpu_layers: int | None, n_layer: int) -> int:
    """Layers a ``-ngl`` value offloads for a model of ``n_layer`` blocks: a negative value
    (``-ngl all``) or one above ``n_layer + 1`` is every block plus the output layer
    (llama.cpp counts the output as one more layer); 0 when the block count is unknown and
    ``-ngl`` is 0, else the value itself."""
    if n_gpu_layers is None:
        return 0
    if n_layer <= 0:
        return n_gpu_layers
    return n_layer + 1 if n_gpu_layers < 0 else min(n_gpu_layers, n_layer + 1)


def shown_value(value: Any) -> str:
    """An option's value as the log and X-Tqgguf-Reloaded show it: JSON, or "default" for
    llama-server's own choice not known yet (the threads of a child not yet run without -t)."""
    return "default" if value is None else json.dumps(value)


#: Why each "fixed" load-time option cannot change per request (LoadOptionRefused's message).
FIXED_WHY = {
    "main_gpu": "the GPUs llama-server uses are chosen when tqgguf serve starts: CUDA_VISIBLE_DEVICES",
    "use_mlock": "tqgguf serve does not lock model memory",
    "numa": "NUMA placement is set when llama-server starts",
    "low_vram": "llama.cpp has no low-VRAM mode any more; the KV cache sits where -ngl puts the layers",
    "f16_kv": "the KV cache types are set with --ctk/--ctv, here K {ctk} and V {ctv}",
    "logits_all": "llama.cpp has no logits_all any more; ask for logprobs/top_logprobs per request",
    "vocab_only": "a vocabulary-only model cannot answer requests",
    "embedding_only": "embeddings run in their own child, started by /api/embed and /api/embeddings",
    "num_gqa": "it is a property of the model: query heads per KV head",
}
