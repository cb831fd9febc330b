"""The HTTP front of ``tqgguf serve``: the FastAPI app, wired from one router per API.

- ``routes_openai``: OpenAI (``/v1/chat/completions``, ``/v1/completions``,
  ``/v1/embeddings`` validated and passed through to llama-server, ``openai_api``; ``/v1/models``);
- ``routes_ollama``: Ollama (``/api/chat``, ``/api/generate``, ``/api/embed``,
  ``/api/embeddings``, ``/api/show``, ``/api/tags``, ``/api/ps``, ``/api/version``, ``/``),
  translated;
- ``routes_manage``: Ollama's model management (``/api/pull``, ``/api/copy``, ``/api/delete``;
  ``/api/create``, ``/api/push`` refused);
- ``routes_misc``: ``/health`` and ``/metrics``;
- ``routes_llama``: llama-server's own routes (``/tokenize``, ``/completion``, ``/props``, ...)
  and the other APIs it serves (``/v1/responses``, Anthropic's ``/v1/messages``), passed through;
- ``cors``: Ollama's allowed origins and ``OLLAMA_ORIGINS``, on both APIs;
- ``proxy``: every call to a model's llama-server; ``errors``: each API's error shape, the
  exception handlers and the request-body limit; ``dependencies``: the shared
  :class:`~.manager.Manager` (models loaded on demand), kept on ``app.state``.

A child dying mid-request gives that request a 502 (or, once a stream has started, a final
error event), and the runner restarts it (``runner``).
"""
from __future__ import annotations

import contextlib

from fastapi import FastAPI

from . import routes_llama, routes_manage, routes_misc, routes_ollama, routes_openai
from .cors import OllamaCors
from .errors import BodyLimit, add_error_handlers
from .manager import Manager


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("tqgguf")
    except Exception:  # noqa: BLE001 - running from a checkout that is not installed
        return "0+unknown"


TQGGUF_VERSION = _version()


def create_app(manager: Manager) -> FastAPI:
    """The FastAPI app over ``manager`` (whose default model is already loaded); the children
    are stopped when the app's lifespan ends."""

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        try:
            yield
        finally:
            await manager.shutdown()

    app = FastAPI(title="tqgguf serve", version=TQGGUF_VERSION, lifespan=lifespan, docs_url=None, redoc_url=None,
                  openapi_url=None)
    app.state.manager = manager
    app.add_middleware(BodyLimit, limit=manager.settings.max_request_body, timeout=manager.settings.body_timeout)
    app.add_middleware(OllamaCors, extra=manager.settings.origins)  # outermost: errors and 413s get CORS too
    add_error_handlers(app)
    for router in (routes_openai.router, routes_misc.router, routes_ollama.router, routes_manage.router,
                   routes_llama.router):
        # the routes themselves, as include_router placed them in earlier FastAPI versions: the app
        # then matches one flat list. include_router now keeps each router as one route that
        # matches its own list, which costs 30-60 µs of CPU per request here (the front's
        # whole cost is ~1.5 ms, docs/SERVING.md) and adds nothing these routers use
        # (no prefix, tags or router-level dependencies)
        app.router.routes.extend(router.routes)
    return app
