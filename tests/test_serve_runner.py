"""``tqgguf serve``'s runners as a user meets them (issue 25, items 8, 9, 11, 12): what llama.cpp
made of the KV settings (cells, MiB and rotation per cache, Gemma-3's sliding-window cache),
``LLAMA_ARG_*`` variables declared or refused, load options that apply to their own request
only, a GGUF without a vocabulary refused by name on every verb, and a shutdown bounded by
the grace period while three long prefills run.

Real ``tqgguf serve`` processes with real llama-server children, the real ``ollama`` and
``openai`` clients. Two server starts: SmolLM2-135M (``srv``, stopped by the SIGTERM test at
the end) and Gemma-3-270M for its two caches.
"""
from __future__ import annotations

import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from .synthetic import tiny_llama_gguf
from .test_server import ALIAS, GREEDY, Server, _child_argv, _children, _clean_env, _free_port, _serve_cmd

ollama = pytest.importorskip("ollama")
openai = pytest.importorskip("openai")

CTX = 8192  # per slot (SmolLM2's training context): room for the three long prompts of the shutdown test
NP = 3
ENV_PASSED = ("LLAMA_ARG_CACHE_REUSE", "256")  # a llama-server flag serve does not pass
ENV_OVERRIDDEN = ("LLAMA_ARG_CTX_SIZE", "999")  # one serve passes itself (-c)
ROOT = Path(__file__).resolve().parents[1]  # a process run elsewhere (cwd) imports this checkout's tqgguf
NO_VOCAB = "tiny-no-vocab"  # a vocabulary-less GGUF in the server's working directory, named without .gguf


@pytest.fixture(scope="module")
def srv(require_engine, model_file, tmp_path_factory):
    model_file(ALIAS)
    tmp = tmp_path_factory.mktemp("serve-runner")
    tiny_llama_gguf(tmp / NO_VOCAB, head_dim=64, n_head=2)
    env = _clean_env(PYTHONPATH=str(ROOT), **dict([ENV_PASSED, ENV_OVERRIDDEN]))
    s = Server(ALIAS, tmp, "--ctk", "q8_0", "--ctv", "turbo4", "-c", str(CTX), "-np", str(NP), "--keep-alive", "-1",
               env=env, cwd=tmp)
    yield s
    s.stop()


def _mib(type_name: str, values_per_row: int, cells: int) -> float:
    from tqgguf.cachetypes import type_info

    return type_info(type_name).row_bytes(values_per_row) * cells / (1 << 20)


# -- item 12: what llama.cpp did --------------------------------------------------------------------


def test_startup_says_each_cache_as_llama_cpp_made_it_and_the_rotation_it_applied(srv):
    """SmolLM2-135M: 30 layers, 3 KV heads x 64; one cache of CTX cells per slot; K q8_0 and V
    turbo4 are quantized with a head dim of 64, so llama.cpp rotates both."""
    log = srv.log()
    k = _mib("q8_0", 3 * 64, CTX * NP * 30)
    v = _mib("turbo4", 3 * 64, CTX * NP * 30)
    assert (f"KV cache (llama.cpp): K q8_0 {k:.2f} MiB + V turbo4 {v:.2f} MiB = {k + v:.2f} MiB, {CTX} cells per "
            f"slot x {NP} slots, 30 layers") in log, log[:4000]
    assert "rotation (llama.cpp): K and V (attn_rot_k = 1, attn_rot_v = 1)" in log
    assert f"placement: CPU: layers 0-29 + output, model 92.1 MiB, K {k:.2f} MiB, V {v:.2f} MiB" in log


def test_llama_arg_variables_are_declared_and_reach_the_child(srv):
    log = srv.log()
    name, value = ENV_PASSED
    assert f"environment: {name}={value} (passed to llama-server)" in log
    name, value = ENV_OVERRIDDEN
    assert f"environment: {name}={value} (set, but serve's -c overrides it (llama-server's own warning))" in log
    pid = next(r["pid"] for r in srv.health()[1]["runners"] if r["kind"] == "chat")
    environ = dict(e.split("=", 1) for e in Path(f"/proc/{pid}/environ").read_bytes().decode().split("\0") if "=" in e)
    assert environ.get(ENV_PASSED[0]) == ENV_PASSED[1]
    argv = _child_argv(srv)
    assert argv[argv.index("-c") + 1] == str(CTX * NP)  # serve's -c won


def test_gemma3_sliding_window_cache_is_shown_beside_the_global_one(model_file, tmp_path):
    """Gemma-3-270M (18 layers: 3 global, 15 sliding-window; 1 KV head x 256) with f16 K and V:
    two caches, the window's with fewer cells than the context; f16 is never rotated, and the
    placement's K/V MiB are those llama.cpp allocated, not n_ctx cells on every layer."""
    model_file("gemma3-270m")
    ctx = 2048
    s = Server("gemma3-270m", tmp_path, "-c", str(ctx), "-np", "2", "--ctk", "f16", "--ctv", "f16")
    try:
        log = s.log()
    finally:
        s.stop()
    full = _mib("f16", 256, ctx * 2 * 3)
    assert (f"KV cache (llama.cpp), global layers: K f16 {full:.2f} MiB + V f16 {full:.2f} MiB = {2 * full:.2f} MiB, "
            f"{ctx} cells per slot x 2 slots, 3 layers") in log, log[:4000]
    m = re.search(r"KV cache \(llama\.cpp\), sliding-window layers: K f16 ([\d.]+) MiB \+ V f16 ([\d.]+) MiB = "
                  r"[\d.]+ MiB, (\d+) cells per slot x 2 slots \(the window: fewer than the (\d+) tokens of a slot's "
                  r"context\), 15 layers", log)
    assert m, log[:4000]
    cells = int(m.group(3))
    assert 512 <= cells < ctx and int(m.group(4)) == ctx  # the window (512) plus a batch, not the context
    assert float(m.group(1)) == pytest.approx(_mib("f16", 256, cells * 2 * 15), abs=0.01)
    assert ("rotation (llama.cpp): none (attn_rot_k = 0, attn_rot_v = 0; llama.cpp rotates a quantized K or V cache "
            "whose head dim is a multiple of 64, never f16)") in log
    swa = float(m.group(1))
    assert f"K {full + swa:.2f} MiB, V {full + swa:.2f} MiB" in re.search(r"placement: .*", log).group(0)


def test_a_llama_arg_variable_that_would_cut_serve_off_its_child_is_refused(tmp_path):
    for name, why in (("LLAMA_API_KEY", "demand this key"), ("LLAMA_ARG_SSL_KEY_FILE", "HTTPS"),
                      ("LLAMA_ARG_API_PREFIX", "prefix")):
        p = subprocess.run(_serve_cmd(str(tmp_path / "any.gguf"), "--port", "1"), env=_clean_env(**{name: "x"}),
                           capture_output=True, text=True, timeout=120)
        assert p.returncode == 2, p.stderr
        assert f"error: {name} is set, but " in p.stderr and why in p.stderr and "unset it" in p.stderr, p.stderr


# -- item 9: load options apply to their own request ------------------------------------------------


def test_num_thread_and_num_ctx_apply_to_their_request_and_the_defaults_come_back(srv):
    """As Ollama: a request's options apply to its load; a later request without them gets
    serve's settings (-t 2, -c CTX) back, on either API."""
    def threads() -> str:
        a = _child_argv(srv)
        return a[a.index("-t") + 1]

    assert threads() == "2"
    srv.ol.generate(model=ALIAS, prompt="hi", options={**GREEDY, "num_predict": 2, "num_thread": 1})
    assert threads() == "1"
    srv.ol.generate(model=ALIAS, prompt="hi", options={**GREEDY, "num_predict": 2})
    assert threads() == "2"
    log = srv.log()
    assert "reloading smollm2-135m with num_thread 1 (was num_thread 2)" in log
    assert ("reloading smollm2-135m with num_thread 2 (was num_thread 1); serve's settings for num_thread, which the "
            "request does not set") in log

    def context() -> int:
        return {m.model: m for m in srv.ol.ps().models}[f"{ALIAS}:latest"].context_length

    srv.ol.chat(model=ALIAS, messages=[{"role": "user", "content": "hi"}], options={"num_predict": 2, "num_ctx": 1024})
    assert context() == 1024
    a = _child_argv(srv)
    assert a[a.index("-c") + 1] == str(1024 * NP)
    # the OpenAI API has no num_ctx: its requests run with serve's settings, as in Ollama
    srv.oa.chat.completions.create(model=ALIAS, messages=[{"role": "user", "content": "hi"}], max_tokens=2)
    assert context() == CTX
    assert (f"reloading smollm2-135m with num_ctx {CTX} (was num_ctx 1024); serve's settings for num_ctx, which the "
            "request does not set") in srv.log()
    n = srv.log().count("reloading ")
    srv.ol.generate(model=ALIAS, prompt="hi", options={"num_predict": 2, "num_thread": 2, "num_ctx": CTX})
    assert srv.log().count("reloading ") == n  # serve's own values, sent: nothing to reload


# -- item 11: no vocabulary ------------------------------------------------------------------------------


def test_a_requested_model_without_a_vocabulary_is_a_400_naming_it_and_no_child_starts(srv):
    kids = _children(srv.proc.pid)
    for call in (lambda: srv.ol.generate(model=NO_VOCAB, prompt="hi"),
                 lambda: srv.ol.chat(model=NO_VOCAB, messages=[{"role": "user", "content": "hi"}])):
        with pytest.raises(ollama.ResponseError) as ei:
            call()
        assert ei.value.status_code == 400
        assert (f"{NO_VOCAB} has no vocabulary (tokenizer.ggml.model = 'none'), and `tqgguf serve` tokenizes every "
                "request") in ei.value.error
    with pytest.raises(openai.BadRequestError, match="has no vocabulary"):
        srv.oa.completions.create(model=NO_VOCAB, prompt="hi", max_tokens=2)
    assert _children(srv.proc.pid) == kids
    assert srv.health()[0] == 200


@pytest.mark.engine
def test_every_verb_that_tokenizes_refuses_a_gguf_without_a_vocabulary_by_name(tmp_path):
    """ppl, sweep and serve (and --k-center calib in bench) refuse it before llama.cpp would
    abort (SIGABRT in llama_vocab::tokenize); bench itself feeds token ids and runs it."""
    model = tiny_llama_gguf(tmp_path / "nv.gguf", head_dim=64, n_head=2)
    for verb, extra in (("ppl", ["-c", "64", "--chunks", "1"]), ("sweep", ["--ctk", "f16", "--ctv", "f16"]),
                        ("serve", ["--port", str(_free_port())]), ("bench", ["-p", "16", "-n", "0", "-r", "1", "--k-center", "calib"])):
        p = subprocess.run([sys.executable, "-m", "tqgguf", verb, str(model), *extra],
                           env=_clean_env(PYTHONPATH=str(ROOT)), cwd=tmp_path, capture_output=True, text=True, timeout=300)
        assert p.returncode in (1, 2), (verb, p.returncode, p.stderr[-2000:])  # an error exit (sweep: usage), no signal
        what = "--k-center calib tokenizes its calibration text" if verb == "bench" else \
            "`tqgguf serve` tokenizes every request" if verb == "serve" else f"`tqgguf {verb}` tokenizes its text"
        assert f"Error: nv.gguf has no vocabulary (tokenizer.ggml.model = 'none'), and {what}" in p.stderr, p.stderr
        assert "Traceback" not in p.stderr and "starting llama-server" not in p.stderr
    p = subprocess.run([sys.executable, "-m", "tqgguf", "bench", str(model), "-p", "16", "-n", "4", "-r", "1"],
                       env=_clean_env(PYTHONPATH=str(ROOT)), cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    assert re.search(r"\|\s+tg4\s+\|\s+[\d.]+ ±", p.stdout), p.stdout


def test_the_vocabulary_check_reads_the_key_gguf_py_reads(model_file, tmp_path):
    from gguf import GGUFReader

    from tqgguf.models import NO_VOCABULARY, TOKENIZER_KEY, vocabulary_error

    model = tiny_llama_gguf(tmp_path / "nv.gguf", head_dim=64, n_head=2)
    assert GGUFReader(model).fields[TOKENIZER_KEY].contents() in NO_VOCABULARY
    assert "has no vocabulary" in vocabulary_error(model, "x")
    smol = model_file(ALIAS)
    assert vocabulary_error(smol, "x") is None
    assert vocabulary_error(tmp_path / "missing.gguf", "x") is None  # the verb that opens it says why


# -- item 8: shutdown under load (runs last: it stops ``srv``) ------------------------------------------


def test_sigterm_with_three_long_prefills_ends_within_the_grace_period(srv, wikitext):
    """Three ~6k-token prompts prefilling at once (q8_0/turbo4 on the CPU: far longer than the
    grace period), SIGTERM: each client gets the shutdown's error, and the process ends within
    the grace period + 1.5 s (it took 16.9 s: the busy llama-server ignored SIGTERM, and serve
    waited 10 s before SIGKILL), with no child left."""
    from tqgguf.server.run import SHUTDOWN_GRACE_S

    kids = _children(srv.proc.pid)
    results: dict[int, object] = {}

    def go(i: int) -> None:
        prompt = wikitext.content[i * 40000:i * 40000 + 24000]
        try:
            if i == 1:  # one not streamed
                results[i] = srv.ol.generate(model=ALIAS, prompt=prompt, raw=True, options={"num_predict": 8})
            else:
                results[i] = list(srv.ol.generate(model=ALIAS, prompt=prompt, raw=True, stream=True,
                                                  options={"num_predict": 8}))
        except Exception as e:  # noqa: BLE001 - asserted below
            results[i] = e

    threads = [threading.Thread(target=go, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    time.sleep(2.0)  # all three sent and prefilling (llama-server takes them a batch at a time)
    took, log = srv.sigterm(threads)
    assert took > SHUTDOWN_GRACE_S - 0.5  # the running requests did get their grace period
    for i in range(3):
        err = results.get(i)
        assert isinstance(err, ollama.ResponseError), (i, err)
        assert "tqgguf serve is shutting down (SIGTERM)" in str(err) and "grace period" in str(err), (i, err)
    assert "shutting down (SIGTERM): new requests get 503; 3 running request(s) have 5 s to finish" in log
    assert "cutting 3 request(s) still running 5 s after SIGTERM" in log
    assert "still running 0.5 s after SIGTERM: killed" in log  # where the 10 s went before
    assert "Traceback" not in log
    assert all(not Path(f"/proc/{k}").exists() or "Z" in Path(f"/proc/{k}/stat").read_text().split()[2] for k in kids)
