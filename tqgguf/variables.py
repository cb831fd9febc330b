"""Every environment variable tqgguf reads, declared once with its description (like
Ollama's ``envconfig``), the ``OLLAMA_*`` variables Ollama itself reads, and which set
variables are likely typos of ours.

``tqgguf env`` lists :data:`VARIABLES`; tqgguf.config checks that every setting's variables
are declared here; tqgguf.enginevars warns about :func:`unknown_variables`. Imports nothing
of ours.
"""
from __future__ import annotations

import os
from typing import Mapping

#: Every environment variable tqgguf reads, declared once with its description
#: (like Ollama's ``envconfig``). ``tqgguf env`` lists them all.
VARIABLES: dict[str, str] = {
    "TQGGUF_KV_CACHE_TYPE": "K and V cache type together (like OLLAMA_KV_CACHE_TYPE)",
    "TQGGUF_KV_CACHE_TYPE_K": "K cache type; overrides TQGGUF_KV_CACHE_TYPE for K",
    "TQGGUF_KV_CACHE_TYPE_V": "V cache type; overrides TQGGUF_KV_CACHE_TYPE for V",
    "TQGGUF_FLASH_ATTENTION": "flash attention: on, off, auto or a boolean",
    "TQGGUF_ATTN_ROTATION": "Hadamard rotation of Q/K/V for quantized caches (boolean)",
    "TQGGUF_K_CENTER": "K centering in the engine: auto (default), off, bias, bias:N, full, calib or calib:FILE",
    "TQGGUF_KV_BOUNDARY": "first and last N layers at other K/V types: N[:K/V] (default K/V q8_0/q8_0)",
    "TQGGUF_KV_SWA": "K/V types of the sliding-window layers: K/V or one type for both",
    "TQGGUF_KV_PLAN": "per-layer K/V types: a map like 0-1,22-23:q8_0/q8_0 or a plan file from tqgguf mix",
    "TQGGUF_N_GPU_LAYERS": "layers to offload to GPUs and RPC workers: auto (as many as fit), all, or a number "
                           "(0 = CPU only)",
    "TQGGUF_RPC": "RPC workers (tqgguf rpc-server) to use: host:port[,host:port...]",
    "TQGGUF_SPLIT_MODE": "how a model is split over several devices: none, layer, row or tensor (llama.cpp's -sm)",
    "TQGGUF_TENSOR_SPLIT": "share of the model per device, e.g. 3,1 (llama.cpp's -ts)",
    "TQGGUF_MAIN_GPU": "device index for the whole model with -sm none, for small tensors with -sm row (-mg)",
    "TQGGUF_DEVICE": "devices to offload to, a comma list of names such as CUDA0,RPC0 (none = CPU only; -dev)",
    "TQGGUF_HOST": "address to serve on: host, :port, host:port or http(s)://host:port",
    "TQGGUF_CONTEXT_LENGTH": "context length in tokens, per parallel slot",
    "TQGGUF_NUM_PARALLEL": "number of parallel request slots (each has its own KV cache); 0 = auto (1, as Ollama)",
    "TQGGUF_KEEP_ALIVE": "how long the model stays loaded when idle (5m, 1h, 30s, 0, -1 = forever)",
    "TQGGUF_MODELS": "directory of tqgguf's downloaded test models",
    "TQGGUF_TEXT": "evaluation text of ppl and sweep when -f is not given",
    "TQGGUF_LLAMA_SERVER": "llama-server binary tqgguf serve runs (default: the one `tqgguf build` installed)",
    "TQGGUF_LLAMA_SERVER_PORT": "loopback port of serve's first llama-server child (0 = a free one; the "
                                "next models use the following ports)",
    "TQGGUF_MAX_CONTEXT_LENGTH": "largest per-slot context a request's num_ctx may ask for (0 = the model's "
                                 "training context)",
    "TQGGUF_MAX_LOADED_MODELS": "models tqgguf serve keeps loaded at once (like OLLAMA_MAX_LOADED_MODELS); "
                                "0 = auto (3 per GPU, 3 on the CPU, as Ollama)",
    "TQGGUF_MAX_QUEUE": "requests tqgguf serve queues for a model to load while the loaded ones are busy (like "
                        "OLLAMA_MAX_QUEUE, default 512); beyond them: 503 'server busy'",
    "TQGGUF_MAX_REQUEST_BODY": "largest request body tqgguf serve accepts (32MiB, 64MB, bytes); larger: 413",
    "TQGGUF_DRAFT_MODEL": "draft model of serve's speculative decoding: a GGUF path or a `tqgguf models list` name (-md)",
    "TQGGUF_KV_CACHE_TYPE_K_DRAFT": "K cache type of the draft model (-ctkd; default f16, as llama-server's)",
    "TQGGUF_KV_CACHE_TYPE_V_DRAFT": "V cache type of the draft model (-ctvd; default f16, as llama-server's)",
    "TQGGUF_DRAFT_MAX": "most tokens the draft model proposes per step (--spec-draft-n-max; default llama-server's, 3)",
    "TQGGUF_DRAFT_MIN": "fewest draft tokens worth verifying (--spec-draft-n-min; default llama-server's, 0)",
    "TQGGUF_N_GPU_LAYERS_DRAFT": "draft model layers to offload (-ngld: auto, all, N; default: as -ngl)",
    "TQGGUF_SPEC_TYPE": "speculative decoding types, a comma list (--spec-type; default draft-simple with a draft model)",
    "TQGGUF_MMPROJ": "multimodal projector GGUF of serve's model (--mmproj): images on /api/chat, /api/generate and "
                     "/v1/chat/completions",
    "TQGGUF_BODY_TIMEOUT": "longest wait for the next part of a request body (60s, 5s, 0 = no limit); "
                           "then 408 and the connection closes",
    "OLLAMA_KV_CACHE_TYPE": "Ollama's K and V cache type; used when no TQGGUF_KV_CACHE_TYPE* is set",
    "OLLAMA_FLASH_ATTENTION": "Ollama's flash attention switch; used when TQGGUF_FLASH_ATTENTION is unset",
    "OLLAMA_HOST": "Ollama's listen address; used when TQGGUF_HOST is unset",
    "OLLAMA_CONTEXT_LENGTH": "Ollama's context length; used when TQGGUF_CONTEXT_LENGTH is unset",
    "OLLAMA_NUM_PARALLEL": "Ollama's parallel requests; used when TQGGUF_NUM_PARALLEL is unset",
    "OLLAMA_KEEP_ALIVE": "Ollama's keep-alive duration; used when TQGGUF_KEEP_ALIVE is unset",
    "OLLAMA_MODELS": "Ollama's model store (manifests/, blobs/; default ~/.ollama/models): its models are served by name",
    "OLLAMA_MAX_LOADED_MODELS": "Ollama's loaded-model limit; used when TQGGUF_MAX_LOADED_MODELS is unset",
    "OLLAMA_MAX_QUEUE": "Ollama's request queue length; used when TQGGUF_MAX_QUEUE is unset",
    "TQGGUF_ORIGINS": "browser origins tqgguf serve allows besides localhost, 127.0.0.1, 0.0.0.0 (any port), app://, "
                      "file://, tauri://, vscode-webview:// and vscode-file:// (like OLLAMA_ORIGINS)",
    "OLLAMA_ORIGINS": "Ollama's allowed browser origins (comma separated, '*' wildcards); used when TQGGUF_ORIGINS "
                      "is unset",
    "TQGGUF_CACHE": "root of tqgguf's caches: sdist, build trees, models (default ~/.cache/tqgguf)",
    "TQGGUF_SDIST": "path of a local copy of the pinned llama-cpp-python sdist (tqgguf build)",
    "TQGGUF_STATIC_LIBSTDCXX": "1: tqgguf build with a C++ compiler that has only a static libstdc++ (refused "
                               "otherwise: torch or numpy in the same process as such an engine crash)",
    "TQGGUF_REQUIRE_ENGINE": "tests: 1 makes a missing engine a failure instead of a skip",
}

#: Every ``OLLAMA_*`` variable Ollama itself reads (users set them for Ollama; never a typo
#: of ours): ``envconfig.AsMap`` in ollama/ollama's ``envconfig/config.go`` (commit fb30760,
#: 2026-08-21), plus the ones older releases read (OLLAMA_TMPDIR, OLLAMA_RUNNERS_DIR,
#: OLLAMA_MAX_VRAM, OLLAMA_HOME, OLLAMA_INTEL_GPU) and the client's OLLAMA_API_KEY.
OLLAMA_OWN_VARIABLES: frozenset[str] = frozenset({
    "OLLAMA_DEBUG", "OLLAMA_DEBUG_LOG_REQUESTS", "OLLAMA_GO_TEMPLATE", "OLLAMA_FLASH_ATTENTION",
    "OLLAMA_KV_CACHE_TYPE", "OLLAMA_GPU_OVERHEAD", "OLLAMA_IGPU_ENABLE", "OLLAMA_HOST", "OLLAMA_KEEP_ALIVE",
    "OLLAMA_LLM_LIBRARY", "OLLAMA_LOAD_TIMEOUT", "OLLAMA_MAX_LOADED_MODELS", "OLLAMA_MAX_TRANSFER_STREAMS",
    "OLLAMA_MAX_QUEUE", "OLLAMA_MODELS", "OLLAMA_NO_CLOUD", "OLLAMA_NOHISTORY", "OLLAMA_NOPRUNE",
    "OLLAMA_NUM_PARALLEL", "OLLAMA_ORIGINS", "OLLAMA_SCHED_SPREAD", "OLLAMA_CONTEXT_LENGTH", "OLLAMA_EDITOR",
    "OLLAMA_REMOTES", "OLLAMA_VULKAN", "OLLAMA_AUTH",
    "OLLAMA_TMPDIR", "OLLAMA_RUNNERS_DIR", "OLLAMA_MAX_VRAM", "OLLAMA_HOME", "OLLAMA_INTEL_GPU", "OLLAMA_API_KEY",
})


def unknown_variables(environ: Mapping[str, str] | None = None) -> list[str]:
    """Variables that are set but that tqgguf does not read (likely typos), sorted: every
    undeclared ``TQGGUF_*`` (any case: ``tqgguf_models`` too), and an ``OLLAMA_*`` (any case)
    that is close to one tqgguf reads (``closest_variable``) and is not one Ollama reads
    itself (``OLLAMA_OWN_VARIABLES``: users set those for Ollama)."""
    environ = os.environ if environ is None else environ

    def unknown(k: str) -> bool:
        if k in VARIABLES:
            return False
        if k.upper().startswith("TQGGUF_"):
            return True
        return (k.upper().startswith("OLLAMA_") and k not in OLLAMA_OWN_VARIABLES
                and closest_variable(k) is not None)

    return sorted(k for k in environ if unknown(k))


def closest_variable(name: str) -> str | None:
    """The declared variable of the same prefix (``TQGGUF_*``, or ``OLLAMA_*`` for a name
    starting so) closest to ``name`` (a likely typo of it), or None when none is close
    (difflib ratio of the parts after the prefix below 0.75, compared in upper case, as the
    variables are declared): ``TQGGUF_KV_CACHE_TYP`` -> ``TQGGUF_KV_CACHE_TYPE``,
    ``TQGGUF_KV_CACHE_TYPE_k`` -> ``TQGGUF_KV_CACHE_TYPE_K``, ``OLLAMA_KV_CACHE_TYP`` ->
    ``OLLAMA_KV_CACHE_TYPE``."""
    import difflib

    prefix = "OLLAMA_" if name.upper().startswith("OLLAMA_") else "TQGGUF_"
    suffixes = [v[len(prefix):] for v in VARIABLES if v.startswith(prefix)]
    near = difflib.get_close_matches(name.upper().removeprefix(prefix), suffixes, n=1, cutoff=0.75)
    return prefix + near[0] if near else None
