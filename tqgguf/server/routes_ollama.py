"""The Ollama API of ``tqgguf serve``, translated to and from llama-server's (field by
field in ``ollama``): ``POST /api/chat``, ``/api/generate``, ``/api/embed``,
``/api/embeddings``, ``/api/show``; ``GET /api/tags``, ``/api/ps``, ``/api/version``; ``GET``
and ``HEAD /`` (and ``HEAD /api/tags``, ``/api/version``) as Ollama answers them. Errors are
``{"error": "message"}`` (``errors``); streams are NDJSON, one object per line, the last
with ``done: true``, ``done_reason`` and Ollama's timing fields.

Each generation route holds the model for its request (``Manager.use``: load on demand,
``num_ctx`` and load-option reloads, the request's ``keep_alive``) and calls llama-server
through ``proxy``: ``/v1/chat/completions`` for chat (tools, ``format``, thinking),
``/apply-template`` + ``/tokenize`` + ``/completion`` for generate (``raw``, ``context``),
``/tokenize`` + ``/v1/embeddings`` for the embedding routes.
Images (``images``; the model needs ``--mmproj``) are translated by ``media``: content parts
on chat, a ``/completion`` prompt object with the images on generate.
"""
from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import re
import time
from pathlib import Path
from typing import Any, AsyncIterator

import aiohttp
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response

from . import media
from . import ollama as ol
from . import proxy
from .child import MEDIA_MARKER
from .dependencies import ManagerDep
from .errors import json_body
from .manager import Manager
from .ollama import RequestError
from .modelfile import ModelFile
from .openai_api import drop_cut_character
from .runner import Runner

router = APIRouter()
log = logging.getLogger("tqgguf.server")


@router.get("/", response_class=PlainTextResponse)
async def root():
    return "Ollama is running"

@router.head("/")
async def root_head():
    return Response(status_code=200)

@router.get("/api/version")
async def version():
    return {"version": ol.OLLAMA_API_VERSION}

@router.head("/api/version")
async def version_head():
    return Response(status_code=200)

def _tag_entry(m: ModelFile) -> dict:
    mtime = m.ollama.modified if m.ollama is not None else m.path.stat().st_mtime
    return {"name": m.tag, "model": m.tag,
            "modified_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(mtime)),
            "size": m.size(), "digest": m.digest, "details": m.details()}

@router.get("/api/tags")
async def tags(manager: ManagerDep):
    return {"models": await asyncio.to_thread(lambda: [_tag_entry(m) for m in manager.available()])}

@router.head("/api/tags")
async def tags_head():
    return Response(status_code=200)

@router.get("/api/ps")
async def ps(manager: ManagerDep):
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

@router.post("/api/show")
async def show(request: Request, manager: ManagerDep):
    body = ol.require_object(await json_body(request))
    m = manager.find(ol.model_name(body))
    md = await asyncio.to_thread(m.metadata)
    template = m.chat_template()
    caps = ["completion"] + (["tools"] if ol.supports_tools(template) else []) + \
        (["thinking"] if ol.supports_thinking(template) else []) + (["embedding"] if m.has_pooling() else []) + \
        (["vision"] if manager.vision(m) else [])  # Ollama's name; clients check it before sending images
    info = {k: v for k, v in md.items() if not k.startswith("tokenizer.chat_template")}
    out = {"license": str(md.get("general.license", "")), "modelfile": f"FROM {m.path}\n", "parameters": "",
           "template": template, "details": m.details(), "model_info": info, "capabilities": caps,
           "modified_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(m.path.stat().st_mtime))}
    if m.ollama is not None:  # as Ollama shows it: its Go template, parameters, system prompt, licenses
        params = "\n".join(f"{k:<15}{json.dumps(x) if isinstance(x, str) else json.dumps(x)}"
                           for k, v in m.params().items() for x in (v if isinstance(v, list) else [v]))
        out.update(template=m.ollama.template, parameters=params, license="\n".join(m.ollama.license),
                   modelfile=f"FROM {m.path}\n" + "".join(f"PARAMETER {line}\n" for line in params.splitlines()),
                   modified_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(m.ollama.modified)))
        if m.system():
            out["system"] = m.system()
    return out

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

async def load_or_unload(manager: Manager, name: str, ka: float | None, body: dict, shape: str) -> dict:
    m = manager.find(name)
    _, load = request_options(body, m, manager)  # a load request's load-time options apply as a generation's would
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

def request_options(body: dict, model: ModelFile, manager: Manager) -> tuple[dict[str, Any], dict[str, Any]]:
    """``ollama.options`` with the model's own parameters (an Ollama model's params layer) as
    defaults under the request's; a ``num_ctx`` that only the parameters give is held to the
    largest context this server allows for the model (a request's own is checked, and refused
    above it, by the runner)."""
    defaults = ol.model_defaults(model.params())
    if "num_ctx" in defaults and isinstance(defaults["num_ctx"], int):
        defaults["num_ctx"] = min(defaults["num_ctx"], manager.max_context(model))
    return ol.options(body, defaults)


def _padded(r: Runner) -> str:
    return f"; num_ctx {r.n_ctx}, which llama.cpp pads to a multiple of 256" if r.slot_ctx != r.n_ctx else ""


_EXCEEDED = re.compile(r"\((\d+) tokens\) (?:exceeds the available context size|is larger than the max context size) "
                       r"\((\d+) tokens\)")


def exceeded_context(e: RequestError) -> tuple[int, int] | None:
    """(prompt tokens, the slot's context) when llama-server refused a prompt as longer than
    its context ("request (N tokens) exceeds the available context size (M tokens)"), else None."""
    m = _EXCEEDED.search(e.message) if e.status == 400 else None
    return (int(m.group(1)), int(m.group(2))) if m else None


async def prompt_tokens(r: Runner, payload: dict, messages: list[dict]) -> int:
    """Tokens of ``messages`` as llama-server's chat endpoint will prompt them, images
    included: its ``/v1/chat/completions/input_tokens`` (the GGUF's chat template with the
    request's tools and template switches, special tokens added and parsed, and each image as
    the tokens its projector makes of it, as the chat endpoint counts them; a template and
    ``/tokenize`` would count an image as its marker's few text tokens). RequestError when
    llama-server refuses the messages."""
    body = {"messages": messages, **{k: payload[k] for k in ("tools", "chat_template_kwargs") if k in payload}}
    return int((await proxy.call_ok(r, "/v1/chat/completions/input_tokens", body))["input_tokens"])


def _images(msgs: list[dict]) -> int:
    """Media parts (:data:`~.media.MEDIA_PARTS`: images) in OpenAI-form messages."""
    return sum(1 for m in msgs if isinstance(m.get("content"), list)
               for p in m["content"] if isinstance(p, dict) and p.get("type") in media.MEDIA_PARTS)


async def fit_messages(count, msgs: list[dict], over: tuple[int, int], name: str) -> tuple[list[dict], str]:
    """The messages of a chat whose prompt is longer than the context, cut as Ollama cuts them
    (``chatPrompt`` in Ollama's server/prompt.go, ``truncateNativeChatMessages`` in
    server/routes.go): the oldest messages are dropped, the system messages among them kept,
    until the prompt fits; the latest message always stays. Ollama tries each start in turn
    from the oldest; here the first start that fits is found by bisection (a later start never
    makes the prompt longer), a few template-and-tokenize calls for any length of history.
    Logged with how many messages, tokens and images went; returns (messages, a note for the
    ``X-Tqgguf-Truncated`` header). RequestError (400) when the latest message alone does not
    fit (Ollama then passes it on and llama-server refuses it the same way).

    Args:
        count: ``await count(messages)`` -> the prompt's tokens, images included (:func:`prompt_tokens`).
        msgs: the request's messages (OpenAI form); over: (prompt tokens, context) from
            :func:`exceeded_context`; name: the model, for the log.
    """
    n_prompt, n_ctx = over

    def start_at(i: int) -> list[dict]:
        return [m for m in msgs[:i] if m["role"] == "system"] + msgs[i:]

    last = len(msgs) - 1
    lo, hi = min(1, last), last  # msgs[0:] does not fit; find the smallest start whose prompt fits
    kept_tokens = None
    while lo < hi:
        mid = (lo + hi) // 2
        n = await count(start_at(mid))
        if n < n_ctx:
            hi, kept_tokens = mid, n
        else:
            lo = mid + 1
    if kept_tokens is None:
        kept_tokens = await count(start_at(lo))
    if kept_tokens >= n_ctx:
        raise RequestError(400, f"the latest message alone makes a prompt of {kept_tokens} tokens (with the system "
                                f"messages and the chat template), which does not fit the context of {n_ctx} tokens "
                                f"(num_ctx, as llama.cpp pads it); shorten it or raise num_ctx (the maximum: --max-ctx)")
    kept = start_at(lo)
    dropped = len(msgs) - len(kept)
    n_images, kept_images = _images(msgs), _images(kept)
    images = f"; images: {n_images - kept_images} dropped, {kept_images} kept" if n_images else ""
    note = f"{dropped} of {len(msgs)} messages, {n_prompt - kept_tokens} of {n_prompt} tokens" + \
        (f", {n_images - kept_images} of {n_images} images" if n_images else "") + " dropped"
    log.warning("%s: the chat prompt (%d tokens, %d messages) is longer than the context (%d tokens): dropped the "
                "%d oldest non-system message(s), %d tokens, as Ollama truncates; kept %d message(s), %d tokens%s",
                name, n_prompt, len(msgs), n_ctx, dropped, n_prompt - kept_tokens, len(kept), kept_tokens, images)
    return kept, note


@router.post("/api/chat")
async def api_chat(request: Request, manager: ManagerDep):
    t0 = time.monotonic()
    body = ol.require_object(await json_body(request))
    name = ol.model_name(body)
    ka = ol.keep_alive(body)
    if not body.get("messages"):
        if "messages" in body and not isinstance(body["messages"], list):
            raise RequestError(400, "messages must be a list of {role, content} objects")
        return await load_or_unload(manager, name, ka, body, "chat")
    messages = ol.chat_messages(body["messages"])
    model = manager.find(name)
    sampling, load = request_options(body, model, manager)
    if model.system() and not any(m["role"] == "system" for m in messages):
        messages.insert(0, {"role": "system", "content": model.system()})  # the model's SYSTEM, as Ollama adds it
    truncate, shift = ol.flag(body, "truncate", True), ol.flag(body, "shift", True)
    media.attach_images(messages, manager.vision(model), name)
    payload: dict[str, Any] = {"messages": messages, **sampling}
    payload.update(ol.think_fields(body, name, model.chat_template()))
    payload.update(ol.logprob_fields(body, chat=True))
    tool_names: set[str] = set()
    if (t := ol.tools(body)):
        if not ol.supports_tools(model.chat_template()):
            raise RequestError(400, ol.no_tools(name))
        payload["tools"] = t
        tool_names = {x["function"].get("name") for x in t}
    if (schema := ol.format_schema(body.get("format"))) is not None:
        payload["response_format"] = {"type": "json_schema", "json_schema": {"name": "format", "schema": schema}}
    stream = ol.flag(body, "stream", True)
    payload["stream"] = stream
    stack = contextlib.AsyncExitStack()
    r, reloaded = await stack.enter_async_context(manager.use(name, num_ctx=load.pop("num_ctx", None),
                                                              load=load, keep_alive=ka))
    headers = {"X-Tqgguf-Reloaded": r.reload_reason} if reloaded else {}
    load_s = r.loaded_since(t0)
    ol.bound_predict(payload, r.n_ctx)

    async def send() -> Any:
        if not stream:
            return await proxy.until_disconnect(request, proxy.call_ok(r, "/v1/chat/completions", payload))
        return await proxy.open_stream(r, "/v1/chat/completions", payload=payload)

    wanted = payload["n_predict"]

    async def no_shift() -> None:  # shift: false: stop at the end of the context instead of shifting it
        if not shift:
            n_prompt = await prompt_tokens(r, payload, payload["messages"])
            payload["n_predict"] = max(1, min(wanted, r.slot_ctx - 1 - n_prompt))

    try:
        await no_shift()
        try:
            result = await send()
        except RequestError as e:
            over = exceeded_context(e)
            if over is None or not truncate:
                raise
            payload["messages"], note = await fit_messages(lambda m: prompt_tokens(r, payload, m),
                                                           payload["messages"], over, name)
            headers["X-Tqgguf-Truncated"] = note
            await no_shift()
            result = await send()
        if not stream:
            data = result
            ch = (data.get("choices") or [{}])[0]
            msg = ch.get("message") or {}
            out_msg: dict[str, Any] = {"role": "assistant",
                                       "content": drop_cut_character(msg.get("content") or "", ch.get("finish_reason"))}
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
        resp = result
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
                    ev = proxy.sse_data(raw_line.decode("utf-8", errors="replace"))
                    if ev is None:
                        continue
                    if "error" in ev:
                        yield (json.dumps({"error": proxy.upstream_message(json.dumps(ev).encode())}) + "\n").encode()
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
                yield (json.dumps({"error": proxy.gone_message(r)}) + "\n").encode()
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

    return proxy.Stream(ndjson(), done, media_type="application/x-ndjson", headers=headers)

@router.post("/api/generate")
async def api_generate(request: Request, manager: ManagerDep):
    t0 = time.monotonic()
    body = ol.require_object(await json_body(request))
    name = ol.model_name(body)
    ka = ol.keep_alive(body)
    prompt = body.get("prompt")
    if prompt is None or (prompt == "" and not body.get("context")):
        return await load_or_unload(manager, name, ka, body, "generate")
    if not isinstance(prompt, str):
        raise RequestError(400, "prompt must be a string")
    if body.get("template"):
        raise RequestError(400, "template: custom Go templates are not supported; the model's own chat template is "
                                "used (or send raw: true with a formatted prompt)")
    suffix = body.get("suffix")
    if suffix is not None and not isinstance(suffix, str):
        raise RequestError(400, "suffix must be a string: the text after the insertion point (fill-in-the-middle)")
    fim = bool(suffix)  # fill-in-the-middle: llama-server's /infill puts the model's FIM tokens around both
    context = body.get("context") or []
    if not isinstance(context, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in context):
        raise RequestError(400, "context must be the list of token ids a previous /api/generate returned")
    raw = ol.flag(body, "raw", False)
    model = manager.find(name)
    sampling, load = request_options(body, model, manager)
    truncate, shift = ol.flag(body, "truncate", True), ol.flag(body, "shift", True)
    if body.get("images") and not manager.vision(model):
        raise media.no_projector(name)
    imgs = media.images(body.get("images"), "images")
    if imgs and context:
        raise RequestError(400, "context cannot be combined with images: an image's embeddings are not tokens that "
                                "a context can carry; send the conversation to /api/chat with its images instead")
    if fim and (imgs or body.get("context")):
        raise RequestError(400, "suffix (fill-in-the-middle) cannot be combined with images or context: the "
                                "prompt and the suffix are the whole input")
    think = ol.think_fields(body, name, model.chat_template()) if not raw and not fim else {}
    # /completion gives the raw text, tags included: split it here (llama-server parses
    # reasoning on its chat endpoint only)
    splits = think.get("reasoning_format") == "deepseek"
    stream = ol.flag(body, "stream", True)
    stack = contextlib.AsyncExitStack()
    r, reloaded = await stack.enter_async_context(manager.use(name, num_ctx=load.pop("num_ctx", None),
                                                              load=load, keep_alive=ka))
    headers = {"X-Tqgguf-Reloaded": r.reload_reason} if reloaded else {}
    load_s = r.loaded_since(t0)
    try:
        n_ctx = r.slot_ctx
        if fim:  # the prompt is the code before the insertion point, as sent (no template, no system)
            text, full, endpoint, source = prompt, [], "/infill", {"input_prefix": prompt, "input_suffix": suffix}
        else:
            endpoint = "/completion"
            if raw:  # the images go before the prompt, one media marker each
                text = media.IMAGE_SEPARATOR.join([MEDIA_MARKER] * len(imgs)) + prompt
            else:
                system = body["system"] if isinstance(body.get("system"), str) else model.system()
                msgs = [{"role": "system", "content": system}] if system else []
                msgs.append({"role": "user", "content": media.content_parts(prompt, imgs) if imgs else prompt})
                kwargs = {k: v for k, v in think.items() if k == "chat_template_kwargs"}
                # with image parts, llama-server's template writes a media marker where each image goes
                text = (await proxy.call_ok(r, "/apply-template", {"messages": msgs, **kwargs}))["prompt"]
            if imgs:  # a prompt object: its text and the images its markers stand for (no token ids, no context)
                full = []
                prompt_field: Any = {"prompt_string": text, "multimodal_data": imgs}
            else:
                toks = (await proxy.call_ok(r, "/tokenize", {"content": text, "add_special": not context,
                                                             "parse_special": True}))["tokens"]
                full = list(context) + list(toks)
                if truncate and len(full) > n_ctx - 1:
                    cut, keep = ol.truncate_tokens(full, n_ctx, int(sampling.get("n_keep", 4)), model.adds_bos())
                    log.warning("%s: the prompt (%d tokens) is longer than the context (%d tokens%s): truncated to "
                                "%d tokens as Ollama does, keeping the first %d (num_keep%s) and the latest %d; %d tokens "
                                "dropped", name, len(full), n_ctx, _padded(r), len(cut), keep,
                                " + BOS" if model.adds_bos() else "", len(cut) - keep, len(full) - len(cut))
                    headers["X-Tqgguf-Truncated"] = f"{len(full) - len(cut)} of {len(full)} tokens dropped"
                    full = cut
                prompt_field = full
            source = {"prompt": prompt_field}
        payload: dict[str, Any] = {**source, "stream": stream, "return_tokens": True, "cache_prompt": True,
                                   **sampling, **ol.logprob_fields(body, chat=False)}
        ol.bound_predict(payload, r.n_ctx)
        if not shift:  # stop at the end of the context instead of shifting it
            payload["n_predict"] = max(1, min(payload["n_predict"], n_ctx - 1 - len(full)))
        if (schema := ol.format_schema(body.get("format"))) is not None:
            payload["json_schema"] = schema
        if not stream:
            data = await proxy.until_disconnect(request, proxy.call_ok(r, endpoint, payload))
            answer = drop_cut_character(data.get("content", ""), "length" if data.get("stop_type") == "limit" else None)
            res: dict[str, Any] = {"model": name, "created_at": ol.now_rfc3339()}
            if splits:
                thinking, answer = ol.split_thinking(answer, text)
                if thinking:
                    res["thinking"] = thinking
            res["response"] = answer
            return await finish(res, data.get("stop_type"), data.get("timings"),
                                ol.logprobs_from_native(data.get("completion_probabilities")), t0, load_s,
                                stack, headers, **({} if imgs or fim else {"context": full + list(data.get("tokens") or [])}))
        resp = await proxy.open_stream(r, endpoint, payload=payload)
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
                    ev = proxy.sse_data(raw_line.decode("utf-8", errors="replace"))
                    if ev is None:
                        continue
                    if "error" in ev:
                        yield (json.dumps({"error": proxy.upstream_message(json.dumps(ev).encode())}) + "\n").encode()
                        return
                    gen += list(ev.get("tokens") or [])
                    if ev.get("stop"):
                        if splitter is not None and any(held := splitter.finish()):
                            yield piece(*held)
                        final = {"model": name, "created_at": ol.now_rfc3339(), "response": "", "done": True,
                                 "done_reason": ol.done_reason(ev.get("stop_type")),
                                 **({} if imgs or fim else {"context": full + gen}),
                                 **ol.timings(ev.get("timings"), time.monotonic() - t0, load_s)}
                        yield (json.dumps(final) + "\n").encode()
                        return
                    thinking, response = "", ev.get("content", "")
                    if splitter is not None:
                        thinking, response = splitter.feed(response)
                    yield piece(thinking, response, ol.logprobs_from_native(ev.get("completion_probabilities")))
            except aiohttp.ClientError:
                yield (json.dumps({"error": proxy.gone_message(r)}) + "\n").encode()
        finally:
            await done()

    return proxy.Stream(ndjson(), done, media_type="application/x-ndjson", headers=headers)

async def embed_inputs(r: Runner, inputs: list[str], truncate: bool) -> tuple[list[list[int]], int]:
    seqs, total = [], 0
    for i, text in enumerate(inputs):
        toks = (await proxy.call_ok(r, "/tokenize", {"content": text, "add_special": True,
                                                     "parse_special": False}))["tokens"]
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

@router.post("/api/embed")
async def api_embed(request: Request, manager: ManagerDep):
    t0 = time.monotonic()
    body = ol.require_object(await json_body(request))
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
        data = await proxy.call_ok(r, "/v1/embeddings", {"input": seqs})
        vecs = [_resize(d["embedding"], dims) for d in sorted(data["data"], key=lambda d: d["index"])]
        return {"model": name, "embeddings": vecs, "total_duration": int((time.monotonic() - t0) * 1e9),
                "load_duration": int(r.loaded_since(t0) * 1e9), "prompt_eval_count": n}

@router.post("/api/embeddings")
async def api_embeddings(request: Request, manager: ManagerDep):
    body = ol.require_object(await json_body(request))
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
        data = await proxy.call_ok(r, "/v1/embeddings", {"input": seqs})
        return {"embedding": data["data"][0]["embedding"]}
