"""llama-server's own routes through the front, and the other APIs it serves, passed through
to the model's child as they are (:func:`~.proxy.forward`; streamed when the body says
``"stream": true``; the model chosen by the body's ``model``, else the default model, as on
the OpenAI routes; for a GET by ``?model=``):

- generation and prompts, on the model's chat child: ``/v1/responses`` (OpenAI's Responses
  API), ``/v1/messages`` and ``/v1/messages/count_tokens`` (Anthropic's Messages API),
  ``/v1/responses/input_tokens``, ``/v1/chat/completions/input_tokens``, ``/completion``
  and ``/completions`` (llama-server's native completion), ``/infill`` (fill-in-the-middle,
  for models with FIM tokens), ``/tokenize``, ``/detokenize``, ``/apply-template``;
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

from fastapi import APIRouter, Request
from fastapi.responses import Response

from . import proxy
from .dependencies import manager_of
from .ollama import RequestError
from .errors import json_object
from .modelfile import POOLING_RANK

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
#: GET routes passed through (to the chat child).
GET_ROUTES = ("/props", "/slots")


async def passthrough(request: Request) -> Response:
    path = request.url.path
    kind = POST_ROUTES[path]
    raw, body = await json_object(request)
    manager = manager_of(request)
    if kind == "rerank":
        model = manager.find(body.get("model") if isinstance(body.get("model"), str) else None)
        if model.pooling_type() != POOLING_RANK:
            raise RequestError(400, f"{model.name} is not a reranking model: rerank needs a GGUF whose pooling type "
                                    "is rank (a reranker such as bge-reranker); this one's is "
                                    f"{model.pooling_name()}", param="model")
        kind = "embed"
    return await proxy.forward(request, manager, raw, body, path, kind)


async def passthrough_get(request: Request) -> Response:
    query = dict(request.query_params)
    name = query.pop("model", None)
    return await proxy.forward_get(manager_of(request), name, request.url.path, query)


for _path in POST_ROUTES:
    router.add_route(_path, passthrough, methods=["POST"])
for _path in GET_ROUTES:
    router.add_route(_path, passthrough_get, methods=["GET"])
