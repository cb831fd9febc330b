"""llama-server's own routes through the front, and the other APIs it serves, passed through
to the model's child as they are (:func:`~.proxy.forward`; streamed when the body says
``"stream": true``; the model chosen by the body's ``model``, else the default model, as on
the OpenAI routes; for a GET by ``?model=``):

- generation and prompts, on the model's chat child: ``/v1/responses`` (OpenAI's Responses
  API; validated, ``text.format`` and tools applied: ``openai_api.prepare_responses``), ``/v1/messages`` and ``/v1/messages/count_tokens`` (Anthropic's Messages API),
  ``/v1/responses/input_tokens``, ``/v1/chat/completions/input_tokens``, ``/completion``
  and ``/completions`` (llama-server's native completion), ``/infill`` (fill-in-the-middle,
  for models with FIM tokens, others a 400; a body llama-server would answer with a 500 is a 400
  here: :func:`check_infill`), ``/tokenize``, ``/detokenize``, ``/apply-template``;
  ``GET /props``, ``GET /slots``;
- embeddings and reranking, on its embeddings child: ``/embedding``, ``/embeddings``, and
  ``/rerank``, ``/reranking``, ``/v1/rerank``, ``/v1/reranking`` for a reranking model (GGUF
  pooling type ``rank``; any other model gets a 400 saying so).

Not passed: ``POST /props`` and ``POST /slots/{id}`` (they change the shared child: llama-server
refuses them unless started with ``--props`` / ``--slot-save-path``, which serve does not
pass), ``/lora-adapters``, ``/v1/audio/transcriptions``, and llama-server's web UI, tools
and MCP routes.
"""
from __future__ import annotations

import json
from typing import Callable

from fastapi import APIRouter, Request
from fastapi.responses import Response

from . import proxy
from .dependencies import manager_of
from .ollama import RequestError
from .errors import json_object
from .modelfile import POOLING_RANK
from .openai_api import ResponsesRequest, prepare_responses, validate

router = APIRouter()

#: POST routes passed through, and the kind of child that serves each.
POST_ROUTES: dict[str, str] = {
    **dict.fromkeys(("/v1/responses", "/responses", "/v1/messages", "/v1/messages/count_tokens",
                     "/v1/responses/input_tokens", "/responses/input_tokens", "/v1/chat/completions/input_tokens",
                     "/chat/completions/input_tokens", "/completion", "/completions", "/infill", "/tokenize",
                     "/detokenize", "/apply-template"), "chat"),
    **dict.fromkeys(("/embedding", "/embeddings"), "embed"),
    **dict.fromkeys(("/rerank", "/reranking", "/v1/rerank", "/v1/reranking"), "rerank"),
}
#: OpenAI's Responses API (``openai_api.prepare_responses``).
RESPONSES = ("/v1/responses", "/responses")
#: GET routes passed through (to the chat child).
GET_ROUTES = ("/props", "/slots")


def check_infill(body: dict) -> None:
    """Refuse an ``/infill`` body llama-server mishandles, with a 400 naming the field
    (RequestError): ``input_prefix`` or ``input_suffix`` missing or not a string (llama-server:
    a 500 carrying its JSON library's exception), ``prompt`` not a string (llama-server builds
    that error but answers 200, generating as if there were no prompt). The rest (``input_extra``,
    a model without FIM tokens: its 501 becomes a 400, ``errors.upstream_error``) llama-server
    answers well itself."""
    for key, what in (("input_prefix", "the code before the cursor"), ("input_suffix", "the code after it")):
        if not isinstance(body.get(key), str):
            why = "is required" if key not in body else "must be a string"
            raise RequestError(400, f"{key} {why}: {what} (a string, empty allowed)", param=key)
    if "prompt" in body and not isinstance(body["prompt"], str):
        raise RequestError(400, "prompt must be a string: text after the FIM middle token, where the answer "
                                "starts", param="prompt")


#: Checks of a passed-through route's body, before it reaches llama-server (RequestError: a 400).
BODY_CHECKS: dict[str, Callable[[dict], None]] = {"/infill": check_infill}


async def passthrough(request: Request) -> Response:
    path = request.url.path
    kind = POST_ROUTES[path]
    raw, body = await json_object(request)
    if (check := BODY_CHECKS.get(path)) is not None:
        check(body)
    manager = manager_of(request)
    rewrite = None
    if path in RESPONSES:  # OpenAI's Responses API: validated as OpenAI does, text.format and tools applied
        req = validate(ResponsesRequest, body)
        model = manager.find(req.model)
        body, rewrite = prepare_responses(body, req, model.name, model.chat_template())
        raw = json.dumps(body).encode()
    if kind == "rerank":
        model = manager.find(body.get("model") if isinstance(body.get("model"), str) else None)
        if model.pooling_type() != POOLING_RANK:
            raise RequestError(400, f"{model.name} is not a reranking model: rerank needs a GGUF whose pooling type "
                                    "is rank (a reranker such as bge-reranker); this one's is "
                                    f"{model.pooling_name()}", param="model")
        kind = "embed"
    return await proxy.forward(request, manager, raw, body, path, kind, rewrite)


async def passthrough_get(request: Request) -> Response:
    query = dict(request.query_params)
    name = query.pop("model", None)
    return await proxy.forward_get(manager_of(request), name, request.url.path, query)


for _path in POST_ROUTES:
    router.add_route(_path, passthrough, methods=["POST"])
for _path in GET_ROUTES:
    router.add_route(_path, passthrough_get, methods=["GET"])
