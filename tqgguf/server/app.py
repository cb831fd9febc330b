"""The HTTP front of ``tqgguf serve``: OpenAI routes passed through to llama-server,
Ollama routes translated (see ``ollama``), models loaded on demand (see ``runners``).

OpenAI (``/v1/chat/completions``, ``/v1/completions``, ``/v1/embeddings``,
``/v1/models``, ``/metrics``): the request body goes to the model's llama-server
unchanged and its answer (streamed or not, errors included) comes back unchanged, so
tools, ``response_format``/json_schema, logprobs and ``n`` behave as llama-server has
them. The ``model`` field picks the model (absent: the one ``serve`` was started with).
One rewrite: ``/v1/completions`` logprobs, which llama-server gives in the chat shape, come
back in OpenAI's legacy completions shape (:class:`LegacyLogprobs`).

Ollama (``/api/chat``, ``/api/generate``, ``/api/embed``, ``/api/embeddings``,
``/api/show``, ``/api/tags``, ``/api/ps``, ``/api/version``; ``HEAD /``, ``/api/tags``,
``/api/version`` as Ollama answers them): errors are ``{"error": "message"}``.

``GET /health``: 200 ``{"status": "ok"}`` while the default model's llama-server serves
or is unloaded by keep-alive; 503 with ``"restarting"`` / ``"error"`` and the reason
after a child died; each runner's ``last_log_lines`` are the last lines of its child that
died last. A child dying mid-request gives that request a 502 (or, once a
stream has started, a final error event), and the runner restarts it.
"""
from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import time
from typing import Any, AsyncIterator, Awaitable, TypeVar

import aiohttp
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from . import ollama as ol
from ..config import format_size
from .child import ChildError
from .ollama import RequestError
from .runners import ContextTooLarge, LoadOptionRefused, Manager, ModelFile, ModelNotFound, Runner, Unavailable


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("tqgguf")
    except Exception:  # noqa: BLE001 - running from a checkout that is not installed
        return "0+unknown"


TQGGUF_VERSION = _version()
log = logging.getLogger("tqgguf.server")


class ChildGone(RuntimeError):
    """The model's llama-server went away during a request."""


class ClientLeft(RuntimeError):
    """The client closed its connection before the (non-streaming) answer was ready."""


_T = TypeVar("_T")


async def until_disconnect(request: Request, work: Awaitable[_T]) -> _T:
    """Await ``work`` (a call to llama-server for a non-streaming answer) unless the client
    goes away first: then ``work`` is cancelled — its connection to llama-server is closed
    unread, and llama-server cancels the generation and frees the slot, as it does for a
    client of its own — and ClientLeft is raised. (Streams end the same way through
    ``_Stream``.) The request body must have been read: the next ASGI message is then
    ``http.disconnect``, which the server sends when the client's connection closes."""
    task = asyncio.ensure_future(work)

    async def disconnected() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass

    watch = asyncio.ensure_future(disconnected())
    try:
        await asyncio.wait((task, watch), return_when=asyncio.FIRST_COMPLETED)
    finally:
        if not task.done():
            task.cancel()
        watch.cancel()
    if not task.cancelled() and task.done():
        return task.result()
    with contextlib.suppress(asyncio.CancelledError, aiohttp.ClientError):
        await task
    raise ClientLeft("the client closed its connection before the answer was ready")


def _is_ollama(request: Request) -> bool:
    return request.url.path.startswith("/api/")


def _openai_error(status: int, message: str, code: str | None = None, param: str | None = None) -> JSONResponse:
    kind = {404: "not_found_error", 502: "server_error", 503: "unavailable_error"}.get(
        status, "invalid_request_error" if status < 500 else "server_error")
    return JSONResponse({"error": {"message": message, "type": kind, "param": param, "code": code or status}},
                        status_code=status)


def _error(request: Request, status: int, message: str, code: str | None = None,
           param: str | None = None) -> JSONResponse:
    if _is_ollama(request):
        return JSONResponse({"error": message}, status_code=status)
    return _openai_error(status, message, code, param)


def _upstream_message(data: bytes) -> str:
    try:
        j = json.loads(data)
        e = j.get("error", j)
        return e.get("message", str(e)) if isinstance(e, dict) else str(e)
    except (ValueError, AttributeError):
        return data.decode("utf-8", errors="replace")[:500]


def _gone_message(r: Runner) -> str:
    if r.cut_reason:
        return r.cut_reason
    code = r.child.returncode() if r.child else None
    from .child import describe_exit

    what = describe_exit(code) if code is not None else "connection lost"
    return (f"llama-server for {r.model.name} exited during the request ({what}); "
            "tqgguf serve is restarting it (see /health)")


async def _json_body(request: Request) -> Any:
    raw = await request.body()
    if not raw.strip():
        raise RequestError(400, "the request body is empty; send a JSON object")
    try:
        return json.loads(raw)
    except RecursionError:
        raise RequestError(400, "the JSON body is nested too deeply") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise RequestError(400, f"the request body is not valid JSON: {e}") from None


class _Stream(StreamingResponse):
    """A StreamingResponse that runs ``cleanup`` (close the upstream response, which stops
    llama-server's generation; release the model) however the response ends. When the
    client left before the first byte, the first send fails before Starlette ever starts
    the body iterator, so the iterator's own ``finally`` never runs: without this the slot
    would generate on and the model would stay busy (never unloaded by keep-alive)."""

    def __init__(self, content: AsyncIterator[bytes], cleanup, **kw: Any):
        super().__init__(content, **kw)
        self._cleanup = cleanup

    async def __call__(self, scope, receive, send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self.body_iterator.aclose()  # type: ignore[attr-defined]  # its finally, if it started
            await self._cleanup()


def _sse_data(line: str) -> dict | None:
    if not line.startswith("data:"):
        return None
    payload = line[5:].strip()
    if not payload or payload == "[DONE]":
        return None
    try:
        return json.loads(payload)
    except ValueError:
        return None


class LegacyLogprobs:
    """llama-server's ``/v1/completions`` logprobs (the chat shape: ``{"content": [{"token",
    "logprob", "bytes", "top_logprobs": [...]}, ...]}``) in the shape OpenAI documents for
    legacy completions: ``{"tokens": [str], "token_logprobs": [float], "top_logprobs":
    [{token: logprob}], "text_offset": [int]}``, so ``choice.logprobs.token_logprobs`` works in
    the openai client. One object per request; streamed chunks are converted one by one,
    the offsets running on per choice.

    ``text_offset``: the character offset of each token in prompt + completion, as OpenAI's
    legacy API and llama-cpp-python count it (the first completion token of a string prompt
    sits at ``len(prompt)``; for a prompt given as token ids, the completion starts at 0).
    A token that ends inside a UTF-8 character advances the offset only when the character
    is complete.
    """

    def __init__(self, prompt: Any):
        self.prompt = prompt
        self.state: dict[int, tuple[int, Any]] = {}

    def _base(self, index: int) -> int:
        p = self.prompt
        if isinstance(p, str):
            return len(p)
        if isinstance(p, list) and p and all(isinstance(x, str) for x in p):
            return len(p[index]) if index < len(p) else 0
        return 0

    def convert(self, choice: dict) -> None:
        """Rewrite ``choice["logprobs"]`` in place (left alone when it is not llama-server's shape)."""
        lp = choice.get("logprobs")
        if not isinstance(lp, dict) or not isinstance(lp.get("content"), list):
            return
        import codecs

        index = choice.get("index", 0)
        offset, decoder = self.state.get(index) or (self._base(index), codecs.getincrementaldecoder("utf-8")("ignore"))
        out: dict[str, list] = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
        for t in lp["content"]:
            out["tokens"].append(t.get("token", ""))
            out["token_logprobs"].append(t.get("logprob"))
            out["top_logprobs"].append({x.get("token", ""): x.get("logprob") for x in t.get("top_logprobs") or []})
            out["text_offset"].append(offset)
            raw = t.get("bytes")
            offset += len(decoder.decode(bytes(raw) if isinstance(raw, list) else t.get("token", "").encode()))
        self.state[index] = (offset, decoder)
        choice["logprobs"] = out

    def body(self, data: bytes) -> bytes:
        """A whole (non-streamed) answer converted; unchanged when it is not JSON with choices."""
        try:
            j = json.loads(data)
        except ValueError:
            return data
        if not isinstance(j, dict) or not isinstance(j.get("choices"), list):
            return data
        for ch in j["choices"]:
            if isinstance(ch, dict):
                self.convert(ch)
        return json.dumps(j).encode()

    def sse_line(self, line: bytes) -> bytes:
        """One SSE line converted (``data: {...}`` with choices); any other line unchanged."""
        if not line.startswith(b"data:"):
            return line
        payload = line[5:].strip()
        if not payload.startswith(b"{"):
            return line
        converted = self.body(payload)
        return line if converted is payload else b"data: " + converted + b"\n"


class _BodyLimit:
    """ASGI middleware: refuse a request body over ``limit`` bytes with a 413 in the API's
    error shape, without reading it: at once when Content-Length declares more, else (a
    chunked body) as soon as the bytes read pass the limit (a RequestError out of
    ``receive``, which the route's body read raises)."""

    def __init__(self, app, limit: int):
        self.app, self.limit = app, limit
        self.what = f"the limit of {format_size(limit)} (TQGGUF_MAX_REQUEST_BODY)"

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = dict(scope["headers"]).get(b"content-length", b"")
        if declared.isdigit() and int(declared) > self.limit:
            response = _error(Request(scope), 413, f"the request body is {int(declared)} bytes, more than {self.what}")
            return await response(scope, receive, send)
        seen = 0

        async def limited():
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    raise RequestError(413, f"the request body is more than {self.what}")
            return message

        await self.app(scope, limited, send)


def create_app(manager: Manager) -> FastAPI:
    """The FastAPI app over ``manager`` (whose default model is already loaded)."""

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        try:
            yield
        finally:
            await manager.shutdown()

    app = FastAPI(title="tqgguf serve", version=TQGGUF_VERSION, lifespan=lifespan, docs_url=None, redoc_url=None,
                  openapi_url=None)
    app.state.manager = manager
    app.add_middleware(_BodyLimit, limit=manager.settings.max_request_body)

    @app.exception_handler(RequestError)
    async def _request_error(request: Request, exc: RequestError):
        return _error(request, exc.status, exc.message, exc.code, exc.param)

    @app.exception_handler(ModelNotFound)
    async def _not_found(request: Request, exc: ModelNotFound):
        return _error(request, 404, str(exc), "model_not_found", "model")

    @app.exception_handler(ContextTooLarge)
    async def _too_large(request: Request, exc: ContextTooLarge):
        return _error(request, 400, str(exc), "context_length_exceeded", "num_ctx")

    @app.exception_handler(LoadOptionRefused)
    async def _load_refused(request: Request, exc: LoadOptionRefused):
        return _error(request, 400, str(exc), "invalid_load_option", exc.option)

    @app.exception_handler(Unavailable)
    async def _unavailable(request: Request, exc: Unavailable):
        return _error(request, 503, str(exc))

    @app.exception_handler(ChildError)
    async def _child_error(request: Request, exc: ChildError):
        return _error(request, 500, f"the model could not be loaded: {exc}")

    @app.exception_handler(ClientLeft)
    async def _client_left(request: Request, exc: ClientLeft):
        return Response(status_code=499)  # nobody reads it (nginx's "client closed request")

    @app.exception_handler(ChildGone)
    async def _gone(request: Request, exc: ChildGone):
        return _error(request, 503 if manager.shutting_down else 502, str(exc))

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException):
        msg = {404: f"{request.method} {request.url.path} not found", 405: f"method {request.method} is not allowed "
               f"on {request.url.path}"}.get(exc.status_code, str(exc.detail))
        return _error(request, exc.status_code, msg)

    @app.exception_handler(Exception)
    async def _internal_error(request: Request, exc: Exception):
        log.exception("internal error on %s", request.url.path)
        return _error(request, 500, f"internal error: {type(exc).__name__}: {exc}")

    # -- calls to llama-server -------------------------------------------------------------

    async def call(r: Runner, path: str, payload: Any) -> tuple[int, Any]:
        """POST JSON to the runner's llama-server; (status, parsed body). ChildGone on a lost child."""
        if r.client is None:
            raise ChildGone(_gone_message(r))
        try:
            async with r.client.post(path, json=payload) as resp:
                status, data = resp.status, await resp.read()
        except aiohttp.ClientError:
            raise ChildGone(_gone_message(r)) from None
        try:
            return status, json.loads(data)
        except ValueError:
            return status, {"error": {"message": data.decode("utf-8", errors="replace")[:500]}}

    async def call_ok(r: Runner, path: str, payload: Any) -> Any:
        status, data = await call(r, path, payload)
        if status != 200:
            raise RequestError(status, _upstream_message(json.dumps(data).encode()))
        return data

    async def open_stream(r: Runner, path: str, content: bytes | None = None,
                          payload: Any = None) -> aiohttp.ClientResponse:
        """POST and return the response once its headers are in; the caller reads the body
        (``resp.content``) and closes it (``resp.close()``, which also ends the generation)."""
        if r.client is None:
            raise ChildGone(_gone_message(r))
        try:
            # a stream gets a connection of its own, closed when it ends: a kept-alive connection
            # that had carried a stream was sometimes found closed by llama-server when reused
            # (8 streaming clients on 4 slots: 2 of 32 requests lost), and a POST is not retried
            resp = await r.client.post(path, data=content if content is not None else json.dumps(payload),
                                       headers={"content-type": "application/json", "connection": "close"})
        except aiohttp.ClientError:
            raise ChildGone(_gone_message(r)) from None
        if resp.status != 200:
            try:
                data = await resp.read()
            except aiohttp.ClientError:
                data = b""
            resp.close()
            raise RequestError(resp.status, _upstream_message(data))
        r.streams.add(resp)  # cut at shutdown (Manager.begin_shutdown); the stream's done() removes it
        return resp

    # -- OpenAI: passed through ----------------------------------------------------------------

    async def passthrough(request: Request, path: str, kind: str) -> Response:
        raw = await request.body()
        body = await _json_body(request)
        if not isinstance(body, dict):
            raise RequestError(400, "the request body must be a JSON object")
        name = body.get("model") if isinstance(body.get("model"), str) else None
        # legacy completions with logprobs: llama-server answers in the chat shape; convert it
        legacy = (LegacyLogprobs(body.get("prompt")) if path == "/v1/completions" and body.get("logprobs") not in
                  (None, False) else None)
        stack = contextlib.AsyncExitStack()
        r, _ = await stack.enter_async_context(manager.use(name, kind))
        try:
            if body.get("stream") is True:
                try:
                    resp = await open_stream(r, path, content=raw)
                except RequestError as e:
                    return _openai_error(e.status, e.message)

                stream_stack = stack.pop_all()  # the stream now holds the model; it releases it when it ends

                async def done() -> None:
                    r.streams.discard(resp)
                    resp.close()
                    await stream_stack.aclose()

                async def relay() -> AsyncIterator[bytes]:
                    try:
                        if legacy is None:
                            async for chunk in resp.content.iter_any():
                                yield chunk
                        else:
                            async for line in resp.content:
                                yield legacy.sse_line(line)
                    except aiohttp.ClientError:
                        err = {"error": {"message": _gone_message(r), "type": "server_error",
                                         "code": 503 if r.cut_reason else 502}}
                        yield f"data: {json.dumps(err)}\n\n".encode()
                    finally:
                        await done()

                return _Stream(relay(), done, status_code=200,
                               media_type=resp.headers.get("content-type", "text/event-stream"))
            if r.client is None:
                raise ChildGone(_gone_message(r))
            async def answer() -> Response:
                async with r.client.post(path, data=raw, headers={"content-type": "application/json"}) as resp:
                    data = await resp.read()
                    if legacy is not None and resp.status == 200:
                        data = legacy.body(data)
                    return Response(data, status_code=resp.status,
                                    media_type=resp.headers.get("content-type", "application/json"))

            try:
                return await until_disconnect(request, answer())
            except aiohttp.ClientError:
                raise ChildGone(_gone_message(r)) from None
        finally:
            await stack.aclose()

    # The pass-through routes are plain Starlette routes: FastAPI's endpoint layer (parameter
    # analysis, dependency solving, response serialisation) does nothing for them but costs
    # CPU on every request, and a burst of requests pays it one after another.
    async def chat_completions(request: Request) -> Response:
        return await passthrough(request, "/v1/chat/completions", "chat")

    async def completions(request: Request) -> Response:
        return await passthrough(request, "/v1/completions", "chat")

    async def embeddings(request: Request) -> Response:
        return await passthrough(request, "/v1/embeddings", "embed")

    app.add_route("/v1/chat/completions", chat_completions, methods=["POST"])
    app.add_route("/v1/completions", completions, methods=["POST"])
    app.add_route("/v1/embeddings", embeddings, methods=["POST"])

    def _openai_model(m: ModelFile) -> dict:
        return {"id": m.name, "object": "model", "created": int(m.path.stat().st_mtime), "owned_by": "tqgguf"}

    @app.get("/v1/models")
    async def list_models():
        return {"object": "list", "data": [_openai_model(m) for m in manager.models.values()]}

    @app.get("/v1/models/{model_id:path}")
    async def get_model(model_id: str, request: Request):
        return _openai_model(manager.find(model_id))

    @app.get("/metrics")
    async def metrics(model: str | None = None):
        async with manager.use(model) as (r, _):
            if r.client is None:
                raise ChildGone(_gone_message(r))
            try:
                async with r.client.get("/metrics") as resp:
                    return Response(await resp.read(), status_code=resp.status,
                                    media_type=resp.headers.get("content-type", "text/plain"))
            except aiohttp.ClientError:
                raise ChildGone(_gone_message(r)) from None

    # -- health --------------------------------------------------------------------------------

    @app.get("/health")
    async def health():
        runners = [r.status() for r in manager.runners.values()]
        default = [r for r in manager.runners.values() if r.model is manager.default and r.kind == "chat"]
        state = default[0].state if default else "unloaded"
        status = {"ready": "ok", "unloaded": "ok", "stopped": "ok", "loading": "loading"}.get(state, state)
        body = {"status": status, "model": manager.default.name, "model_state": state, "runners": runners}
        if default and default[0].error:
            body["error"] = default[0].error
        return JSONResponse(body, status_code=200 if status == "ok" else 503)

    # -- Ollama ------------------------------------------------------------------------------------

    @app.get("/", response_class=PlainTextResponse)
    async def root():
        return "Ollama is running"

    @app.head("/")
    async def root_head():
        return Response(status_code=200)

    @app.get("/api/version")
    async def version():
        return {"version": ol.OLLAMA_API_VERSION}

    @app.head("/api/version")
    async def version_head():
        return Response(status_code=200)

    def _tag_entry(m: ModelFile) -> dict:
        st = m.path.stat()
        return {"name": m.tag, "model": m.tag,
                "modified_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(st.st_mtime)),
                "size": st.st_size, "digest": m.digest, "details": m.details()}

    def _available() -> list[ModelFile]:
        """The served models plus every registry model that is downloaded."""
        from ..models import list_models as registry

        out = list(manager.models.values())
        known = {str(m.path) for m in out}
        for row in registry():
            if row.get("path") and row["path"] not in known:
                out.append(ModelFile(row["name"], __import__("pathlib").Path(row["path"])))
        return out

    @app.get("/api/tags")
    async def tags():
        import asyncio

        return {"models": await asyncio.to_thread(lambda: [_tag_entry(m) for m in _available()])}

    @app.head("/api/tags")
    async def tags_head():
        return Response(status_code=200)

    @app.get("/api/ps")
    async def ps():
        out, seen = [], set()
        for r in manager.loaded():
            if r.model.name in seen:
                continue
            seen.add(r.model.name)
            left = manager.expires_in(r)
            expires = ("2318-11-11T00:00:00Z" if left is None else  # Ollama's "forever" is a far date too
                       time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + max(left, 0))))
            e = _tag_entry(r.model)
            e.pop("modified_at")
            e.update(expires_at=expires, size_vram=e["size"] if manager.config.n_gpu_layers else 0,
                     context_length=r.n_ctx)
            out.append(e)
        return {"models": out}

    @app.post("/api/show")
    async def show(request: Request):
        body = ol.require_object(await _json_body(request))
        m = manager.find(ol.model_name(body))
        import asyncio

        md = await asyncio.to_thread(m.metadata)
        template = m.chat_template()
        caps = ["completion"] + (["tools"] if "tools" in template else []) + \
            (["thinking"] if ol.supports_thinking(template) else []) + (["embedding"] if m.has_pooling() else [])
        info = {k: v for k, v in md.items() if not k.startswith("tokenizer.chat_template")}
        return {"license": str(md.get("general.license", "")), "modelfile": f"FROM {m.path}\n", "parameters": "",
                "template": template, "details": m.details(), "model_info": info, "capabilities": caps,
                "modified_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(m.path.stat().st_mtime))}

    async def finish(res: dict, reason: str | None, timings: dict | None, lp: list | None, t0: float,
                     load_s: float, stack: contextlib.AsyncExitStack, headers: dict, **extra: Any) -> JSONResponse:
        """The end of a non-streamed Ollama answer: ``done``, ``done_reason`` (Ollama's name for
        the finish reason), ``extra`` (e.g. context), the timing fields, ``logprobs`` when asked;
        the model is released (keep-alive applied from now) before the answer goes out."""
        res.update(done=True, done_reason=ol.done_reason(reason), **extra,
                   **ol.timings(timings, time.monotonic() - t0, load_s))
        if lp is not None:
            res["logprobs"] = lp
        await stack.aclose()
        return JSONResponse(res, headers=headers)

    async def load_or_unload(name: str, ka: float | None, body: dict, shape: str) -> dict:
        m = manager.find(name)
        _, load = ol.options(body)  # a load request's load-time options apply as a generation's would
        base = {"model": name, "created_at": ol.now_rfc3339(), "done": True}
        if ka == 0:
            await manager.unload(m, reason="keep_alive 0")
            reason = "unload"
        else:
            async with manager.use(name, num_ctx=load.pop("num_ctx", None), load=load, keep_alive=ka):
                pass
            reason = "load"
        if shape == "chat":
            base["message"] = {"role": "assistant", "content": ""}
        else:
            base["response"] = ""
        base["done_reason"] = reason
        return base

    @app.post("/api/chat")
    async def api_chat(request: Request):
        t0 = time.monotonic()
        body = ol.require_object(await _json_body(request))
        name = ol.model_name(body)
        ka = ol.keep_alive(body)
        if not body.get("messages"):
            if "messages" in body and not isinstance(body["messages"], list):
                raise RequestError(400, "messages must be a list of {role, content} objects")
            return await load_or_unload(name, ka, body, "chat")
        messages = ol.chat_messages(body["messages"])
        sampling, load = ol.options(body)
        model = manager.find(name)
        payload: dict[str, Any] = {"messages": messages, **sampling}
        payload.update(ol.think_fields(body, name, model.chat_template()))
        payload.update(ol.logprob_fields(body, chat=True))
        tool_names: set[str] = set()
        if (t := ol.tools(body)) is not None:
            payload["tools"] = t
            tool_names = {x["function"].get("name") for x in t}
        if (schema := ol.format_schema(body.get("format"))) is not None:
            payload["response_format"] = {"type": "json_schema", "json_schema": {"name": "format", "schema": schema}}
        stream = body.get("stream", True) is not False
        payload["stream"] = stream
        stack = contextlib.AsyncExitStack()
        r, reloaded = await stack.enter_async_context(manager.use(name, num_ctx=load.pop("num_ctx", None),
                                                                  load=load, keep_alive=ka))
        headers = {"X-Tqgguf-Reloaded": r.reload_reason} if reloaded else {}
        load_s = r.loaded_since(t0)
        try:
            if not stream:
                data = await until_disconnect(request, call_ok(r, "/v1/chat/completions", payload))
                ch = (data.get("choices") or [{}])[0]
                msg = ch.get("message") or {}
                out_msg: dict[str, Any] = {"role": "assistant", "content": msg.get("content") or ""}
                if msg.get("reasoning_content"):
                    out_msg["thinking"] = msg["reasoning_content"]
                calls = msg.get("tool_calls") or (ol.tool_calls_from_text(out_msg["content"], tool_names)
                                                  if tool_names else None)
                if calls:
                    out_msg["tool_calls"] = ol.tool_calls_from_openai(calls)
                    if not msg.get("tool_calls"):
                        out_msg["content"] = ""
                return await finish({"model": name, "created_at": ol.now_rfc3339(), "message": out_msg},
                                    ch.get("finish_reason"), data.get("timings"),
                                    ol.logprobs_from_openai(ch.get("logprobs")), t0, load_s, stack, headers)
            resp = await open_stream(r, "/v1/chat/completions", payload=payload)
        except BaseException:
            await stack.aclose()
            raise

        async def done() -> None:
            r.streams.discard(resp)
            resp.close()
            await stack.aclose()

        async def ndjson() -> AsyncIterator[bytes]:
            calls: dict[int, dict] = {}
            finish, tm = None, None
            held, holding = "", bool(tool_names)  # with tools, text that may be a tool call is held back
            try:
                try:
                    async for raw_line in resp.content:
                        ev = _sse_data(raw_line.decode("utf-8", errors="replace"))
                        if ev is None:
                            continue
                        if "error" in ev:
                            yield (json.dumps({"error": _upstream_message(json.dumps(ev).encode())}) + "\n").encode()
                            return
                        tm = ev.get("timings") or tm
                        for ch in ev.get("choices") or []:
                            d = ch.get("delta") or {}
                            finish = ch.get("finish_reason") or finish
                            for tc in d.get("tool_calls") or []:
                                slot = calls.setdefault(tc.get("index", 0), {"function": {"name": "", "arguments": ""}})
                                fn = tc.get("function") or {}
                                slot["function"]["name"] += fn.get("name") or ""
                                slot["function"]["arguments"] += fn.get("arguments") or ""
                            piece: dict[str, Any] = {}
                            if d.get("content"):
                                piece["content"] = d["content"]
                                if holding:
                                    held += d["content"]
                                    if held.lstrip()[:1] in ("", "{", "[", "<", "`"):
                                        piece.pop("content")
                                    else:
                                        piece["content"], held, holding = held, "", False
                            if d.get("reasoning_content"):
                                piece["thinking"] = d["reasoning_content"]
                            lp = ol.logprobs_from_openai(ch.get("logprobs"))
                            if piece or lp:
                                out = {"model": name, "created_at": ol.now_rfc3339(),
                                       "message": {"role": "assistant", "content": piece.get("content", ""),
                                                   **({"thinking": piece["thinking"]} if "thinking" in piece else {})},
                                       "done": False}
                                if lp:
                                    out["logprobs"] = lp
                                yield (json.dumps(out) + "\n").encode()
                except aiohttp.ClientError:
                    yield (json.dumps({"error": _gone_message(r)}) + "\n").encode()
                    return
                if held and not calls:
                    parsed = ol.tool_calls_from_text(held, tool_names)
                    if parsed:
                        calls = dict(enumerate(parsed))
                    else:
                        yield (json.dumps({"model": name, "created_at": ol.now_rfc3339(),
                                           "message": {"role": "assistant", "content": held},
                                           "done": False}) + "\n").encode()
                if calls:
                    msg = {"role": "assistant", "content": "",
                           "tool_calls": ol.tool_calls_from_openai([calls[i] for i in sorted(calls)])}
                    yield (json.dumps({"model": name, "created_at": ol.now_rfc3339(), "message": msg,
                                       "done": False}) + "\n").encode()
                final = {"model": name, "created_at": ol.now_rfc3339(), "message": {"role": "assistant", "content": ""},
                         "done": True, "done_reason": ol.done_reason(finish),
                         **ol.timings(tm, time.monotonic() - t0, load_s)}
                yield (json.dumps(final) + "\n").encode()
            finally:
                await done()

        return _Stream(ndjson(), done, media_type="application/x-ndjson", headers=headers)

    @app.post("/api/generate")
    async def api_generate(request: Request):
        t0 = time.monotonic()
        body = ol.require_object(await _json_body(request))
        name = ol.model_name(body)
        ka = ol.keep_alive(body)
        prompt = body.get("prompt")
        if prompt is None or (prompt == "" and not body.get("context")):
            return await load_or_unload(name, ka, body, "generate")
        if not isinstance(prompt, str):
            raise RequestError(400, "prompt must be a string")
        for f, why in (("template", "custom Go templates are not supported; the model's own chat template is used "
                                    "(or send raw: true with a formatted prompt)"),
                       ("suffix", "fill-in-the-middle (suffix) is not supported by tqgguf serve"),
                       ("images", "this model does not support images (no vision projector is loaded)")):
            if body.get(f):
                raise RequestError(400, f"{f}: {why}")
        context = body.get("context") or []
        if not isinstance(context, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in context):
            raise RequestError(400, "context must be the list of token ids a previous /api/generate returned")
        raw = body.get("raw") is True
        sampling, load = ol.options(body)
        model = manager.find(name)
        think = ol.think_fields(body, name, model.chat_template()) if not raw else {}
        # /completion gives the raw text, tags included: split it here (llama-server parses
        # reasoning on its chat endpoint only)
        splits = think.get("reasoning_format") == "deepseek"
        stream = body.get("stream", True) is not False
        stack = contextlib.AsyncExitStack()
        r, reloaded = await stack.enter_async_context(manager.use(name, num_ctx=load.pop("num_ctx", None),
                                                                  load=load, keep_alive=ka))
        headers = {"X-Tqgguf-Reloaded": r.reload_reason} if reloaded else {}
        load_s = r.loaded_since(t0)
        try:
            if raw:
                text = prompt
            else:
                msgs = ([{"role": "system", "content": body["system"]}] if isinstance(body.get("system"), str) else [])
                msgs.append({"role": "user", "content": prompt})
                text = (await call_ok(r, "/apply-template", {"messages": msgs, **{k: v for k, v in think.items()
                                                                                     if k == "chat_template_kwargs"}}))["prompt"]
            toks = (await call_ok(r, "/tokenize", {"content": text, "add_special": not context,
                                                   "parse_special": True}))["tokens"]
            full = list(context) + list(toks)
            payload: dict[str, Any] = {"prompt": full, "stream": stream, "return_tokens": True, "cache_prompt": True,
                                       **sampling, **ol.logprob_fields(body, chat=False)}
            if (schema := ol.format_schema(body.get("format"))) is not None:
                payload["json_schema"] = schema
            if not stream:
                data = await until_disconnect(request, call_ok(r, "/completion", payload))
                answer = data.get("content", "")
                res: dict[str, Any] = {"model": name, "created_at": ol.now_rfc3339()}
                if splits:
                    thinking, answer = ol.split_thinking(answer, text)
                    if thinking:
                        res["thinking"] = thinking
                res["response"] = answer
                return await finish(res, data.get("stop_type"), data.get("timings"),
                                    ol.logprobs_from_native(data.get("completion_probabilities")), t0, load_s,
                                    stack, headers, context=full + list(data.get("tokens") or []))
            resp = await open_stream(r, "/completion", payload=payload)
        except BaseException:
            await stack.aclose()
            raise

        async def done() -> None:
            r.streams.discard(resp)
            resp.close()
            await stack.aclose()

        splitter = ol.ThinkSplitter(text) if splits else None

        def piece(thinking: str, response: str, lp: list | None = None) -> bytes:
            out: dict[str, Any] = {"model": name, "created_at": ol.now_rfc3339(), "response": response}
            if thinking:
                out["thinking"] = thinking
            out["done"] = False
            if lp is not None:
                out["logprobs"] = lp
            return (json.dumps(out) + "\n").encode()

        async def ndjson() -> AsyncIterator[bytes]:
            gen: list[int] = []
            try:
                try:
                    async for raw_line in resp.content:
                        ev = _sse_data(raw_line.decode("utf-8", errors="replace"))
                        if ev is None:
                            continue
                        if "error" in ev:
                            yield (json.dumps({"error": _upstream_message(json.dumps(ev).encode())}) + "\n").encode()
                            return
                        gen += list(ev.get("tokens") or [])
                        if ev.get("stop"):
                            if splitter is not None and any(held := splitter.finish()):
                                yield piece(*held)
                            final = {"model": name, "created_at": ol.now_rfc3339(), "response": "", "done": True,
                                     "done_reason": ol.done_reason(ev.get("stop_type")), "context": full + gen,
                                     **ol.timings(ev.get("timings"), time.monotonic() - t0, load_s)}
                            yield (json.dumps(final) + "\n").encode()
                            return
                        thinking, response = "", ev.get("content", "")
                        if splitter is not None:
                            thinking, response = splitter.feed(response)
                        yield piece(thinking, response, ol.logprobs_from_native(ev.get("completion_probabilities")))
                except aiohttp.ClientError:
                    yield (json.dumps({"error": _gone_message(r)}) + "\n").encode()
            finally:
                await done()

        return _Stream(ndjson(), done, media_type="application/x-ndjson", headers=headers)

    async def embed_inputs(r: Runner, inputs: list[str], truncate: bool) -> tuple[list[list[int]], int]:
        seqs, total = [], 0
        for i, text in enumerate(inputs):
            toks = (await call_ok(r, "/tokenize", {"content": text, "add_special": True, "parse_special": False}))["tokens"]
            if len(toks) > r.n_ctx:
                if not truncate:
                    raise RequestError(400, f"input[{i}] has {len(toks)} tokens, more than the context length "
                                            f"{r.n_ctx}; send truncate: true or a shorter input")
                toks = toks[:r.n_ctx]
            if not toks:
                raise RequestError(400, f"input[{i}] is empty")
            seqs.append(toks)
            total += len(toks)
        return seqs, total

    def _resize(v: list[float], dims: int | None) -> list[float]:
        if not dims or dims >= len(v):
            return v
        v = v[:dims]
        n = math.sqrt(sum(x * x for x in v)) or 1.0
        return [x / n for x in v]

    @app.post("/api/embed")
    async def api_embed(request: Request):
        t0 = time.monotonic()
        body = ol.require_object(await _json_body(request))
        name = ol.model_name(body)
        inp = body.get("input")
        inputs = [inp] if isinstance(inp, str) else inp
        if not isinstance(inputs, list) or not inputs or not all(isinstance(s, str) for s in inputs):
            raise RequestError(400, "input must be a string or a non-empty list of strings")
        dims = body.get("dimensions")
        if dims is not None and (isinstance(dims, bool) or not isinstance(dims, int) or dims < 1):
            raise RequestError(400, "dimensions must be a positive integer")
        truncate = body.get("truncate", True) is not False
        _, load = ol.options(body)
        async with manager.use(name, "embed", num_ctx=load.pop("num_ctx", None), load=load,
                               keep_alive=ol.keep_alive(body)) as (r, reloaded):
            seqs, n = await embed_inputs(r, inputs, truncate)
            data = await call_ok(r, "/v1/embeddings", {"input": seqs})
            vecs = [_resize(d["embedding"], dims) for d in sorted(data["data"], key=lambda d: d["index"])]
            return {"model": name, "embeddings": vecs, "total_duration": int((time.monotonic() - t0) * 1e9),
                    "load_duration": int(r.loaded_since(t0) * 1e9), "prompt_eval_count": n}

    @app.post("/api/embeddings")
    async def api_embeddings(request: Request):
        body = ol.require_object(await _json_body(request))
        name = ol.model_name(body)
        prompt = body.get("prompt")
        if not isinstance(prompt, str):
            raise RequestError(400, "prompt must be a string")
        _, load = ol.options(body)
        async with manager.use(name, "embed", num_ctx=load.pop("num_ctx", None), load=load,
                               keep_alive=ol.keep_alive(body)) as (r, _):
            if not prompt:
                return {"embedding": []}
            seqs, _n = await embed_inputs(r, [prompt], True)
            data = await call_ok(r, "/v1/embeddings", {"input": seqs})
            return {"embedding": data["data"][0]["embedding"]}

    return app
