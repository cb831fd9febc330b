"""Every call from the front to a model's llama-server, in one place.

- :func:`call` / :func:`call_ok`: one JSON request, the whole answer parsed (the Ollama
  routes' ``/completion``, ``/tokenize``, ``/apply-template``, ``/v1/embeddings`` calls);
- :func:`open_stream`: a streamed answer, returned once its headers are in, on a
  connection of its own; the caller relays ``resp.content`` and closes it;
- :func:`forward`: the OpenAI pass-through — the client's body sent unchanged, the answer
  (streamed or not, errors included) returned unchanged, but for an optional rewrite of
  the answer (``/v1/completions`` logprobs); :func:`forward_get` the same for a GET
  (``/metrics``);
- :func:`until_disconnect` and :class:`Stream`: a request whose client goes away stops its
  generation (the connection to llama-server is closed unread, which makes llama-server
  cancel it and free the slot) and releases the model.

A child that goes away mid-call raises :class:`~.errors.ChildGone` (502), or, once a
stream has started, ends it with the API's error event.
"""
from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any, AsyncIterator, Awaitable, Protocol, TypeVar

import aiohttp
from fastapi import Request
from fastapi.responses import Response, StreamingResponse

from .child import describe_exit
from .errors import ChildGone, ClientLeft, openai_error, upstream_error
from .ollama import RequestError, openai_defaults
from .manager import Manager
from .runner import Runner

_T = TypeVar("_T")


async def until_disconnect(request: Request, work: Awaitable[_T]) -> _T:
    """Await ``work`` (a call to llama-server for a non-streaming answer) unless the client
    goes away first: then ``work`` is cancelled — its connection to llama-server is closed
    unread, and llama-server cancels the generation and frees the slot, as it does for a
    client of its own — and ClientLeft is raised. (Streams end the same way through
    :class:`Stream`.) The request body must have been read: the next ASGI message is then
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


class Stream(StreamingResponse):
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


def sse_data(line: str) -> dict | None:
    """The JSON of one ``data: {...}`` SSE line; None for any other line and ``[DONE]``."""
    if not line.startswith("data:"):
        return None
    payload = line[5:].strip()
    if not payload or payload == "[DONE]":
        return None
    try:
        return json.loads(payload)
    except ValueError:
        return None


def upstream_message(data: bytes) -> str:
    """The message of a llama-server error answer (its ``error.message``, else the text)."""
    try:
        j = json.loads(data)
        e = j.get("error", j)
        return e.get("message", str(e)) if isinstance(e, dict) else str(e)
    except (ValueError, AttributeError):
        return data.decode("utf-8", errors="replace")[:500]


def gone_message(r: Runner) -> str:
    """Why ``r``'s child went away during a request: the shutdown's reason, else its exit."""
    if r.cut_reason:
        return r.cut_reason
    code = r.child.returncode() if r.child else None
    what = describe_exit(code) if code is not None else "connection lost"
    return (f"llama-server for {r.model.name} exited during the request ({what}); "
            "tqgguf serve is restarting it (see /health)")


async def call(r: Runner, path: str, payload: Any) -> tuple[int, Any]:
    """POST JSON to the runner's llama-server; (status, parsed body). ChildGone on a lost child."""
    if r.client is None:
        raise ChildGone(gone_message(r))
    try:
        async with r.client.post(path, json=payload) as resp:
            status, data = resp.status, await resp.read()
    except aiohttp.ClientError:
        raise ChildGone(gone_message(r)) from None
    try:
        return status, json.loads(data)
    except ValueError:
        return status, {"error": {"message": data.decode("utf-8", errors="replace")[:500]}}


async def call_ok(r: Runner, path: str, payload: Any) -> Any:
    """:func:`call`'s parsed body; a RequestError with llama-server's status and message unless 200."""
    status, data = await call(r, path, payload)
    if status != 200:
        raise RequestError(*upstream_error(status, upstream_message(json.dumps(data).encode())))
    return data


async def open_stream(r: Runner, path: str, content: bytes | None = None,
                      payload: Any = None) -> aiohttp.ClientResponse:
    """POST and return the response once its headers are in; the caller reads the body
    (``resp.content``) and closes it (``resp.close()``, which also ends the generation)."""
    if r.client is None:
        raise ChildGone(gone_message(r))
    try:
        # a stream gets a connection of its own, closed when it ends: a kept-alive connection
        # that had carried a stream was sometimes found closed by llama-server when reused
        # (8 streaming clients on 4 slots: 2 of 32 requests lost), and a POST is not retried
        resp = await r.client.post(path, data=content if content is not None else json.dumps(payload),
                                   headers={"content-type": "application/json", "connection": "close"})
    except aiohttp.ClientError:
        raise ChildGone(gone_message(r)) from None
    if resp.status != 200:
        try:
            data = await resp.read()
        except aiohttp.ClientError:
            data = b""
        resp.close()
        raise RequestError(*upstream_error(resp.status, upstream_message(data)))
    r.streams.add(resp)  # cut at shutdown (Manager.begin_shutdown); the stream's done() removes it
    return resp


class Rewrite(Protocol):
    """A change :func:`forward` makes to llama-server's answer (e.g. ``LegacyLogprobs``,
    ``openai_api.ChatAnswer``): ``body`` for a whole answer; ``sse_line`` for each line of a
    stream when ``streams`` is true (else the stream is relayed as it comes)."""

    streams: bool

    def body(self, data: bytes) -> bytes: ...

    def sse_line(self, line: bytes) -> bytes: ...


#: The OpenAI routes whose requests get the model's Modelfile parameters as defaults
#: (``ollama.openai_defaults``), as Ollama's OpenAI-compatible endpoints do.
MODEL_DEFAULTS_PATHS = frozenset({"/v1/chat/completions", "/v1/completions"})


def with_headers(response: Response, headers: dict[str, str]) -> Response:
    response.headers.update(headers)
    return response


async def forward(request: Request, manager: Manager, raw: bytes, body: dict, path: str, kind: str,
                  rewrite: Rewrite | None = None) -> Response:
    """Send the client's bytes ``raw`` (parsed: ``body``, for ``model`` and ``stream``) to
    ``path`` of the model's ``kind`` runner and relay the answer unchanged — as a stream
    when ``body["stream"]`` is true — through ``rewrite`` when given; llama-server's 500s
    that are the request's fault become 400s (``errors.upstream_error``). The model is held
    until the answer (or the stream) ends."""
    name = body.get("model") if isinstance(body.get("model"), str) else None
    if path in MODEL_DEFAULTS_PATHS and (new := openai_defaults(body, manager.find(name).params())) is not None:
        raw, body = json.dumps(new).encode(), new
    stack = contextlib.AsyncExitStack()
    r, reloaded = await stack.enter_async_context(manager.use(name, kind))
    headers = {"X-Tqgguf-Reloaded": r.reload_reason} if reloaded else {}  # as on /api: what the load changed
    try:
        if body.get("stream") is True:
            try:
                resp = await open_stream(r, path, content=raw)
            except RequestError as e:
                return with_headers(openai_error(e.status, e.message), headers)

            stream_stack = stack.pop_all()  # the stream now holds the model; it releases it when it ends

            async def done() -> None:
                r.streams.discard(resp)
                resp.close()
                await stream_stack.aclose()

            async def relay() -> AsyncIterator[bytes]:
                try:
                    if rewrite is None or not rewrite.streams:
                        async for chunk in resp.content.iter_any():
                            yield chunk
                    else:
                        async for line in resp.content:
                            yield rewrite.sse_line(line)
                            if getattr(rewrite, "finished", False):
                                break  # the answer is complete; done() closes the stream, ending the generation
                except aiohttp.ClientError:
                    err = {"error": {"message": gone_message(r), "type": "server_error",
                                     "code": 503 if r.cut_reason else 502}}
                    yield f"data: {json.dumps(err)}\n\n".encode()
                finally:
                    await done()

            return Stream(relay(), done, status_code=200, headers=headers,
                          media_type=resp.headers.get("content-type", "text/event-stream"))
        if r.client is None:
            raise ChildGone(gone_message(r))

        async def answer() -> Response:
            async with r.client.post(path, data=raw, headers={"content-type": "application/json"}) as resp:
                data = await resp.read()
                if rewrite is not None and resp.status == 200:
                    data = rewrite.body(data)
                elif resp.status >= 500:
                    status, message = upstream_error(resp.status, upstream_message(data))
                    if status != 500:
                        return with_headers(openai_error(status, message), headers)
                return Response(data, status_code=resp.status, headers=headers,
                                media_type=resp.headers.get("content-type", "application/json"))

        try:
            return await until_disconnect(request, answer())
        except aiohttp.ClientError:
            raise ChildGone(gone_message(r)) from None
    finally:
        await stack.aclose()


async def forward_get(manager: Manager, name: str | None, path: str, query: dict[str, str] | None = None) -> Response:
    """GET ``path`` (with ``query``) of the model's chat runner and relay the answer unchanged."""
    async with manager.use(name) as (r, _):
        if r.client is None:
            raise ChildGone(gone_message(r))
        try:
            async with r.client.get(path, params=query or None) as resp:
                return Response(await resp.read(), status_code=resp.status,
                                media_type=resp.headers.get("content-type", "text/plain"))
        except aiohttp.ClientError:
            raise ChildGone(gone_message(r)) from None
