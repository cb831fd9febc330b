"""The errors ``tqgguf serve`` answers with, each in its API's shape, in one place.

Ollama's routes (``/api/...``) answer ``{"error": "message"}``; every other route answers
OpenAI's ``{"error": {"message", "type", "param", "code"}}``. :func:`add_error_handlers`
maps every exception a route can raise to its status: a bad request (``RequestError``,
400 or what it says), an unknown model (404), a context or load option the server cannot
give (400), a model that cannot be served at all (400: no vocabulary), a model that is
not running (503), one that failed to load (500), a child that
went away mid-request (:class:`ChildGone`: 502, or 503 while shutting down), a client that
left (:class:`ClientLeft`: 499, which nobody reads), anything else (500, logged).
:class:`BodyLimit` refuses an oversized body with a 413 before it is read, and a body
that stops arriving with a 408 (:class:`BodyTimeout`).
"""
from __future__ import annotations

import asyncio
import json
import logging
import re
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from ..values import format_duration, format_size
from .child import ChildError
from .load_options import LoadOptionRefused
from .manager import ContextTooLarge, ModelNotFound, ModelRefused
from .ollama import RequestError
from .runner import Unavailable

log = logging.getLogger("tqgguf.server")


class ChildGone(RuntimeError):
    """The model's llama-server went away during a request."""


class ClientLeft(RuntimeError):
    """The client closed its connection before the (non-streaming) answer was ready."""


def is_ollama(request: Request) -> bool:
    return request.url.path.startswith("/api/")


def openai_error(status: int, message: str, code: str | None = None, param: str | None = None) -> JSONResponse:
    kind = {404: "not_found_error", 502: "server_error", 503: "unavailable_error"}.get(
        status, "invalid_request_error" if status < 500 else "server_error")
    return JSONResponse({"error": {"message": message, "type": kind, "param": param, "code": code or status}},
                        status_code=status)


def error(request: Request, status: int, message: str, code: str | None = None,
          param: str | None = None) -> JSONResponse:
    """The error in the shape of the API ``request`` went to."""
    if is_ollama(request):
        return JSONResponse({"error": message}, status_code=status)
    return openai_error(status, message, code, param)


#: llama-server's 5xx answers that are the request's fault, by their message: (pattern, the 400's message).
_CLIENT_FAULTS = (
    # 501 "Infill is not supported by this model: prefix token is missing. suffix token is missing. ..."
    (re.compile(r"Infill is not supported by this model: (.*?)\.?\s*$", re.S),
     "this model has no fill-in-the-middle tokens (llama.cpp: {0}): a suffix (/api/generate, /v1/completions) "
     "and /infill need a code model whose vocabulary has FIM prefix, suffix and middle tokens, such as "
     "qwen2.5-coder-0.5b; send the request without a suffix"),
    # "input (700 tokens) is too large to process. increase the physical batch size (current batch size: 512)"
    (re.compile(r"input \((\d+) tokens\) is too large to process.*batch size: (\d+)", re.S),
     "an input has {0} tokens, more than the {1} tokens an embeddings batch holds here (the embeddings child "
     "runs its whole context as one batch: the context length, -c / OLLAMA_CONTEXT_LENGTH, or options.num_ctx "
     "on /api/embed); shorten the input or serve with a larger -c"),
    # "image input is not supported - hint: if this is unexpected, you may need to provide the mmproj"
    (re.compile(r"(image|audio|video) input is not supported"),
     "this model does not take {0} input: it is served without a multimodal projector (--mmproj); send text "
     "only, or serve a vision model with its --mmproj file"),
)


def upstream_error(status: int, message: str) -> tuple[int, str]:
    """llama-server's error ``(status, message)`` as the client gets it: a 5xx that is the request's
    fault (:data:`_CLIENT_FAULTS`: an embeddings input longer than the batch, an image for a model
    without a projector, fill-in-the-middle for a model without FIM tokens: llama-server's 501) as
    a 400 that says what the limit is and which setting changes it; anything else unchanged."""
    if status >= 500:
        for pattern, text in _CLIENT_FAULTS:
            if m := pattern.search(message):
                return 400, text.format(*m.groups())
    return status, message


async def json_body(request: Request) -> Any:
    """The request's JSON body; RequestError (400) when it is empty, not JSON or nested too deeply."""
    raw = await request.body()
    if not raw.strip():
        raise RequestError(400, "the request body is empty; send a JSON object")
    try:
        return json.loads(raw)
    except RecursionError:
        raise RequestError(400, "the JSON body is nested too deeply") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise RequestError(400, f"the request body is not valid JSON: {e}") from None


async def json_object(request: Request) -> tuple[bytes, dict]:
    """The request's body as sent and parsed: ``(raw, body)``; RequestError (400) unless it is a
    JSON object (:func:`json_body`)."""
    body = await json_body(request)
    if not isinstance(body, dict):
        raise RequestError(400, "the request body must be a JSON object")
    return await request.body(), body


_timeout = getattr(asyncio, "timeout", None)


class BodyTimeout(RequestError):
    """The client stopped sending the request body it declared (408; the connection closes)."""


class BodyLimit:
    """ASGI middleware over the request body: refuse one over ``limit`` bytes with a 413 in
    the API's error shape, without reading it: at once when Content-Length declares more,
    else (a chunked body) as soon as the bytes read pass the limit; and end one whose next
    part does not come within ``timeout`` seconds (0: no limit) with a 408 and the
    connection closed (a client that declared Content-Length 100 and sent 1 byte). Both are
    raised out of ``receive`` (RequestError, BodyTimeout), which the route's body read
    raises; once the body is complete, ``receive`` (waiting for a disconnect) has no limit."""

    def __init__(self, app, limit: int, timeout: float = 0.0):
        self.app, self.limit, self.timeout = app, limit, timeout
        self.what = f"the limit of {format_size(limit)} (TQGGUF_MAX_REQUEST_BODY)"

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = dict(scope["headers"]).get(b"content-length", b"")
        if declared.isdigit() and int(declared) > self.limit:
            response = error(Request(scope), 413, f"the request body is {int(declared)} bytes, more than {self.what}")
            return await response(scope, receive, send)
        seen, complete = 0, False

        async def limited():
            nonlocal seen, complete
            if complete or not self.timeout:
                message = await receive()
            else:
                try:
                    if _timeout is not None:  # 3.11+: no extra task per part (wait_for's costs one)
                        async with _timeout(self.timeout):
                            message = await receive()
                    else:  # pragma: no cover - Python 3.10
                        message = await asyncio.wait_for(receive(), self.timeout)
                except (TimeoutError, asyncio.TimeoutError):
                    complete = True  # no more waits: the 408 is the answer
                    raise BodyTimeout(408, f"the request body stopped arriving: no data for "
                                           f"{format_duration(self.timeout)} after {seen} bytes"
                                           + (f" of the {int(declared)} declared" if declared.isdigit() else "")
                                           + " (TQGGUF_BODY_TIMEOUT)") from None
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                complete = not message.get("more_body", False)
                if seen > self.limit:
                    raise RequestError(413, f"the request body is more than {self.what}")
            else:
                complete = True
            return message

        await self.app(scope, limited, send)


def add_error_handlers(app: FastAPI) -> None:
    """Answer every exception a route raises in its API's error shape (module docstring)."""

    @app.exception_handler(RequestError)
    async def _request_error(request: Request, exc: RequestError):
        return error(request, exc.status, exc.message, exc.code, exc.param)

    @app.exception_handler(BodyTimeout)
    async def _body_timeout(request: Request, exc: BodyTimeout):
        response = error(request, exc.status, exc.message, "request_timeout")
        response.headers["Connection"] = "close"  # the rest of the body may still come: read no further
        return response

    @app.exception_handler(ModelNotFound)
    async def _not_found(request: Request, exc: ModelNotFound):
        return error(request, 404, str(exc), "model_not_found", "model")

    @app.exception_handler(ContextTooLarge)
    async def _too_large(request: Request, exc: ContextTooLarge):
        return error(request, 400, str(exc), "context_length_exceeded", "num_ctx")

    @app.exception_handler(LoadOptionRefused)
    async def _load_refused(request: Request, exc: LoadOptionRefused):
        return error(request, 400, str(exc), "invalid_load_option", exc.option)

    @app.exception_handler(Unavailable)
    async def _unavailable(request: Request, exc: Unavailable):
        return error(request, 503, str(exc))

    @app.exception_handler(ModelRefused)
    async def _model_refused(request: Request, exc: ModelRefused):
        return error(request, 400, str(exc), "model_not_supported", "model")

    @app.exception_handler(ChildError)
    async def _child_error(request: Request, exc: ChildError):
        return error(request, 500, f"the model could not be loaded: {exc}")

    @app.exception_handler(ClientLeft)
    async def _client_left(request: Request, exc: ClientLeft):
        return Response(status_code=499)  # nobody reads it (nginx's "client closed request")

    @app.exception_handler(ChildGone)
    async def _gone(request: Request, exc: ChildGone):
        return error(request, 503 if request.app.state.manager.shutting_down else 502, str(exc))

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException):
        msg = {404: f"{request.method} {request.url.path} not found", 405: f"method {request.method} is not allowed "
               f"on {request.url.path}"}.get(exc.status_code, str(exc.detail))
        return error(request, exc.status_code, msg)

    @app.exception_handler(Exception)
    async def _internal_error(request: Request, exc: Exception):
        log.exception("internal error on %s", request.url.path)
        return error(request, 500, f"internal error: {type(exc).__name__}: {exc}")
