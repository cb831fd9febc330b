"""What the routes share, as FastAPI dependencies: the :class:`~.manager.Manager` (which
models are loaded, and how to get a runner for a request), stored on ``app.state`` by
``create_app``. A route takes it as a parameter, ``manager: ManagerDep``; a plain
Starlette route (no dependency solving) calls :func:`manager_of` itself."""
from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from .manager import Manager


def manager_of(request: Request) -> Manager:
    return request.app.state.manager


async def get_manager(request: Request) -> Manager:
    # async: FastAPI runs a plain-def dependency in its thread pool, a thread hop per request
    return manager_of(request)


ManagerDep = Annotated[Manager, Depends(get_manager)]
