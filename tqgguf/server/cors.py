"""CORS for both APIs, as Ollama sets it (``envconfig.AllowedOrigins`` and the gin-contrib/cors
configuration in ``server/routes.go`` of the Ollama repository), on Starlette's
``CORSMiddleware``.

Allowed origins: the entries of ``OLLAMA_ORIGINS`` (comma separated), then always
``http(s)://localhost``, ``127.0.0.1`` and ``0.0.0.0``, each with and without any port, and
``app://*``, ``file://*``, ``tauri://*``, ``vscode-webview://*``, ``vscode-file://*``
(:data:`DEFAULT_ORIGINS`). An entry is an exact origin or has one ``*`` that matches any text
(gin-contrib's wildcard: ``chrome-extension://*``, ``https://*.example.com``); ``*`` alone
allows every origin. A request whose ``Origin`` is not allowed gets a 403, as from Ollama
(Starlette's middleware would let a simple POST from any page run and only hide its answer;
Ollama refuses it), except a same-origin one (``Origin`` equal to ``http(s)://`` + ``Host``).
A preflight (``OPTIONS`` with ``Access-Control-Request-Method``) is answered by the middleware
on every route, with Ollama's allowed methods and headers (the OpenAI SDK's ``x-stainless-*``
among them) and a max age of 12 h (gin-contrib's default); a preflight asking for another method
or header gets gin-contrib's 403 (Starlette's middleware answers 400).
"""
from __future__ import annotations

import re
from collections.abc import Iterable

from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse

from .errors import error

#: The origins Ollama always allows besides OLLAMA_ORIGINS (envconfig.AllowedOrigins).
DEFAULT_ORIGINS: tuple[str, ...] = tuple(
    f"{scheme}://{host}{port}" for host in ("localhost", "127.0.0.1", "0.0.0.0") for port in ("", ":*")
    for scheme in ("http", "https")) + ("app://*", "file://*", "tauri://*", "vscode-webview://*", "vscode-file://*")

#: Request headers a browser may send (Ollama's AllowHeaders, OpenAI's SDK headers included).
ALLOW_HEADERS: tuple[str, ...] = (
    "Authorization", "Content-Type", "User-Agent", "Accept", "X-Requested-With", "OpenAI-Beta",
    "x-stainless-arch", "x-stainless-async", "x-stainless-custom-poll-interval", "x-stainless-helper-method",
    "x-stainless-lang", "x-stainless-os", "x-stainless-package-version", "x-stainless-poll-helper",
    "x-stainless-retry-count", "x-stainless-runtime", "x-stainless-runtime-version", "x-stainless-timeout")

#: gin-contrib/cors's DefaultConfig: methods and max age (12 h).
ALLOW_METHODS: tuple[str, ...] = ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS")
MAX_AGE_S = 12 * 3600

def origin_pattern(origins: Iterable[str]) -> str:
    """One regular expression (for ``allow_origin_regex``, matched whole, case-insensitively)
    for the entries: exact ones as themselves, ``*`` as any text."""
    parts = ["".join(".*" if c == "*" else re.escape(c) for c in re.split(r"(\*)", o)) for o in origins]
    return "(?i)(?:" + "|".join(parts) + ")"


class OllamaCors(CORSMiddleware):
    """Starlette's CORSMiddleware with Ollama's origins (module docstring), and a 403 in the
    API's error shape for an ``Origin`` that is not allowed.

    Args:
        app: the ASGI app; extra: the OLLAMA_ORIGINS entries (``Settings.origins``, checked by
            ``config.parse_origins``), allowed before the defaults.
    """

    def __init__(self, app, extra: Iterable[str] = ()):
        self.origins = tuple(extra) + DEFAULT_ORIGINS
        every = "*" in self.origins
        super().__init__(app, allow_origins=("*",) if every else (),
                         allow_origin_regex=None if every else origin_pattern(self.origins),
                         allow_methods=ALLOW_METHODS, allow_headers=ALLOW_HEADERS, max_age=MAX_AGE_S)

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http":
            origin = host = None
            for k, v in scope["headers"]:
                if k == b"origin":
                    origin = v.decode("latin-1")
                elif k == b"host":
                    host = v.decode("latin-1")
            if origin is not None and not self.is_allowed_origin(origin) and \
                    origin not in (f"http://{host}", f"https://{host}"):
                response = error(Request(scope), 403, f"origin {origin} is not allowed; allow it with OLLAMA_ORIGINS "
                                                      "(comma separated; '*' matches any text, '*' alone every origin)")
                return await response(scope, receive, send)
        await super().__call__(scope, receive, send)

    def preflight_response(self, request_headers):
        """Starlette's preflight answer, except that a method or request header outside the allowed
        lists gets gin-contrib/cors's 403 (Starlette answers 400), the text naming what was refused."""
        response = super().preflight_response(request_headers)
        if response.status_code == 400:
            return PlainTextResponse(response.body.decode(), status_code=403, headers=dict(response.headers))
        return response
