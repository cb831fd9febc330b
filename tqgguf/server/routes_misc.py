"""The routes outside both APIs: ``GET /health`` and ``GET /metrics``.

``/health``: 200 ``{"status": "ok"}`` while the default model's llama-server serves or is
unloaded by keep-alive; 503 with ``"loading"``, ``"restarting"`` or ``"error"`` and the
reason after a child died; ``runners`` lists every child with its state, and each runner's
``last_log_lines`` are the last lines of its child that died last.

``/metrics[?model=NAME]``: llama-server's Prometheus metrics of the model's child, passed through.
"""
from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from . import proxy
from .dependencies import ManagerDep

router = APIRouter()


@router.get("/health")
async def health(manager: ManagerDep):
    runners = [r.status() for r in manager.runners.values()]
    default = [r for r in manager.runners.values() if r.model is manager.default and r.kind == "chat"]
    state = default[0].state if default else "unloaded"
    status = {"ready": "ok", "unloaded": "ok", "stopped": "ok", "loading": "loading"}.get(state, state)
    body = {"status": status, "model": manager.default.name, "model_state": state, "runners": runners}
    if default and default[0].error:
        body["error"] = default[0].error
    return JSONResponse(body, status_code=200 if status == "ok" else 503)


@router.get("/metrics")
async def metrics(manager: ManagerDep, model: str | None = None):
    return await proxy.forward_get(manager, model, "/metrics")
