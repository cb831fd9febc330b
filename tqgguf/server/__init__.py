"""``tqgguf serve``: GGUF models with turbo KV caches behind OpenAI- and Ollama-compatible APIs.

The engine is llama.cpp's own server, ``llama-server``, built from the same patched tree
by ``tqgguf build`` (continuous batching over ``-np`` slots, prompt-cache reuse,
grammar-constrained JSON, tool calling through the chat template, embeddings,
``/metrics``). tqgguf runs it as a supervised child and fronts it:

- ``child``: one llama-server process: command line, start, readiness, log, stop;
- ``runner``: one model in one llama-server child (start, log, restarts after a crash,
  the connection pool to it);
- ``manager``: which models are loaded (on demand, keep-alive, num_ctx and load-option
  reloads, OLLAMA_MAX_LOADED_MODELS, the models that can be served, shutdown);
- ``load_options``: Ollama's load-time options and the load they describe;
  ``serveconfig``: what serve runs with (``ServeConfig``);
- ``modelfile``: a servable model's names and GGUF metadata (header only);
- ``ollama``: Ollama's request/response fields to and from llama-server's;
- ``routes_openai``, ``routes_ollama``, ``routes_misc``: one FastAPI router per API (OpenAI
  passed through, Ollama translated; ``/health``, ``/metrics``), sharing the ``Manager``
  through ``dependencies``;
- ``proxy``: every call to a llama-server child (the OpenAI pass-through, streams, a client
  that leaves); ``errors``: each API's error shape, the exception handlers, the body limit;
- ``app``: ``create_app``, which wires them;
- ``run``: bind the port, start the default model, log the effective settings, run uvicorn.
"""
from __future__ import annotations

from .run import PortError, bind_socket, serve, startup_summary
from .manager import Manager
from .serveconfig import ServeConfig

__all__ = ["Manager", "ServeConfig", "PortError", "bind_socket", "serve", "startup_summary"]
