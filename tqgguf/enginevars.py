"""Warnings about environment variables tqgguf does not use as the user meant them.

Two kinds, both printed once per process to stderr (never an error: the run goes on):

- **Engine variables tqgguf overrides.** tqgguf sets ``LLAMA_ATTN_ROT_DISABLE``,
  ``LLAMA_K_CENTER`` and ``LLAMA_KV_PLAN`` for the engine from its own settings
  (``--rot/--no-rot`` / ``TQGGUF_ATTN_ROTATION``, ``--k-center`` / ``TQGGUF_K_CENTER``,
  ``--kv-boundary/--kv-swa/--kv-plan``). A value the user set
  for llama.cpp's own tools would otherwise be replaced without a word; the warning says
  which value wins, why, and how to get the other one.
- **Unknown ``TQGGUF_*`` variables** (likely typos, e.g. ``TQGGUF_KV_CACHE_TYP``), and
  ``OLLAMA_*`` ones close to a variable tqgguf reads that Ollama does not read either
  (``OLLAMA_KV_CACHE_TYP``), with the closest declared name (tqgguf.variables.unknown_variables). ``tqgguf env`` lists them too; every other verb warns through
  :func:`warn_unknown_variables`, which the CLI group calls before any verb runs.
"""
from __future__ import annotations

import os
import sys
from typing import Callable, Mapping

#: engine variable -> (what tqgguf calls the setting, how the user sets it in tqgguf)
OVERRIDDEN: dict[str, tuple[str, str]] = {
    "LLAMA_ATTN_ROT_DISABLE": ("rotation", "--rot/--no-rot or TQGGUF_ATTN_ROTATION=on|off"),
    "LLAMA_K_CENTER": ("K centering", "--k-center MODE or TQGGUF_K_CENTER=MODE"),
    "LLAMA_KV_PLAN": ("layer plan", "--kv-boundary/--kv-swa/--kv-plan or TQGGUF_KV_BOUNDARY/_SWA/_PLAN"),
}

_warned: set[str] = set()


def _emit(msg: str, echo: Callable[[str], None] | None) -> None:
    if msg in _warned:
        return
    _warned.add(msg)
    (echo or (lambda m: print(m, file=sys.stderr)))(msg)


def _same(var: str, user: str, value: str) -> bool:
    """True when the user's text means what tqgguf sets (booleans compared as booleans)."""
    if user.strip() == value:
        return True
    if var == "LLAMA_ATTN_ROT_DISABLE":
        from .values import parse_bool

        try:
            return parse_bool(user) == parse_bool(value)
        except ValueError:
            return False
    return False


def override_messages(wanted: Mapping[str, str], meaning: Mapping[str, str],
                      environ: Mapping[str, str] | None = None) -> list[str]:
    """One warning per engine variable the user set that tqgguf replaces.

    Args:
        wanted: engine variable -> the value tqgguf sets (``{"LLAMA_ATTN_ROT_DISABLE": "0"}``).
        meaning: engine variable -> tqgguf's setting in words (``"on"``, ``"bias"``).
        environ: the user's environment (default ``os.environ``).
    Returns:
        Messages naming the user's value, the value that wins (tqgguf's) and why, and how
        to ask tqgguf for what the user wanted; [] when nothing is overridden. A user value
        that means what tqgguf sets (same text, or the same boolean) is not reported.
    """
    environ = os.environ if environ is None else environ
    out = []
    for var, value in wanted.items():
        user = environ.get(var)
        if user is None or user.strip() == "" or _same(var, user, value):
            continue
        what, how = OVERRIDDEN.get(var, (var, "tqgguf's own setting"))
        out.append(f"warning: {var}={user!r} from your environment is overridden: tqgguf sets {var}={value} "
                   f"for the engine from its own {what} setting ({meaning.get(var, value)}), which wins; "
                   f"to change the {what}, use {how}")
    return out


def warn_overrides(wanted: Mapping[str, str], meaning: Mapping[str, str], *,
                   environ: Mapping[str, str] | None = None, echo: Callable[[str], None] | None = None) -> list[str]:
    """Print :func:`override_messages` (each once per process) and return them."""
    msgs = override_messages(wanted, meaning, environ)
    for m in msgs:
        _emit(m, echo)
    return msgs


def unknown_variable_messages(environ: Mapping[str, str] | None = None) -> list[str]:
    """One warning per set variable that tqgguf does not read (tqgguf.variables.unknown_variables:
    ``TQGGUF_*``, near-miss ``OLLAMA_*``), with the closest declared name when there is one
    (``TQGGUF_KV_CACHE_TYP`` -> ``TQGGUF_KV_CACHE_TYPE``, ``OLLAMA_KV_CACHE_TYP`` -> ``OLLAMA_KV_CACHE_TYPE``)."""
    from .variables import closest_variable, unknown_variables

    out = []
    for name in unknown_variables(environ):
        near = closest_variable(name)
        hint = f"; did you mean {near}?" if near else "; `tqgguf env` lists the variables it reads"
        out.append(f"warning: {name} is set but tqgguf does not read it (typo?){hint}")
    return out


def warn_unknown_variables(environ: Mapping[str, str] | None = None, *,
                           echo: Callable[[str], None] | None = None) -> list[str]:
    """Print :func:`unknown_variable_messages` (each once per process) and return them."""
    msgs = unknown_variable_messages(environ)
    for m in msgs:
        _emit(m, echo)
    return msgs
