"""``tqgguf serve``: a GGUF model with turbo KV caches behind OpenAI- and Ollama-compatible APIs.

- ``pool``: N independent llama.cpp contexts (``-np``), each with its own KV cache,
  handed out per request; keep-alive unloading.
- ``textgen``: chat templates, context shift, the token loop (stop strings, UTF-8).
- ``schemas``: strict request validation (4xx with the reason).
- ``app``: the FastAPI routes.
- ``run``: bind the port, load, log the effective settings, run uvicorn.

The HTTP layer is our own FastAPI app rather than ``llama_cpp.server``: that server keeps
one Llama behind a lock, so ``-np`` slots, context shift and Ollama routes would all have
to be bolted on around it.
"""
from __future__ import annotations

from .pool import ServeConfig, SlotPool
from .run import PortError, bind_socket, serve, startup_summary

__all__ = ["ServeConfig", "SlotPool", "PortError", "bind_socket", "serve", "startup_summary"]
