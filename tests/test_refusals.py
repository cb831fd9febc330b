"""Bad input never kills the process or silently corrupts output (issue 10).

Every check runs the real engine. Contexts that might crash run in worker processes
(tests/kvfuzz.py), so a SIGABRT/SIGSEGV/SIGFPE is a test failure naming the settings,
not a dead pytest.
"""
from __future__ import annotations

import itertools
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from tqgguf.cachetypes import KV_CACHE_TYPES, UNQUANTIZED, ggml_type_id, is_quantized, type_info

from .kvfuzz import run_jobs
from .synthetic import tiny_llama_gguf

HEAD_DIMS = (32, 64, 72, 80, 96, 100, 128, 192, 256, 576)
GQA = (1, 3, 7)
QUANTIZED = tuple(t for t in KV_CACHE_TYPES if t not in UNQUANTIZED)


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[tuple[int, int], str]:
    """One synthetic llama model per (head dim, GQA ratio): 1 KV head, GQA query heads, width 64."""
    d = tmp_path_factory.mktemp("fuzz-models")
    return {(hd, g): str(tiny_llama_gguf(d / f"hd{hd}-gqa{g}.gguf", head_dim=hd, n_head=g, n_head_kv=1, n_embd=64,
                                         n_vocab=64))
            for hd in HEAD_DIMS for g in GQA}


def expected(hd: int, k: str, v: str, fa: str) -> tuple[str, str]:
    """What the engine must do: ("ok", "") or ("refused", a fragment its message must contain)."""
    bk, bv = type_info(k).block_size, type_info(v).block_size
    if hd % bk:
        return "refused", f"K cache type {k} with block size {bk} does not fit this model: n_embd_head_k = {hd}"
    if hd % bv:
        return "refused", f"V cache type {v} with block size {bv} does not fit this model: n_embd_head_v = {hd}"
    if fa == "off" and is_quantized(v):
        return "refused", "quantized V cache requires flash_attn"
    return "ok", ""


def _jobs(models, combos):
    return [{"model": models[(hd, g)], "hd": hd, "gqa": g, "k": k, "v": v, "type_k": ggml_type_id(k),
             "type_v": ggml_type_id(v), "fa": fa, "rot": rot} for hd, g, k, v, fa, rot in combos]


def _check(jobs, results):
    """Every result is a clean run or the predicted refusal; returns the problems."""
    problems = []
    for job, res in zip(jobs, results):
        want, fragment = expected(job["hd"], job["k"], job["v"], job["fa"])
        what = (f"hd={job['hd']} gqa={job['gqa']} K={job['k']} V={job['v']} fa={job['fa']} "
                f"rot={'on' if job['rot'] else 'off'}")
        if res["status"] != want or (fragment and fragment not in res["msg"]):
            problems.append(f"{what}: {res['status']} {res['msg']!r} (expected {want} {fragment!r})")
    return problems


@pytest.mark.engine
def test_fuzz_head_dims_gqa_every_cache_type_fa_and_rotation_run_finite_or_are_refused(models):
    """Head dims 32..576 x GQA 1/3/7 x every K type x every V type (the quantized ones and
    f16) x flash attention on/off/auto x rotation on/off: no signal, no NaN, and each
    combination does exactly what the block-size rule says (refusals name type, block size
    and head dim)."""
    kv = ("f16",) + QUANTIZED
    combos = list(itertools.product(HEAD_DIMS, GQA, kv, kv, ("on", "off", "auto"), (True, False)))
    jobs = _jobs(models, combos)
    t0 = time.time()
    results = run_jobs("ctx", jobs)
    counts = {s: sum(r["status"] == s for r in results) for s in ("ok", "refused", "nan", "signal", "error")}
    print(f"\nfuzz: {len(jobs)} combinations in {time.time() - t0:.0f} s: {counts}")
    assert counts["signal"] == 0 and counts["nan"] == 0 and counts["error"] == 0, \
        [r for r in results if r["status"] in ("signal", "nan", "error")][:10]
    problems = _check(jobs, results)
    assert not problems, f"{len(problems)} unexpected:\n" + "\n".join(problems[:20])
    # the combinations the bug report named are among them, refused (72/80/100 + turbo4,
    # 72/100 + q8_0, 96 + turbo4, 80 + q8_0) or running (96 + q8_0) with flash attention off
    by = {(j["hd"], j["gqa"], j["k"], j["v"], j["fa"], j["rot"]): r for j, r in zip(jobs, results)}
    for hd, k in ((72, "turbo4"), (80, "turbo4"), (100, "turbo4"), (72, "q8_0"), (100, "q8_0"), (96, "turbo4"),
                  (80, "q8_0")):
        assert by[(hd, 1, k, "f16", "off", True)]["status"] == "refused"
    assert by[(96, 1, "q8_0", "f16", "off", True)]["status"] == "ok"
    assert counts["ok"] > 1000 and counts["refused"] > 1000


@pytest.mark.parametrize("hd,k,fa", [(96, "turbo4", "off"), (80, "q8_0", "off"), (72, "turbo4", "off"),
                                     (100, "q8_0", "auto"), (80, "turbo3", "on")])
@pytest.mark.engine
def test_head_dim_not_a_multiple_of_the_block_size_is_refused_with_type_block_and_head_dim(models, hd, k, fa):
    [res] = run_jobs("ctx", _jobs(models, [(hd, 1, k, "f16", fa, True)]))
    assert res["status"] == "refused", res
    blk = type_info(k).block_size
    assert f"K cache type {k} with block size {blk} does not fit this model: n_embd_head_k = {hd}" in res["msg"]


@pytest.mark.engine
def test_head_dims_that_are_whole_blocks_run_with_finite_logits_with_flash_attention_off(models):
    jobs = _jobs(models, [(96, 3, "q8_0", "f16", "off", True), (192, 7, "turbo4", "f16", "off", True),
                          (576, 7, "turbo3", "f16", "off", False), (64, 1, "turbo2", "f16", "off", True)])
    assert [r["status"] for r in run_jobs("ctx", jobs)] == ["ok"] * 4


@pytest.mark.engine
def test_llama_cpps_own_tools_refuse_a_head_dim_the_block_size_does_not_divide(models):
    """The check lives in libllama, so llama-bench (built by `tqgguf build --tools`) refuses
    head dim 96 with a turbo4 K and flash attention off instead of aborting."""
    from tqgguf.builder.driver import installed_build_info, tool_path

    # CI builds the tools (`.ci/run`: tqgguf build --tools), so this runs there; a checkout
    # built without --tools skips it (the engine check itself is tested above through libllama)
    miss = pytest.skip
    try:
        bench = tool_path("llama-bench")
    except FileNotFoundError as e:
        miss(str(e))
    fp = (bench.parents[1] / "fingerprint")
    if not fp.exists() or fp.read_text() != (installed_build_info() or {}).get("fingerprint"):
        miss("the tools were built from another checkout than the installed engine (tqgguf build --tools)")
    r = subprocess.run([str(bench), "-m", models[(96, 1)], "-ctk", "turbo4", "-ctv", "f16", "-fa", "0", "-p", "8",
                        "-n", "0", "-r", "1", "-t", "1", "-v"], capture_output=True, text=True, timeout=120)
    assert r.returncode > 0  # an error exit, not a signal
    assert "K cache type turbo4 with block size 64 does not fit this model: n_embd_head_k = 96" in r.stderr + r.stdout


# ----------------------------------------------------------------------------------------
# type ids through the raw llama_cpp.Llama


@pytest.mark.engine
def test_type_ids_minus_1_to_300_bools_and_names_through_raw_llama_never_signal(tmp_path):
    model = str(tiny_llama_gguf(tmp_path / "hd64.gguf", head_dim=64, n_head=2))
    allowed = {ggml_type_id(t): t for t in KV_CACHE_TYPES}
    values = list(range(-1, 301)) + [True, False]
    jobs = [{"model": model, "kwargs": {side: v}} for side in ("type_k", "type_v") for v in values]
    names = ["turbo4", "TURBO3", "q8_0", "turbo2", "q4_K", "turbo5", ""]
    jobs += [{"model": model, "kwargs": {"type_k": n, "type_v": n}} for n in names]
    results = run_jobs("llama", jobs)
    print(f"\ntype ids: {len(jobs)} Llama() calls: "
          f"{ {s: sum(r['status'] == s for r in results) for s in ('ok', 'refused', 'nan', 'signal', 'error')} }")
    bad = [(j["kwargs"], r) for j, r in zip(jobs, results) if r["status"] in ("signal", "nan", "error")]
    assert not bad, bad[:10]
    for job, res in zip(jobs, results):
        (side, v), = job["kwargs"].items() if len(job["kwargs"]) == 1 else [("both", job["kwargs"]["type_k"])]
        if isinstance(v, bool):
            assert res["status"] == "refused" and res["msg"].startswith("TypeError") and "not the bool" in res["msg"]
        elif isinstance(v, int) and v in allowed:
            assert res["status"] == "ok", (job, res)
            assert res["used"][0 if side == "type_k" else 1] == v
        elif isinstance(v, int):
            assert res["status"] == "refused", (job, res)
            assert res["msg"].startswith("ValueError: Failed to create llama_context: ")
            assert "allowed" in res["msg"] and "turbo4" in res["msg"], res["msg"]
            if v == -1 or v >= len(_ggml_types()):
                assert f"id {v} is not a ggml type" in res["msg"]
            elif v == 4:
                assert "id 4 is a removed ggml type" in res["msg"]
        elif v.strip().lower() in KV_CACHE_TYPES:
            assert res["status"] == "ok" and res["used"] == [ggml_type_id(v.lower())] * 2, (job, res)
        else:
            assert res["status"] == "refused" and res["msg"].startswith("ValueError: unknown type_k"), res


def _ggml_types() -> list[int]:
    from tqgguf.cachetypes import libggml_base

    return list(range(libggml_base().ggml_type_count()))


# ----------------------------------------------------------------------------------------
# state files


def _settings():
    types = [("f16", "f16"), ("q8_0", "q8_0"), ("turbo4", "turbo4"), ("turbo4", "turbo3"), ("q4_0", "turbo2")]
    return list(itertools.product(types, (True, False), ("off", "bias", "bias:64", "full")))


def _effective(setting, hd=64):
    (k, v), rot, kc = setting
    return {"K cache type": k, "V cache type": v,
            "K rotation (Hadamard; LLAMA_ATTN_ROT_DISABLE)": "on" if rot and is_quantized(k) and hd % 64 == 0 else "off",
            "V rotation (Hadamard; LLAMA_ATTN_ROT_DISABLE)": "on" if rot and is_quantized(v) and hd % 64 == 0 else "off",
            "K centering (LLAMA_K_CENTER)": kc}


@pytest.mark.engine
def test_state_save_load_matrix_restores_exactly_or_refuses_by_name(tmp_path):
    """Cache types x rotation x K centering (40 settings, 1600 restores): a state restores
    into a context whose effective settings are the same (bit-exact next logits), and any
    difference is refused with a message naming each differing setting by name."""
    from tqgguf.runtime import open_model

    model = tiny_llama_gguf(tmp_path / "kbias.gguf", head_dim=64, n_head=4, n_head_kv=2, k_bias=2.0)
    prompt, nxt = [1, 7, 3, 9, 12, 5, 8, 2], 11
    settings = _settings()
    saved = []
    for s in settings:
        (k, v), rot, kc = s
        eng = open_model(model, ctk=k, ctv=v, rotation=rot, k_center=kc, n_ctx=64, flash_attn="on", n_threads=2,
                          logits_all=True)
        try:
            kc_active = eng.report.k_center_active
            eng.llama.eval(prompt)
            st = eng.llama.save_state()
            eng.llama.eval([nxt])
            saved.append((st, np.array(eng.llama.scores[eng.llama.n_tokens - 1]), kc_active))
        finally:
            eng.close()
    assert all(a for (_, _, kc), (_, _, a) in zip(settings, saved) if kc != "off"), "K centering must be active"
    n_exact = n_refused = 0
    for b in settings:
        (k, v), rot, kc = b
        eng = open_model(model, ctk=k, ctv=v, rotation=rot, k_center=kc, n_ctx=64, flash_attn="on", n_threads=2,
                          logits_all=True)
        try:
            for a, (st, logits, _) in zip(settings, saved):
                ea, eb = _effective(a), _effective(b)
                diff = [name for name in ea if ea[name] != eb[name]]
                if not diff:
                    eng.llama.load_state(st)
                    eng.llama.eval([nxt])
                    got = np.array(eng.llama.scores[eng.llama.n_tokens - 1])
                    assert np.array_equal(got, logits), (a, b, float(np.abs(got - logits).max()))
                    n_exact += 1
                    continue
                with pytest.raises(RuntimeError) as e:
                    eng.llama.load_state(st)
                msg = str(e.value)
                assert msg.startswith("Failed to set llama state data: ") and "other KV cache settings" in msg, msg
                for name in diff:
                    if name.startswith("K centering"):
                        assert re.search(rf"{re.escape(name)}: state has \S+.*, context has ", msg), msg
                    else:
                        assert f"{name}: state has {ea[name]}, context has {eb[name]}" in msg, msg
                for name in set(ea) - set(diff):
                    assert f"{name}:" not in msg, msg
                n_refused += 1
        finally:
            eng.close()
    print(f"\nstate matrix: {len(settings)} settings, {n_exact} exact restores, {n_refused} refusals")
    assert n_exact + n_refused == len(settings) ** 2
    assert n_exact >= len(settings) + 2 * 4  # same settings, plus f16/f16 with rotation on == off


@pytest.mark.engine
def test_state_saved_with_rotation_on_is_refused_by_a_rotation_off_context_naming_it(tmp_path):
    from tqgguf.runtime import open_model

    model = tiny_llama_gguf(tmp_path / "hd64.gguf", head_dim=64, n_head=2)
    a = open_model(model, ctk="turbo4", ctv="turbo4", rotation=True, n_ctx=32, n_threads=2)
    a.llama.eval([1, 2, 3])
    st = a.llama.save_state()
    a.close()
    b = open_model(model, ctk="turbo4", ctv="turbo4", rotation=False, n_ctx=32, n_threads=2)
    try:
        with pytest.raises(RuntimeError, match=r"K rotation \(Hadamard; LLAMA_ATTN_ROT_DISABLE\): state has on, "
                                               r"context has off; V rotation .*: state has on, context has off"):
            b.llama.load_state(st)
    finally:
        b.close()


@pytest.mark.engine
def test_per_sequence_states_carry_the_signature_too(tmp_path):
    """llama_state_seq_get/set_data (one sequence) go through the same check: a turbo4
    sequence state restores into a same-settings context and is refused by a q8_0 one,
    with the reason in llama_tq_errors()."""
    import ctypes

    import llama_cpp

    from tqgguf.runtime import open_model

    model = tiny_llama_gguf(tmp_path / "hd64.gguf", head_dim=64, n_head=2)
    a = open_model(model, ctk="turbo4", ctv="turbo4", n_ctx=32, n_threads=2)
    try:
        a.llama.eval([1, 2, 3])
        ctx = a.llama._ctx.ctx
        n = llama_cpp.llama_state_seq_get_size(ctx, 0)
        buf = (ctypes.c_uint8 * n)()
        assert llama_cpp.llama_state_seq_get_data(ctx, buf, n, 0) == n
    finally:
        a.close()
    for ctk, ok in (("turbo4", True), ("q8_0", False)):
        b = open_model(model, ctk=ctk, ctv="turbo4", n_ctx=32, n_threads=2)
        try:
            llama_cpp.llama_tq_clear_errors()
            got = llama_cpp.llama_state_seq_set_data(b.llama._ctx.ctx, buf, n, 0)
            errors = llama_cpp.tq_engine_errors()
            if ok:
                assert got == n and errors == ""
            else:
                assert got == 0
                assert "K cache type: state has turbo4, context has q8_0" in errors, errors
                assert "V cache type" not in errors
        finally:
            b.close()


@pytest.mark.engine
def test_state_without_a_signature_is_refused_not_misread(tmp_path):
    """A state from a build without signatures (upstream layout: n_stream first) is refused."""
    from tqgguf.runtime import open_model

    model = tiny_llama_gguf(tmp_path / "hd64.gguf", head_dim=64, n_head=2)
    eng = open_model(model, ctk="q8_0", ctv="q8_0", n_ctx=32, n_threads=2)
    try:
        eng.llama.eval([1, 2, 3])
        st = eng.llama.save_state()
        raw = bytes(st.llama_state)
        i = raw.find(b"TQKV")
        assert i > 0
        end = i + 12 + int.from_bytes(raw[i + 8:i + 12], "little")  # magic, version, length, text
        st.llama_state = raw[:i] + raw[end:]
        st.llama_state_size = len(st.llama_state)
        with pytest.raises(RuntimeError, match="carries no KV cache signature"):
            eng.llama.load_state(st)
    finally:
        eng.close()


# ----------------------------------------------------------------------------------------
# engine variables


def _rot_flags(model, value):
    """attn_rot_k the engine logs for a turbo4 cache with LLAMA_ATTN_ROT_DISABLE=value (raw Llama)."""
    import llama_cpp

    from tqgguf import engine

    engine.ensure_engine()
    mark = engine.capture.mark()
    old = os.environ.get("LLAMA_ATTN_ROT_DISABLE")
    os.environ["LLAMA_ATTN_ROT_DISABLE"] = value
    try:
        llm = llama_cpp.Llama(model_path=str(model), n_ctx=32, type_k="turbo4", type_v="turbo4", flash_attn=True,
                              verbose=False)
        llm.close()
    finally:
        if old is None:
            os.environ.pop("LLAMA_ATTN_ROT_DISABLE", None)
        else:
            os.environ["LLAMA_ATTN_ROT_DISABLE"] = old
    return re.findall(r"attn_rot_k = (\d)", engine.capture.since(mark))[-1]


@pytest.mark.parametrize("value,rot", [("1", "0"), ("true", "0"), ("YES", "0"), ("on", "0"), (" 0 ", "1"),
                                       ("false", "1"), ("no", "1"), ("off", "1"), ("", "1")])
@pytest.mark.engine
def test_engine_reads_llama_attn_rot_disable_as_a_boolean(tmp_path, value, rot):
    model = tiny_llama_gguf(tmp_path / "hd64.gguf", head_dim=64, n_head=2)
    assert _rot_flags(model, value) == rot


@pytest.mark.engine
def test_engine_refuses_an_unreadable_llama_attn_rot_disable(tmp_path):
    model = tiny_llama_gguf(tmp_path / "hd64.gguf", head_dim=64, n_head=2)
    with pytest.raises(ValueError, match=r"LLAMA_ATTN_ROT_DISABLE='maybe' is not a boolean; allowed: 1/0, "
                                         r"true/false, yes/no, on/off"):
        _rot_flags(model, "maybe")


@pytest.mark.engine
def test_open_model_reports_a_user_set_engine_variable_it_overrides(tmp_path, monkeypatch, capsys):
    from tqgguf import enginevars
    from tqgguf.runtime import open_model

    model = tiny_llama_gguf(tmp_path / "hd64.gguf", head_dim=64, n_head=2)
    monkeypatch.setattr(enginevars, "_warned", set())
    monkeypatch.setenv("LLAMA_ATTN_ROT_DISABLE", "1")
    eng = open_model(model, ctk="turbo4", ctv="turbo4", rotation=True, n_ctx=32, n_threads=2)
    assert eng.report.attn_rot_k is True  # tqgguf's setting wins...
    eng.close()
    err = capsys.readouterr().err  # ...and says so
    assert ("LLAMA_ATTN_ROT_DISABLE='1' from your environment is overridden: tqgguf sets LLAMA_ATTN_ROT_DISABLE=0 "
            "for the engine from its own rotation setting (rotation on), which wins") in err
    assert "--rot/--no-rot or TQGGUF_ATTN_ROTATION" in err
    assert os.environ["LLAMA_ATTN_ROT_DISABLE"] == "1"  # restored after the context was made


@pytest.mark.parametrize("verb", [["ppl"], ["sweep"], ["serve"]])
def test_every_verb_warns_about_unknown_tqgguf_variables(verb, tmp_path):
    env = {**os.environ, "TQGGUF_KV_CACHE_TYP": "q8_0"}
    r = subprocess.run([sys.executable, "-m", "tqgguf", *verb, str(tmp_path / "missing.gguf")], env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode != 0  # the model does not exist; the warning comes first anyway
    assert ("warning: TQGGUF_KV_CACHE_TYP is set but tqgguf does not read it (typo?); "
            "did you mean TQGGUF_KV_CACHE_TYPE?") in r.stderr, r.stderr


@pytest.mark.engine
@pytest.mark.parametrize("verb,extra", [("ppl", []), ("bench", ["-p", "16", "-n", "4"]), ("sweep", ["--ctk", "q8_0", "--ctv", "q8_0"]),
                                        ("mix", ["--bits", "4"])])
def test_gpu_layers_on_a_cpu_engine_are_one_usage_error_in_every_verb(verb, extra, tmp_path, monkeypatch):
    """-ngl on the CPU-only engine: every verb that loads the model in-process (mix too, which
    had no -ngl: click split it into -n) refuses it before any work with the engine's GPU
    message, as a usage error (exit 2) like every other bad flag."""
    from click.testing import CliRunner

    from tqgguf.cli import main
    from tqgguf.engine import ensure_engine, gpu_offload_error

    ensure_engine()
    if gpu_offload_error(99) is None:
        pytest.skip("the installed engine has a usable GPU")
    monkeypatch.chdir(tmp_path)
    model = tiny_llama_gguf(tmp_path / "m.gguf", head_dim=64, n_head=1, n_head_kv=1, n_embd=64, n_vocab=64)
    r = CliRunner().invoke(main, [verb, str(model), *extra, "-ngl", "99"])
    assert r.exit_code == 2, r.output
    assert "-ngl 99 asks for GPU layers, but the installed engine was built for the CPU only" in r.output, r.output
    assert "No such option" not in r.output and not list(tmp_path.glob("*/")), r.output
