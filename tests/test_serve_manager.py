"""``tqgguf serve``'s model manager as a user meets it (issue 25, the reports after items 8-13):
a failed reload that leaves the model loadable again, ``use_mmap: false`` on this
llama-server, a model's Modelfile parameters on the OpenAI routes (no reload thrash between
the two APIs), a draft model llama-server cannot draft with refused at startup, requests
queued as in Ollama while every loaded model is busy, and a SIGTERM while requests wait
behind a pending reload.

Real ``tqgguf serve`` processes with real llama-server children, driven by the real
``ollama`` and ``openai`` clients. Two servers: SmolLM2-135M (a copy whose GGUF claims a training context of 2^24
tokens, so that a huge num_ctx reaches llama-server) with at most one loaded model
and a queue of one (``srv``), and ``smol:latest`` from an Ollama store whose parameters set
``num_ctx 128`` (``store_srv``, stopped by the SIGTERM test at the end).
"""
from __future__ import annotations

import subprocess
import threading
import time

import httpx
import pytest

from .test_serve_ollama import PARAMS, SMOL, make_ollama_store
from .test_server import ALIAS, GREEDY, Server, _child_argv, _clean_env, _free_port, _serve_cmd

ollama = pytest.importorskip("ollama")
openai = pytest.importorskip("openai")

NP = 4
CTX = 512
HUGE = 16_000_000  # num_ctx whose KV cache (x NP slots) no machine here can allocate: ~590 GB
OTHER = "gemma3-270m"  # another model, for the queue (max loaded models 1)


def _claims_a_longer_training_context(src, dst, n_ctx_train: int):
    """A copy of the GGUF ``src`` at ``dst`` whose ``{arch}.context_length`` says ``n_ctx_train``: serve and
    llama-server hold a slot to the training context (llama-server's n_ctx_slot), so only a model that claims a
    huge one lets a huge num_ctx reach llama-server's allocation."""
    import shutil

    from gguf import GGUFReader

    shutil.copyfile(src, dst)
    r = GGUFReader(dst, "r+")
    field = r.fields[f"{r.fields['general.architecture'].contents()}.context_length"]
    field.parts[field.data[0]][0] = n_ctx_train
    del r
    return dst


@pytest.fixture(scope="module")
def srv(require_engine, model_file, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("serve-manager")
    model = _claims_a_longer_training_context(model_file(ALIAS), tmp / "smollm2-long.gguf", 1 << 24)
    model_file(OTHER)
    env = _clean_env(OLLAMA_MAX_LOADED_MODELS="1", OLLAMA_MAX_QUEUE="1")
    s = Server(str(model), tmp, "--alias", ALIAS, "--ctk", "q8_0", "--ctv", "turbo4", "-np", str(NP),
               "-c", str(CTX), "--max-ctx", str(1 << 24), "--keep-alive", "-1", env=env)
    yield s
    s.stop()


def _gen(s: Server, **options) -> dict:
    return s.ol.generate(model=ALIAS, prompt="hi", options={**GREEDY, "num_predict": 2, **options})


# -- a failed reload, use_mmap ------------------------------------------------------------------------------------


def test_use_mmap_false_reloads_with_load_mode_none(srv):
    """This llama-server has no --no-mmap (it exited "invalid argument: --no-mmap", and the model
    stayed failed); Ollama's use_mmap false is its -lm none: the model read into memory."""
    assert _gen(srv, use_mmap=False).done
    a = _child_argv(srv)
    assert a[a.index("-lm") + 1] == "none" and "--no-mmap" not in a
    assert _gen(srv).done  # serve's setting (mmap) comes back
    assert "-lm" not in _child_argv(srv)


def test_a_reload_that_fails_is_a_400_and_the_next_request_loads_the_model_again(srv):
    with pytest.raises(ollama.ResponseError) as ei:
        _gen(srv, num_ctx=HUGE)
    assert ei.value.status_code == 400
    assert f"{ALIAS} could not be loaded with options.num_ctx {HUGE}: llama-server (exit 1)" in ei.value.error
    assert "failed to allocate" in ei.value.error and "leave the option out" in ei.value.error
    assert srv.health()[0] == 200  # not "failed" for good
    # the next request, on either API, loads it with serve's settings
    assert _gen(srv).done
    a = _child_argv(srv)
    assert a[a.index("-c") + 1] == str(CTX * NP)
    r = srv.oa.chat.completions.create(model=ALIAS, messages=[{"role": "user", "content": "hi"}], max_tokens=2)
    assert r.usage.completion_tokens == 2
    assert srv.health()[1]["model_state"] == "ready"
    assert "Traceback" not in srv.log()


# -- Ollama's queue -----------------------------------------------------------------------------------------------


def _wait_until(s: Server, cond, what: str, timeout: float = 60.0, show=lambda: None) -> None:
    """Poll ``cond()`` every 0.1 s until it holds; past ``timeout`` s fail with ``what``, ``show()``
    (the state worth seeing) and the end of ``s``'s log."""
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, (what, show(), s.log()[-3000:])
        time.sleep(0.1)


def _wait_for(s: Server, text: str, timeout: float = 60.0, seen: int = 0) -> None:
    """Wait until ``text`` is in ``s``'s log more than ``seen`` times: count the lines an earlier
    request logged too, else the wait ends at once on theirs."""
    _wait_until(s, lambda: s.log().count(text) > seen, text, timeout)


def test_a_request_for_another_model_waits_in_the_queue_while_the_loaded_one_is_busy(srv):
    """Max loaded models 1, queue 1: with SmolLM2 busy, a request for Gemma waits (it got an
    immediate 503 "loaded and busy ... retry later") and loads once SmolLM2 is idle; one more
    beyond the queue gets Ollama's 503 "server busy"."""
    stream = srv.oa.chat.completions.create(model=ALIAS, messages=[{"role": "user", "content": "Count to 1000."}],
                                            max_tokens=4000, stream=True, extra_body={"ignore_eos": True})
    chunks = iter(stream)
    next(chunks)  # generating: SmolLM2 is busy
    result: dict[str, object] = {}

    def other() -> None:
        try:
            result["answer"] = srv.ol.generate(model=OTHER, prompt="hi", raw=True, options={"num_predict": 2})
        except Exception as e:  # noqa: BLE001 - asserted below
            result["answer"] = e

    t = threading.Thread(target=other)
    t.start()
    _wait_for(srv, f"{OTHER} waits for room (queued: 1 of at most 1)")
    assert t.is_alive()
    with pytest.raises(ollama.ResponseError) as ei:
        srv.ol.generate(model=OTHER, prompt="hi", raw=True, options={"num_predict": 2})
    assert ei.value.status_code == 503
    assert "server busy, please try again.  maximum pending requests exceeded" in ei.value.error
    assert "OLLAMA_MAX_QUEUE = 1" in ei.value.error
    next(chunks)
    assert t.is_alive()  # still queued while the stream runs
    stream.close()  # SmolLM2 goes idle: unloaded for Gemma, which loads and answers
    t.join(120)
    assert isinstance(result.get("answer"), ollama.GenerateResponse), result
    assert result["answer"].done
    assert f"unloading {ALIAS} to make room for {OTHER} (max loaded models: 1)" in srv.log()
    assert [m.model for m in srv.ol.ps().models] == [f"{OTHER}:latest"]


# -- a draft model of another vocabulary ---------------------------------------------------------------------


def test_a_draft_of_another_vocabulary_is_refused_at_startup_with_llama_servers_reason(model_file):
    """llama-server loads it, logs "failed to initialize speculative decoding context" and serves
    without drafting, while serve said the draft was active: refused, exit 2, as a bad flag."""
    model_file(ALIAS)
    model_file(OTHER)
    p = subprocess.run(_serve_cmd(ALIAS, "--port", str(_free_port()), "-t", "2", "-c", "256", "-md", OTHER),
                       env=_clean_env(), capture_output=True, text=True, timeout=300)
    assert p.returncode == 2, p.stderr[-3000:]
    assert f"cannot serve SmolLM2-135M-Instruct.Q4_1.gguf with the draft model from flag -md='{OTHER}'" in p.stderr
    assert ("failed to initialize speculative decoding context: draft model vocab type must match target model"
            in p.stderr)
    assert "draft model:" not in p.stderr and "listening on" not in p.stderr and "Traceback" not in p.stderr


# -- a model from Ollama's store: its parameters on the OpenAI routes; SIGTERM behind a pending reload ------------


@pytest.fixture(scope="module")
def store_srv(require_engine, model_file, tmp_path_factory):
    gguf = model_file(ALIAS)
    base = tmp_path_factory.mktemp("store")
    make_ollama_store(base / "ollama", gguf, SMOL.sha256, ("registry.ollama.ai", "library", "smol", "latest"))
    env = _clean_env(OLLAMA_MODELS=str(base / "ollama"), OLLAMA_NUM_PARALLEL="2")
    s = Server("smol", base, "--ctk", "q8_0", "--ctv", "turbo4", "-c", "1024", "--keep-alive", "-1", env=env)
    yield s
    s.stop()


def _context(s: Server) -> int:
    return {m.model: m for m in s.ol.ps().models}["smol:latest"].context_length


def test_openai_requests_use_the_models_parameters_and_do_not_reload_it(store_srv):
    """``PARAMETER num_ctx 128`` is the context of every route (OpenAI requests reloaded it with
    serve's -c, and the next /api request back); its num_predict 12 bounds an OpenAI answer that
    sets no max_tokens, as on Ollama's OpenAI endpoints."""
    s = store_srv
    msgs = [{"role": "user", "content": "Write a long story about a dragon."}]
    r = s.oa.chat.completions.create(model="smol", messages=msgs, extra_body={"ignore_eos": True})
    assert r.usage.completion_tokens == PARAMS["num_predict"]
    streamed = list(s.oa.chat.completions.create(model="smol", messages=msgs, stream=True, max_tokens=3,
                                                 extra_body={"ignore_eos": True}))
    assert streamed[-1].choices[0].finish_reason == "length"
    c = s.oa.completions.create(model="smol", prompt="Once upon a time", extra_body={"ignore_eos": True})
    assert c.usage.completion_tokens == PARAMS["num_predict"]
    s.ol.generate(model="smol", prompt="hi", options={"num_predict": 2})
    assert _context(s) == PARAMS["num_ctx"]
    assert "reloading" not in s.log()


def test_a_reload_on_the_openai_route_carries_x_tqgguf_reloaded(store_srv):
    s = store_srv
    s.ol.chat(model="smol", messages=[{"role": "user", "content": "hi"}], options={"num_predict": 2, "num_ctx": 512})
    assert _context(s) == 512
    raw = s.oa.chat.completions.with_raw_response.create(model="smol", messages=[{"role": "user", "content": "hi"}],
                                                         max_tokens=2)
    assert raw.headers["x-tqgguf-reloaded"] == f"num_ctx {PARAMS['num_ctx']}"
    assert raw.parse().usage.completion_tokens == 2
    assert _context(s) == PARAMS["num_ctx"]
    assert ("reloading smol:latest with num_ctx 128 (was num_ctx 512); its Modelfile parameters for num_ctx, which "
            "the request does not set") in s.log()
    r = httpx.post(s.url + "/v1/chat/completions", timeout=60,
                   json={"model": "smol", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
    assert r.status_code == 200 and "x-tqgguf-reloaded" not in r.headers  # nothing reloaded for this one


def _requests(s: Server) -> tuple[int, int]:
    """The requests /health lists for ``s``'s runners: (active, waiting for a load or a reload)."""
    runners = s.health()[1]["runners"]
    return sum(r["active_requests"] for r in runners), sum(r["waiting_requests"] for r in runners)


def test_sigterm_while_requests_wait_behind_a_pending_reload(store_srv):
    """Two OpenAI streams run (both slots); an /api request with another num_ctx waits for them
    to reload the model, and an Ollama stream and a plain /api/generate wait behind it. SIGTERM:
    the waiting requests get the shutdown's 503 at once (they got a bare 500 and a
    CancelledError traceback when uvicorn's limit cancelled them, and the pending reload
    started a new child), the streams end with the shutdown's error after the grace period,
    and the process exits within it (7.75 s before)."""
    s = store_srv
    results: dict[str, object] = {}
    msgs = [{"role": "user", "content": "Count to 1000."}]

    def run(name: str, call) -> None:
        try:
            out = call()
            results[name] = list(out) if not isinstance(out, (dict, ollama.GenerateResponse)) else out
        except Exception as e:  # noqa: BLE001 - asserted below
            results[name] = e

    calls = {f"openai-stream-{i}": (lambda: s.oa.chat.completions.create(
        model="smol", messages=msgs, max_tokens=100000, stream=True, extra_body={"ignore_eos": True}))
        for i in range(2)}
    calls["reload"] = lambda: s.ol.generate(model="smol", prompt="hi", options={"num_ctx": 512, "num_predict": 2})
    calls["ollama-stream"] = lambda: s.ol.generate(model="smol", prompt="hi", stream=True)
    calls["ollama"] = lambda: s.ol.generate(model="smol", prompt="hi")
    threads = []

    def start(*names: str) -> None:
        for name in names:
            threads.append(threading.Thread(target=run, args=(name, calls[name])))
            threads[-1].start()

    # each step once the server shows the last one done: a thread's start is no request order
    start("openai-stream-0", "openai-stream-1")
    _wait_until(s, lambda: _requests(s) == (2, 0), "both streams running", show=lambda: _requests(s))
    pending = "reloading smol:latest with num_ctx 512 (was num_ctx 128): waiting for 2 request(s) to finish"
    seen = s.log().count(pending)
    start("reload")
    # the last two only once the reload is pending, else one may reach the server first and be
    # admitted to the running model; this reload's line, not the one the previous test logged
    _wait_for(s, pending, seen=seen)
    start("ollama-stream", "ollama")
    # both wait behind it (waiting: the reload's own request and these two) before the signal,
    # which would otherwise find them not yet arrived and refuse their connections
    _wait_until(s, lambda: _requests(s) == (2, 3), "the last two waiting behind the reload", show=lambda: _requests(s))
    starts = s.log().count(" ready in ")
    _, log = s.sigterm(threads)  # within the grace period + 1.5 s, by the signal
    for name in ("reload", "ollama-stream", "ollama"):
        err = results.get(name)
        assert isinstance(err, ollama.ResponseError) and err.status_code == 503, (name, err, log[-3000:])
        assert "tqgguf serve is shutting down (SIGTERM); this request was waiting for smol:latest to load" in err.error, \
            (name, err.error, log[-3000:])
    for i in range(2):
        err = results.get(f"openai-stream-{i}")
        assert isinstance(err, openai.APIError), (i, err)
        assert "tqgguf serve is shutting down (SIGTERM)" in str(err) and "grace period" in str(err), (i, err)
    assert "Traceback" not in log and "CancelledError" not in log and "Exception in ASGI" not in log
    assert log.count(" ready in ") == starts  # no child started for the pending reload
