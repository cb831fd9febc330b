"""The OpenAI API of ``tqgguf serve``: ``POST /v1/chat/completions``, ``/v1/completions``,
``/v1/embeddings`` passed through to the model's llama-server (:func:`~.proxy.forward`), and
``GET /v1/models`` (every model that can be served), ``/v1/models/{id}``.

The request is validated as OpenAI validates it and its tools checked against the model's
template (``openai_api``: 400s in OpenAI's shape); the body then goes to llama-server as sent
(but for ``tool_choice``'s object form) and its answer (streamed or not, errors included)
comes back as it is, so ``response_format``/json_schema, logprobs and ``n`` behave as
llama-server has them. The ``model`` field picks the model (absent: the one ``serve`` was
started with). The rewrites of the answer: ``/v1/completions`` logprobs, which llama-server
gives in the chat shape, come back in OpenAI's legacy completions shape
(:class:`LegacyLogprobs`); a ``suffix`` goes to llama-server's ``/infill`` and its answer comes
back as a legacy completion (``openai_api.InfillAnswer``; ``echo`` is a 400); plain-JSON tool calls become ``tool_calls`` and a character cut by
``max_tokens`` is dropped (``openai_api.ChatAnswer``). Images in chat messages (``image_url``
parts) are refused with a 400 naming ``--mmproj`` for a model served without a projector
(llama-server answers 500), and two adjacent ones get a separating text part
(``media.IMAGE_SEPARATOR``, which says why).

The pass-through routes are plain Starlette routes: FastAPI's endpoint layer (parameter
analysis, dependency solving, response serialisation) does nothing for them but costs CPU
on every request, and a burst of requests pays it one after another.
"""
from __future__ import annotations

import asyncio
import json
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from . import media, proxy
from .dependencies import ManagerDep, manager_of
from .errors import json_object
from .modelfile import ModelFile
from .ollama import RequestError
from .openai_api import (ChatAnswer, ChatRequest, CompletionRequest, EmbeddingRequest, InfillAnswer, answer_json,
                         check_n, drop_cut_character, infill_body, prepare_chat, validate)

router = APIRouter()


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

    streams = True

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
        j = answer_json(data)
        if j is None:
            return data
        for ch in j["choices"]:
            if isinstance(ch, dict):
                self.convert(ch)
                if isinstance(ch.get("text"), str):
                    ch["text"] = drop_cut_character(ch["text"], ch.get("finish_reason"))
        return json.dumps(j, ensure_ascii=False).encode()

    def sse_line(self, line: bytes) -> bytes:
        """One SSE line converted (``data: {...}`` with choices); any other line unchanged."""
        if not line.startswith(b"data:"):
            return line
        payload = line[5:].strip()
        if not payload.startswith(b"{"):
            return line
        converted = self.body(payload)
        return line if converted is payload else b"data: " + converted + b"\n"


async def chat_completions(request: Request) -> Response:
    raw, body = await json_object(request)
    req = validate(ChatRequest, body)
    manager = manager_of(request)
    model = manager.find(req.model)
    new, answer = prepare_chat(body, req, model.name, model.chat_template(), manager.settings.num_parallel)
    if new is not None:
        raw, body = json.dumps(new).encode(), new
    if media.openai_media(body):
        if not manager.vision(model):  # llama-server answers a 500 for it
            raise media.no_projector(model.name)
        if media.separate_media(body):  # adjacent images: see media.IMAGE_SEPARATOR
            raw = json.dumps(body).encode()
    return await proxy.forward(request, manager, raw, body, "/v1/chat/completions", "chat", answer)


async def completions(request: Request) -> Response:
    raw, body = await json_object(request)
    req = validate(CompletionRequest, body)
    if req.echo:  # llama-server answers without the prompt and its logprobs; OpenAI's echo needs both
        raise RequestError(400, "Invalid 'echo': true is not supported (llama-server returns the completion only, "
                                "without the prompt's text or logprobs); send echo false and prepend the prompt "
                                "yourself", param="echo", code="invalid_value")
    manager = manager_of(request)
    if req.suffix:  # fill-in-the-middle, through llama-server's /infill (a model without FIM tokens: a 400)
        new = infill_body(body, req)
        return await proxy.forward(request, manager, json.dumps(new).encode(), new, "/infill", "chat",
                                   InfillAnswer(req.model))
    check_n(req.n, manager.settings.num_parallel)
    # legacy completions with logprobs: llama-server answers in the chat shape; convert it
    rewrite = LegacyLogprobs(body.get("prompt")) if body.get("logprobs") not in (None, False) else ChatAnswer()
    return await proxy.forward(request, manager, raw, body, "/v1/completions", "chat", rewrite)


async def embeddings(request: Request) -> Response:
    raw, body = await json_object(request)
    validate(EmbeddingRequest, body)
    return await proxy.forward(request, manager_of(request), raw, body, "/v1/embeddings", "embed")


router.add_route("/v1/chat/completions", chat_completions, methods=["POST"])
router.add_route("/chat/completions", chat_completions, methods=["POST"])  # llama-server's alias
router.add_route("/v1/completions", completions, methods=["POST"])
router.add_route("/v1/embeddings", embeddings, methods=["POST"])


def _openai_model(m: ModelFile) -> dict:
    return {"id": m.name, "object": "model", "created": int(m.path.stat().st_mtime), "owned_by": "tqgguf"}


@router.get("/v1/models")
async def list_models(manager: ManagerDep):
    """Every model this server can serve (as ``/api/tags`` lists them), loaded or not."""
    return {"object": "list", "data": await asyncio.to_thread(lambda: [_openai_model(m) for m in manager.available()])}


@router.get("/v1/models/{model_id:path}")
async def get_model(model_id: str, manager: ManagerDep):
    return _openai_model(manager.find(model_id))
