"""The HTTP API of ``tqgguf serve``: OpenAI- and Ollama-compatible routes over a SlotPool.

OpenAI: ``GET /v1/models``, ``POST /v1/completions``, ``POST /v1/chat/completions``
(``stream``: server-sent events ending with ``data: [DONE]``); errors are
``{"error": {"message", "type", "param", "code"}}``.
Ollama: ``GET /api/version``, ``GET /api/tags``, ``GET /api/ps``, ``POST /api/show``,
``POST /api/generate``, ``POST /api/chat`` (``stream`` defaults to true: NDJSON, one
object per line, the last with ``done: true`` and the timings in nanoseconds); errors are
``{"error": "message"}``. ``GET /health`` reports slots and load state.

Every request is validated before it takes a slot (see ``schemas``); a bad one gets a 4xx
with the reason and the server keeps serving. A prompt longer than the slot's context is
shortened (``textgen`` context shift) and the response carries the header
``X-Tqgguf-Context-Shift`` saying what was dropped; ``X-Tqgguf-Max-Tokens`` gives the
token limit actually applied (requests above what is left of the context are clamped).
"""
from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import hashlib
import json
import logging
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, AsyncIterator, Callable, Iterable

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.concurrency import run_in_threadpool

from .pool import SlotPool
from .schemas import (ChatCompletionRequest, CompletionRequest, OllamaChatRequest, OllamaGenerateRequest,
                      OllamaShowRequest, RequestError, parse_body)
from .textgen import (Job, Prompt, PromptTooLongError, Result, Sampling, answer_reserve, clamp_max_new, fit_chat,
                      fit_tokens)

def _version() -> str:
    try:
        from importlib.metadata import version

        return version("tqgguf")
    except Exception:  # noqa: BLE001 - running from a checkout that is not installed
        return "0+unknown"


TQGGUF_VERSION = _version()

#: The Ollama API level these routes follow; clients gate features on /api/version.
OLLAMA_API_VERSION = "0.12.0"

log = logging.getLogger("tqgguf.server")

OPENAI_DEFAULTS = Sampling(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05, repeat_penalty=1.0)
OLLAMA_DEFAULTS = Sampling(temperature=0.8, top_k=40, top_p=0.9, min_p=0.0, repeat_penalty=1.1)


def _now_rfc3339(offset_s: float = 0.0) -> str:
    t = dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=offset_s)
    return t.isoformat().replace("+00:00", "Z")


def _ftype_name(code: str | None) -> str:
    try:
        import llama_cpp

        want = int(code)  # type: ignore[arg-type]
        for k in dir(llama_cpp):
            if k.startswith("LLAMA_FTYPE_MOSTLY_") and getattr(llama_cpp, k) == want:
                return k.removeprefix("LLAMA_FTYPE_MOSTLY_")
        if want == 0:
            return "F32"
    except (TypeError, ValueError, ImportError):
        pass
    return "unknown"


@dataclass
class ModelCard:
    """What the model routes say about the served model."""

    alias: str
    path: Path
    size: int
    modified: float
    digest: str
    family: str
    parameter_size: str
    quantization_level: str
    metadata: dict[str, str] = field(repr=False, default_factory=dict)

    @classmethod
    def build(cls, alias: str, path: Path, metadata: dict[str, str]) -> "ModelCard":
        st = path.stat()
        # identifies the file version (path, size, mtime); not a content hash, which
        # would mean reading the whole file at startup
        digest = hashlib.sha256(f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}".encode()).hexdigest()
        arch = metadata.get("general.architecture", "unknown")
        return cls(alias=alias, path=path, size=st.st_size, modified=st.st_mtime, digest=digest, family=arch,
                   parameter_size=metadata.get("general.size_label", ""),
                   quantization_level=_ftype_name(metadata.get("general.file_type")), metadata=metadata)

    @property
    def tag(self) -> str:
        return self.alias if ":" in self.alias else f"{self.alias}:latest"

    def names(self) -> set[str]:
        """Names a request may use for this model (case-insensitive)."""
        stem = self.path.stem
        return {n.lower() for n in (self.alias, self.tag, self.path.name, stem, f"{stem}:latest")}

    def details(self) -> dict[str, Any]:
        return {"parent_model": "", "format": "gguf", "family": self.family, "families": [self.family],
                "parameter_size": self.parameter_size, "quantization_level": self.quantization_level}


class _State:
    def __init__(self, pool: SlotPool, card: ModelCard):
        self.pool, self.card = pool, card


def _openai_error(status: int, message: str, code: str | None = None, param: str | None = None) -> JSONResponse:
    kind = "invalid_request_error" if status < 500 else "server_error"
    if status == 404:
        kind = "not_found_error"
    return JSONResponse({"error": {"message": message, "type": kind, "param": param, "code": code}}, status_code=status)


def _is_ollama(request: Request) -> bool:
    return request.url.path.startswith("/api/")


def create_app(pool: SlotPool, card: ModelCard) -> FastAPI:
    """The FastAPI app serving ``card``'s model through ``pool`` (already loaded)."""
    state = _State(pool, card)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        pool.bind_loop(asyncio.get_running_loop())
        reaper = asyncio.create_task(pool.reaper())
        try:
            yield
        finally:
            reaper.cancel()
            pool.close()

    app = FastAPI(title="tqgguf serve", version=TQGGUF_VERSION, lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.tqgguf = state

    @app.exception_handler(RequestError)
    async def _request_error(request: Request, exc: RequestError):
        if _is_ollama(request):
            return JSONResponse({"error": exc.message}, status_code=exc.status)
        return _openai_error(exc.status, exc.message, exc.code, exc.param)

    @app.exception_handler(Exception)
    async def _internal_error(request: Request, exc: Exception):
        log.exception("internal error on %s", request.url.path)
        msg = f"internal error: {type(exc).__name__}: {exc}"
        if _is_ollama(request):
            return JSONResponse({"error": msg}, status_code=500)
        return _openai_error(500, msg)

    # -- helpers -------------------------------------------------------------------------

    def check_model(name: str | None, *, required: bool) -> None:
        if not name:
            if required:
                raise RequestError(400, "model is required", param="model")
            return
        if name.strip().lower() not in card.names():
            raise RequestError(404, f"model {name!r} not found; this server serves {card.tag!r} "
                                    f"(also accepted: {card.alias!r}, {card.path.name!r})",
                               code="model_not_found", param="model")

    async def chat_prompt(messages: list[dict[str, str]], limit: int | None) -> Prompt:
        reserve = answer_reserve(pool.n_ctx, limit)
        try:
            return await run_in_threadpool(fit_chat, pool.vocab, messages, pool.n_ctx, reserve)
        except PromptTooLongError as e:
            raise RequestError(400, str(e), code="context_length_exceeded") from None
        except ValueError as e:  # the chat template refused the conversation
            raise RequestError(400, str(e), param="messages") from None

    async def text_prompt(text: str | list[int], limit: int | None, context: list[int] | None = None) -> Prompt:
        reserve = answer_reserve(pool.n_ctx, limit)
        tokens = list(text) if isinstance(text, list) else await run_in_threadpool(pool.vocab.tokenize, text)
        if context:
            tokens = list(context) + (tokens[1:] if tokens and tokens[0] == pool.vocab.bos else tokens)
        bad = [t for t in tokens if not 0 <= t < pool.vocab.n_vocab]
        if bad:
            raise RequestError(400, f"token id {bad[0]} is out of range: the vocabulary has "
                                    f"{pool.vocab.n_vocab} tokens",
                               param="context" if context else "prompt")
        if not tokens:
            if pool.vocab.bos < 0:
                raise RequestError(400, "the prompt is empty", param="prompt")
            tokens = [pool.vocab.bos]
        try:
            return fit_tokens(pool.vocab, tokens, pool.n_ctx, reserve)
        except PromptTooLongError as e:
            raise RequestError(400, str(e), code="context_length_exceeded") from None

    def make_job(prompt: Prompt, sampling: Sampling, limit: int | None, stop: list[str] | None, kind: str) -> Job:
        return Job(prompt=prompt, sampling=sampling, max_new=clamp_max_new(len(prompt.tokens), pool.n_ctx, limit),
                   stop=list(stop or []), requested_max=limit, kind=kind)

    def headers(job: Job) -> dict[str, str]:
        h = {"X-Tqgguf-Max-Tokens": str(job.max_new)}
        if job.prompt.shifted:
            h["X-Tqgguf-Context-Shift"] = job.prompt.shift_note()
        return h

    def log_result(job: Job, res: Result) -> None:
        pp = res.prompt_tokens / res.prompt_seconds if res.prompt_seconds > 0 else 0.0
        tg = len(res.tokens) / res.eval_seconds if res.eval_seconds > 0 else 0.0
        note = f"; context shift: {job.prompt.shift_note()}" if job.prompt.shifted else ""
        clamp = (f"; max tokens {job.requested_max} clamped to {job.max_new}"
                 if job.requested_max is not None and job.requested_max > job.max_new else "")
        if res.finish != "cancelled":  # the pool logs cancelled jobs
            log.info("slot %d: %s %d prompt tokens (%.0f t/s), %d generated (%.1f t/s), %s%s%s", res.slot, job.kind,
                     res.prompt_tokens, pp, len(res.tokens), tg, res.finish, note, clamp)

    async def watch_disconnect(request: Request, cancel: threading.Event) -> None:
        while not cancel.is_set():
            if await request.is_disconnected():
                cancel.set()
                return
            await asyncio.sleep(0.25)

    async def collect(request: Request, job: Job) -> Result:
        cancel = threading.Event()
        watcher = asyncio.create_task(watch_disconnect(request, cancel))
        try:
            async with contextlib.aclosing(pool.run(job, cancel)) as events:
                async for kind, value in events:
                    if kind == "done":
                        log_result(job, value)
                        return value
                    if kind == "error":
                        raise value
        finally:
            cancel.set()
            watcher.cancel()
        raise RuntimeError("generation ended without a result")  # pragma: no cover

    def stream(job: Job, fmt: Callable[[str, Any], Iterable[bytes]], media_type: str,
               first: bytes | None = None) -> StreamingResponse:
        cancel = threading.Event()

        async def body() -> AsyncIterator[bytes]:
            try:
                if first is not None:
                    yield first
                async with contextlib.aclosing(pool.run(job, cancel)) as events:
                    async for kind, value in events:
                        if kind == "done":
                            log_result(job, value)
                        elif kind == "error":
                            log.error("generation failed: %s: %s", type(value).__name__, value)
                        for chunk in fmt(kind, value):
                            yield chunk
            finally:
                cancel.set()

        return StreamingResponse(body(), media_type=media_type, headers=headers(job))

    def sampling(defaults: Sampling, src: Any) -> Sampling:
        s = Sampling(**defaults.__dict__)
        for name in ("temperature", "top_k", "top_p", "min_p", "repeat_penalty", "presence_penalty",
                     "frequency_penalty", "seed"):
            v = getattr(src, name, None) if src is not None else None
            if v is not None:
                setattr(s, name, v)
        return s

    def usage(res: Result) -> dict[str, int]:
        return {"prompt_tokens": res.prompt_tokens, "completion_tokens": len(res.tokens),
                "total_tokens": res.prompt_tokens + len(res.tokens)}

    def ollama_timings(res: Result, t_start: float) -> dict[str, Any]:
        return {"total_duration": int((time.perf_counter() - t_start) * 1e9),
                "load_duration": int(res.load_seconds * 1e9),
                "prompt_eval_count": res.prompt_tokens, "prompt_eval_duration": int(res.prompt_seconds * 1e9),
                "eval_count": len(res.tokens), "eval_duration": int(res.eval_seconds * 1e9)}

    # -- plain routes --------------------------------------------------------------------

    @app.get("/", response_class=PlainTextResponse)
    async def root() -> str:
        return "tqgguf is running (OpenAI API under /v1, Ollama API under /api)"

    @app.head("/")
    async def root_head() -> Response:
        return Response(status_code=200)

    @app.get("/health")
    async def health() -> dict[str, Any]:
        busy = pool.busy_count()
        return {"status": "ok", "model": card.alias, "slots_total": len(pool.slots),
                "slots_idle": len(pool.slots) - busy,
                "slots_processing": busy, "loaded": pool.loaded(), "n_ctx_per_slot": pool.n_ctx}

    def engine_meta() -> dict[str, Any]:
        s, r = pool.settings, pool.report
        per_slot = (r.k_mib + r.v_mib) if r else None
        return {"cache_type_k": s.cache_type_k, "cache_type_v": s.cache_type_v, "attn_rotation": s.attn_rotation,
                "attn_rot_k": r.attn_rot_k if r else None, "attn_rot_v": r.attn_rot_v if r else None,
                "k_center": s.k_center, "k_center_active": r.k_center_active if r else None,
                "flash_attn": r.flash_attn if r else s.flash_attention, "n_ctx_per_slot": pool.n_ctx,
                "slots": len(pool.slots), "kv_mib_per_slot": per_slot,
                "kv_mib_total": per_slot * len(pool.slots) if per_slot is not None else None}

    @app.get("/v1/models")
    async def v1_models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": card.alias, "object": "model", "created": int(card.modified),
                                            "owned_by": "tqgguf", "meta": engine_meta()}]}

    # -- OpenAI --------------------------------------------------------------------------

    @app.post("/v1/chat/completions")
    async def v1_chat(request: Request):
        req: ChatCompletionRequest = parse_body(await request.body(), ChatCompletionRequest)  # type: ignore[assignment]
        check_model(req.model, required=False)
        prompt = await chat_prompt([m.as_dict() for m in req.messages], req.limit)
        job = make_job(prompt, sampling(OPENAI_DEFAULTS, req), req.limit, req.stop, "chat")
        cid, created = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())

        def chunk(delta: dict, finish: str | None) -> dict:
            return {"id": cid, "object": "chat.completion.chunk", "created": created, "model": card.alias,
                    "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}

        if req.stream:
            include_usage = bool(req.stream_options and req.stream_options.include_usage)

            def fmt(kind: str, value: Any) -> Iterable[bytes]:
                if kind == "text":
                    yield _sse(chunk({"content": value}, None))
                elif kind == "done":
                    yield _sse(chunk({}, value.finish))
                    if include_usage:
                        yield _sse({**chunk({}, None), "choices": [], "usage": usage(value)})
                    yield b"data: [DONE]\n\n"
                else:
                    yield _sse({"error": {"message": f"generation failed: {value}", "type": "server_error"}})
                    yield b"data: [DONE]\n\n"

            return stream(job, fmt, "text/event-stream", first=_sse(chunk({"role": "assistant", "content": ""}, None)))
        res = await collect(request, job)
        return JSONResponse({"id": cid, "object": "chat.completion", "created": created, "model": card.alias,
                             "choices": [{"index": 0, "message": {"role": "assistant", "content": res.text},
                                          "logprobs": None, "finish_reason": res.finish}],
                             "usage": usage(res)}, headers=headers(job))

    @app.post("/v1/completions")
    async def v1_completions(request: Request):
        req: CompletionRequest = parse_body(await request.body(), CompletionRequest)  # type: ignore[assignment]
        check_model(req.model, required=False)
        text = req.prompt[0] if isinstance(req.prompt, list) and req.prompt and isinstance(req.prompt[0], str) \
            else req.prompt
        limit = req.limit if req.limit is not None else 16  # OpenAI's default for completions
        prompt = await text_prompt(text, limit)  # type: ignore[arg-type]
        job = make_job(prompt, sampling(OPENAI_DEFAULTS, req), limit, req.stop, "completion")
        cid, created = f"cmpl-{uuid.uuid4().hex}", int(time.time())

        def chunk(text: str, finish: str | None) -> dict:
            return {"id": cid, "object": "text_completion", "created": created, "model": card.alias,
                    "choices": [{"text": text, "index": 0, "logprobs": None, "finish_reason": finish}]}

        if req.stream:
            include_usage = bool(req.stream_options and req.stream_options.include_usage)

            def fmt(kind: str, value: Any) -> Iterable[bytes]:
                if kind == "text":
                    yield _sse(chunk(value, None))
                elif kind == "done":
                    yield _sse(chunk("", value.finish))
                    if include_usage:
                        yield _sse({**chunk("", None), "choices": [], "usage": usage(value)})
                    yield b"data: [DONE]\n\n"
                else:
                    yield _sse({"error": {"message": f"generation failed: {value}", "type": "server_error"}})
                    yield b"data: [DONE]\n\n"

            return stream(job, fmt, "text/event-stream")
        res = await collect(request, job)
        return JSONResponse({**chunk(res.text, res.finish), "usage": usage(res)}, headers=headers(job))

    # -- Ollama --------------------------------------------------------------------------

    @app.get("/api/version")
    async def api_version() -> dict[str, str]:
        return {"version": OLLAMA_API_VERSION, "tqgguf": TQGGUF_VERSION}

    def tag_entry() -> dict[str, Any]:
        modified = dt.datetime.fromtimestamp(card.modified, dt.timezone.utc)
        return {"name": card.tag, "model": card.tag, "modified_at": modified.isoformat().replace("+00:00", "Z"),
                "size": card.size, "digest": card.digest, "details": card.details()}

    @app.get("/api/tags")
    async def api_tags() -> dict[str, Any]:
        return {"models": [tag_entry()]}

    @app.get("/api/ps")
    async def api_ps() -> dict[str, Any]:
        if not any(s.engine is not None for s in pool.slots):
            return {"models": []}
        left = pool.expires_in()
        expires = _now_rfc3339(left if left is not None else 292 * 365 * 86400.0)
        return {"models": [{**tag_entry(), "expires_at": expires, "size_vram": 0, "context_length": pool.n_ctx}]}

    @app.post("/api/show")
    async def api_show(request: Request) -> dict[str, Any]:
        req: OllamaShowRequest = parse_body(await request.body(), OllamaShowRequest)  # type: ignore[assignment]
        check_model(req.model or req.name, required=True)
        md = card.metadata
        arch = card.family
        info = {k: _num(v) for k, v in md.items() if k.startswith(f"{arch}.") or k.startswith("general.")}
        return {"license": md.get("general.license", ""), "modelfile": f"FROM {card.path}\n", "parameters": "",
                "template": pool.vocab.chat_template or "", "details": card.details(), "model_info": info,
                "capabilities": ["completion"], "modified_at": tag_entry()["modified_at"], "tqgguf": engine_meta()}

    async def ollama_load(model: str, chat: bool) -> JSONResponse:
        """Ollama's empty request: load the model (or unload it with keep_alive 0)."""
        if pool.keep_alive == 0:
            pool.unload()
            reason = "unload"
        else:
            await collect_quiet(Job(prompt=Prompt([], pool.n_ctx), sampling=Sampling(), max_new=0, kind="load"))
            reason = "load"
        body = {"model": model, "created_at": _now_rfc3339(), "done": True, "done_reason": reason}
        body.update({"message": {"role": "assistant", "content": ""}} if chat else {"response": ""})
        return JSONResponse(body)

    async def collect_quiet(job: Job) -> None:
        cancel = threading.Event()
        async with contextlib.aclosing(pool.run(job, cancel)) as events:
            async for kind, value in events:
                if kind == "error":
                    raise value

    def ollama_stream(job: Job, model: str, t_start: float, chat: bool) -> StreamingResponse:
        def fmt(kind: str, value: Any) -> Iterable[bytes]:
            base = {"model": model, "created_at": _now_rfc3339()}
            if kind == "text":
                part = {"message": {"role": "assistant", "content": value}} if chat else {"response": value}
                body = {**base, **part, "done": False}
            elif kind == "done":
                body = {**base, **({"message": {"role": "assistant", "content": ""}} if chat else {"response": ""}),
                        "done": True, "done_reason": value.finish, **ollama_timings(value, t_start)}
                if not chat:
                    body["context"] = job.prompt.tokens + value.tokens
            else:
                body = {"error": f"generation failed: {value}"}
            yield (json.dumps(body, ensure_ascii=False) + "\n").encode()

        return stream(job, fmt, "application/x-ndjson")

    @app.post("/api/chat")
    async def api_chat(request: Request):
        t_start = time.perf_counter()
        req: OllamaChatRequest = parse_body(await request.body(), OllamaChatRequest)  # type: ignore[assignment]
        check_model(req.model, required=True)
        pool.set_keep_alive(req.keep_alive)
        if not req.messages:
            return await ollama_load(req.model, chat=True)
        stop = req.options.stop if req.options else None
        prompt = await chat_prompt([{"role": m.role, "content": m.content} for m in req.messages], req.limit)
        job = make_job(prompt, sampling(OLLAMA_DEFAULTS, req.options), req.limit, stop, "chat")
        if req.stream:
            return ollama_stream(job, req.model, t_start, chat=True)
        res = await collect(request, job)
        return JSONResponse({"model": req.model, "created_at": _now_rfc3339(),
                             "message": {"role": "assistant", "content": res.text}, "done": True,
                             "done_reason": res.finish, **ollama_timings(res, t_start)}, headers=headers(job))

    @app.post("/api/generate")
    async def api_generate(request: Request):
        t_start = time.perf_counter()
        req: OllamaGenerateRequest = parse_body(await request.body(), OllamaGenerateRequest)  # type: ignore[assignment]
        check_model(req.model, required=True)
        pool.set_keep_alive(req.keep_alive)
        if not req.prompt and not req.context:
            return await ollama_load(req.model, chat=False)
        stop = req.options.stop if req.options else None
        if req.raw or req.context:
            prompt = await text_prompt(req.prompt, req.limit, req.context)
        else:
            msgs = ([{"role": "system", "content": req.system}] if req.system else []) + \
                [{"role": "user", "content": req.prompt}]
            prompt = await chat_prompt(msgs, req.limit)
        job = make_job(prompt, sampling(OLLAMA_DEFAULTS, req.options), req.limit, stop, "generate")
        if req.stream:
            return ollama_stream(job, req.model, t_start, chat=False)
        res = await collect(request, job)
        return JSONResponse({"model": req.model, "created_at": _now_rfc3339(), "response": res.text, "done": True,
                             "done_reason": res.finish, "context": job.prompt.tokens + res.tokens,
                             **ollama_timings(res, t_start)}, headers=headers(job))

    return app


def _num(v: str) -> Any:
    try:
        return int(v)
    except ValueError:
        try:
            return float(v)
        except ValueError:
            return v


def _sse(obj: dict) -> bytes:
    return f"data: {json.dumps(obj, ensure_ascii=False)}\n\n".encode()

