"""Per-layer K/V cache types (layer plans: ``--kv-boundary``, ``--kv-swa``, ``--kv-plan``,
``LLAMA_KV_PLAN``) and ``--k-center auto``.

Parsing and model checks run without the engine; the engine tests use the patched build
with real models (SmolLM2-135M, Gemma-3-270M, Qwen2.5-Coder-0.5B) and tiny synthetic ones.
"""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

from tqgguf.kvplan import KVPlanError, build_plan, model_layers, parse_boundary, parse_map, read_header

from .synthetic import tiny_llama_gguf

SMOL, GEMMA, QWEN = "smollm2-135m", "gemma3-270m", "qwen2.5-coder-0.5b"


# ----------------------------------------------------------------------------- parsing (no engine)

def test_map_parses_ranges_and_swa_in_engine_form():
    entries = parse_map(" 0-1, 28-29 : q8_0/q8_0 ; swa:F16/f16;5:turbo4/turbo3")
    assert [str(e) for e in entries] == ["0-1,28-29:q8_0/q8_0", "swa:f16/f16", "5:turbo4/turbo3"]
    assert entries[1].swa and not entries[0].swa


@pytest.mark.parametrize("raw,msg", [
    ("0-1:q9_0/q8_0", r"unknown K cache type .*'q9_0'; valid: f32, f16"),
    ("0-1:q8_0/turbo5", r"unknown V cache type .*'turbo5'"),
    ("0-3:q8_0/q8_0;2-5:f16/f16", r"layers 0-3 \(0-3:q8_0/q8_0\) and 2-5 \(2-5:f16/f16\) overlap"),
    ("0-3,3:q8_0/q8_0", r"layers 0-3 .* and 3-3 .* overlap"),
    ("3-1:q8_0/q8_0", r"'3-1' is not a layer range \(N or A-B with A <= B\)"),
    ("first:q8_0/q8_0", r"'first' is not a layer range"),
    ("q8_0/q8_0", r"has no LAYERS:K/V form"),
    ("swa:f16/f16;swa:q8_0/q8_0", r"'swa' is given twice"),
])
def test_bad_maps_are_refused_naming_what_is_wrong(raw, msg):
    with pytest.raises(KVPlanError, match=msg):
        parse_map(raw)


def test_boundary_defaults_to_q8_0_and_takes_one_type_for_both():
    assert parse_boundary("2") == (2, "q8_0", "q8_0")
    assert parse_boundary("1:f16") == (1, "f16", "f16")
    assert parse_boundary("3:q8_0/turbo4") == (3, "q8_0", "turbo4")
    with pytest.raises(KVPlanError, match=r"give N\[:K/V\]"):
        parse_boundary("two")


def test_header_reader_agrees_with_gguf_package(model_file):
    """read_header (our fast header scan) against gguf.GGUFReader on a small real model."""
    from gguf import GGUFReader

    path = model_file(SMOL)
    meta, names = read_header(path)
    r = GGUFReader(str(path), "r")
    assert names == [t.name for t in r.tensors]
    for key in ("llama.block_count", "llama.attention.head_count_kv", "llama.context_length"):
        f = r.fields[key]
        assert meta[key] == f.parts[f.data[0]][0]
    assert meta["general.architecture"] == "llama"


def test_model_layers_of_the_three_models(model_file):
    s, g, q = (model_layers(model_file(m)) for m in (SMOL, GEMMA, QWEN))
    assert (s.n_layer, s.swa, s.k_bias_layers) == (30, False, 0)
    assert (g.n_layer, g.swa, g.k_bias_layers) == (18, True, 0)
    assert (q.n_layer, q.swa, q.k_bias_layers) == (24, False, 24)


def test_boundary_plan_names_first_and_last_layers(model_file):
    p = build_plan(model_file(QWEN), boundary="2")
    assert p.engine_value() == "0-1,22-23:q8_0/q8_0"
    assert p.k_types("turbo3") == {"q8_0", "turbo3"}
    assert p.keeps_defaults()  # layers 2-21 keep -ctk/-ctv
    p = build_plan(model_file(QWEN), boundary="12:f16/f16")  # covers every layer: one range
    assert p.engine_value() == "0-23:f16/f16" and p.k_types("turbo3") == {"f16"}
    assert not p.keeps_defaults()  # `tqgguf ppl` then names no "others"
    assert build_plan(model_file(GEMMA), swa="f16").keeps_defaults()  # the global layers
    assert build_plan(model_file(QWEN)) is None


def test_boundary_whose_first_and_last_layers_overlap_is_refused(model_file):
    with pytest.raises(KVPlanError, match=r"--kv-boundary 13: the first and last 13 layers overlap, "
                                          r"qwen2.5-coder.* has 24 layers; N can be at most 12"):
        build_plan(model_file(QWEN), boundary="13")


def test_plan_for_another_layer_count_is_refused(model_file):
    with pytest.raises(KVPlanError, match=r"layer 29 is named, but qwen2.5-coder.* has 24 layers \(0-23\)"):
        build_plan(model_file(QWEN), plan="0-1,28-29:q8_0/q8_0")


def test_boundary_overlapping_a_map_is_refused(model_file):
    with pytest.raises(KVPlanError, match="overlap"):
        build_plan(model_file(QWEN), boundary="2", plan="1-3:f16/f16")


def test_kv_swa_on_a_model_without_sliding_window_is_refused(model_file):
    with pytest.raises(KVPlanError, match="has no sliding-window layers"):
        build_plan(model_file(SMOL), swa="f16")
    with pytest.raises(KVPlanError, match="--kv-plan swa:f16/f16: a 'swa' entry, but .* has no sliding-window layers"):
        build_plan(model_file(SMOL), plan="swa:f16/f16")
    assert build_plan(model_file(SMOL), plan="0-1:f16/f16") is not None  # layer ranges stay fine


def test_plan_file_of_another_model_is_refused(model_file, tmp_path):
    from tqgguf.fsutil import sha256_file_cached
    from tqgguf.kvplan import PLAN_FILE_FORMAT

    f = tmp_path / "plan.json"
    f.write_text(json.dumps({"format": PLAN_FILE_FORMAT, "model": "SmolLM2-135M-Instruct.Q4_1.gguf",
                             "model_sha256": sha256_file_cached(model_file(SMOL)), "n_layer": 30,
                             "plan": "0-1:q8_0/q8_0"}))
    assert build_plan(model_file(SMOL), plan=str(f)).engine_value() == "0-1:q8_0/q8_0"
    with pytest.raises(KVPlanError, match=r"was made for SmolLM2-135M-Instruct.Q4_1.gguf .*not for qwen2.5"):
        build_plan(model_file(QWEN), plan=str(f))


def test_plan_settings_from_env_and_flags():
    from tqgguf.config import SettingsError, resolve_settings

    st = resolve_settings({"kv_boundary": "2"}, {"TQGGUF_KV_SWA": "f16", "TQGGUF_KV_PLAN": "3:q4_0/q4_0"})
    assert (st.kv_boundary, st.kv_swa, st.kv_plan) == ("2:q8_0/q8_0", "f16/f16", "3:q4_0/q4_0")
    assert st.source("kv_swa").name == "TQGGUF_KV_SWA"
    with pytest.raises(SettingsError, match=r"TQGGUF_KV_PLAN='0-1:q8_0/bogus'.*unknown V cache type"):
        resolve_settings({}, {"TQGGUF_KV_PLAN": "0-1:q8_0/bogus"})


def test_sweep_plan_axis_expands_with_the_types():
    from tqgguf.kvplan import parse_plan_axes
    from tqgguf.sweep.grid import expand

    plans = parse_plan_axes("0,2", "none", ())
    cfgs = expand(["turbo3"], ["turbo3"], [True], ["off"], plans=plans)
    assert [c.key for c in cfgs] == ["f16/f16/rot=n/a", "turbo3/turbo3/rot=on",
                                     "turbo3/turbo3/rot=on/boundary=2:q8_0/q8_0"]
    assert cfgs[2].plan_label == "--kv-boundary 2:q8_0/q8_0"


def test_k_center_auto_resolution(model_file):
    from tqgguf.kcenter import resolve_auto

    kc, why = resolve_auto(model_file(QWEN), {"turbo4"})
    assert str(kc) == "full" and "attn_k.bias in 24 of 24 layers" in why and "turbo4" in why
    kc, why = resolve_auto(model_file(QWEN), {"f16"})
    assert str(kc) == "off" and "not quantized" in why
    kc, why = resolve_auto(model_file(QWEN), {"f16", "q8_0"})  # a plan that quantizes some layers' K
    assert str(kc) == "full"
    for m in (SMOL, GEMMA):
        kc, why = resolve_auto(model_file(m), {"turbo3"})
        assert str(kc) == "off" and "no bias" in why


# ----------------------------------------------------------------------------- engine

def _engine_refusal(model, plan: str, *, fa: bool = True) -> None:
    """Open ``model`` through llama_cpp directly with LLAMA_KV_PLAN=plan (no tqgguf checks
    in front); context creation must fail with a ValueError (the reason is in the log)."""
    import llama_cpp

    from tqgguf.engine import engine_env, ensure_engine

    ensure_engine()
    with engine_env(kv_plan=plan):
        with pytest.raises(ValueError):
            llama_cpp.Llama(model_path=str(model), n_ctx=64, verbose=False, flash_attn=fa, type_k=1, type_v=1)


@pytest.mark.engine
@pytest.mark.parametrize("plan,msg", [
    ("0-7:q8_0/q8_0", r"LLAMA_KV_PLAN=0-7:q8_0/q8_0: layer 7 is named, but this model has 2 layers \(0-1\)"),
    ("0:q8_0/q9_9", r"unknown V cache type 'q9_9'; allowed: f32, f16"),
    ("0-1:q8_0/q8_0;1:f16/f16", r"layer ranges 0-1 and 1-1 overlap"),
    ("0-1 q8_0/q8_0", r"has no ':K/V' part"),
    ("0:q8_0", r"must be K/V"),
])
def test_engine_refuses_a_bad_plan_by_name_without_aborting(tmp_path, plan, msg):
    """LLAMA_KV_PLAN as llama.cpp's own tools see it: a bad plan fails context creation with
    a logged reason (the process goes on), never an assert."""
    import re

    from tqgguf.engine import capture

    model = tiny_llama_gguf(tmp_path / "t.gguf", head_dim=64, n_head=2, n_layer=2)
    mark = capture.mark()
    _engine_refusal(model, plan)
    assert re.search(msg, capture.since(mark)), capture.since(mark)[-2000:]


@pytest.mark.engine
def test_engine_refuses_quantized_plan_v_without_flash_attention(tmp_path):
    from tqgguf.engine import capture
    from tqgguf.runtime import open_model

    model = tiny_llama_gguf(tmp_path / "t.gguf", head_dim=64, n_head=2, n_layer=2)
    mark = capture.mark()
    _engine_refusal(model, "1:f16/q8_0", fa=False)
    assert "layer 1 gets the quantized V type q8_0, which needs flash attention" in capture.since(mark)
    with pytest.raises(ValueError, match="-fa off cannot be used with the layer plan's quantized V cache type q8_0"):
        open_model(model, ctk="f16", ctv="f16", flash_attn="off", kv_plan="1:f16/q8_0")


@pytest.mark.engine
def test_mixed_plan_allocates_each_layers_types_and_counts_bytes(model_file):
    """SmolLM2 (30 layers, 3 KV heads x 64) with --kv-boundary 2 on turbo3: the engine's
    per-layer types, its bytes per token against the row sizes of the registry, and the
    K/V MiB it allocated."""
    from tqgguf.cachetypes import type_info
    from tqgguf.runtime import open_model

    eng = open_model(model_file(SMOL), ctk="turbo3", ctv="turbo3", kv_boundary="2", n_ctx=256, n_threads=2)
    try:
        r = eng.report
        assert r.kv_plan == "0-1,28-29:q8_0/q8_0"
        assert r.kv_plan_layers == "0-1 q8_0/q8_0, 2-27 turbo3/turbo3, 28-29 q8_0/q8_0"
        assert r.k_type == "mixed" and r.v_type == "mixed"
        row = lambda t: 192 // type_info(t).block_size * type_info(t).type_size  # noqa: E731
        want = 2 * (4 * row("q8_0") + 26 * row("turbo3"))
        assert r.kv_bytes_per_token == want
        assert r.bits_per_value == pytest.approx(8 * want / (30 * 2 * 192))
        assert (r.k_mib + r.v_mib) == pytest.approx(want * r.cells / 2**20, abs=0.01)
        assert r.attn_rot_k and r.attn_rot_v
    finally:
        eng.close()


@pytest.mark.engine
@pytest.mark.parametrize("name,plan,other,refusal", [
    (SMOL, {"kv_plan": "0-1:q8_0/f16;29:f16/q8_0"}, {"kv_boundary": "2"},
     r"K cache type: state has 0-1:q8_0,2-28:turbo3,29:f16, context has 0-1:q8_0,2-27:turbo3,28-29:q8_0; "
     r"V cache type: state has 0-1:f16,2-28:turbo4,29:q8_0"),
    # two caches (sliding-window at f16, global at turbo3/turbo4): both are written and read back
    (GEMMA, {"kv_swa": "f16"}, {}, r"K cache type: state has f16, context has turbo3"),
])
def test_state_round_trip_with_a_mixed_plan_is_exact_and_another_plan_is_refused(model_file, name, plan, other,
                                                                                  refusal):
    """Greedy 32 tokens after restoring a saved state equal the 32 generated before; a
    context with another plan refuses the state, naming the per-layer K types."""
    from tqgguf.runtime import open_model

    path = model_file(name)
    eng = open_model(path, ctk="turbo3", ctv="turbo4", n_ctx=256, n_threads=2, logits_all=True, **plan)
    try:
        prompt = eng.llama.tokenize(b"The history of the city begins with", add_bos=True)
        eng.llama.eval(prompt)
        st = eng.llama.save_state()
        tokens = []
        for _ in range(32):
            tokens.append(int(np.argmax(eng.llama.scores[eng.llama.n_tokens - 1])))
            eng.llama.eval([tokens[-1]])
        eng.llama.reset()
        eng.llama.load_state(st)
        again = []
        for _ in range(32):
            again.append(int(np.argmax(eng.llama.scores[eng.llama.n_tokens - 1])))
            eng.llama.eval([again[-1]])
        assert again == tokens
        assert len(set(tokens)) > 3  # real text, not one token repeated
    finally:
        eng.close()
    other = open_model(path, ctk="turbo3", ctv="turbo4", n_ctx=256, n_threads=2, **other)
    try:
        with pytest.raises(RuntimeError, match=refusal):
            other.llama.load_state(st)
    finally:
        other.close()


def _logits(path, n_tokens: int = 48, **kw) -> tuple[np.ndarray, object]:
    from tqgguf.runtime import open_model
    from tqgguf.texts import resolve_text

    eng = open_model(path, n_ctx=128, n_threads=2, logits_all=True, **kw)
    try:
        toks = eng.llama.tokenize(resolve_text(None, allow_download=False).content[:4000].encode(), add_bos=True)[:n_tokens]
        eng.llama.eval(toks)
        return np.array(eng.llama.scores[:n_tokens]), eng
    finally:
        eng.close()


@pytest.mark.engine
@pytest.mark.parametrize("name", [SMOL, GEMMA])
def test_k_center_auto_leaves_models_without_k_bias_bit_identical(model_file, name):
    a, ea = _logits(model_file(name), ctk="turbo4", ctv="turbo4", k_center="auto")
    b, _ = _logits(model_file(name), ctk="turbo4", ctv="turbo4", k_center="off")
    assert str(ea.k_center) == "off" and "no bias" in ea.k_center_reason
    assert np.array_equal(a, b)


@pytest.mark.engine
def test_k_center_auto_centers_qwen_with_a_quantized_k_and_says_why(model_file):
    from tqgguf.runtime import open_model

    eng = open_model(model_file(QWEN), ctk="turbo4", ctv="turbo4", k_center="auto", n_ctx=128, n_threads=2)
    try:
        assert str(eng.k_center) == "full" and eng.report.k_center_active
        assert "attn_k.bias in 24 of 24 layers" in eng.report.k_center_reason
    finally:
        eng.close()


@pytest.mark.engine
def test_gemma_swa_layers_at_f16_keep_the_global_layers_quantized(model_file):
    """--kv-swa f16 on Gemma-3: the engine gives sliding-window layers f16 and the global
    ones (every 6th) the -ctk/-ctv type; the global cache alone is rotated."""
    from tqgguf.runtime import open_model

    eng = open_model(model_file(GEMMA), ctk="turbo3", ctv="turbo3", kv_swa="f16", n_ctx=1024, n_threads=2)
    try:
        r = eng.report
        assert r.kv_plan == "swa:f16/f16"
        layers = dict(part.split(" ", 1) for cache in r.kv_plan_layers.split(" | ") for part in cache.split(", "))
        assert layers.get("5") == "turbo3/turbo3" and layers.get("11") == "turbo3/turbo3"
        assert layers.get("0-4") == "f16/f16"
        # the two caches' report lines: an f16 one and a turbo3 one make a mixed, rotated cache
        assert (r.k_type, r.v_type) == ("mixed", "mixed")
        assert r.attn_rot_k and r.attn_rot_v
    finally:
        eng.close()


def test_kv_plan_cli_refuses_before_loading(model_file):
    from click.testing import CliRunner

    from tqgguf.cli import main

    res = CliRunner().invoke(main, ["ppl", str(model_file(QWEN)), "--kv-plan", "0-1,28-29:q8_0/q8_0", "--chunks", "1"])
    assert res.exit_code != 0 and "has 24 layers (0-23)" in res.output, res.output
    assert not os.environ.get("LLAMA_KV_PLAN")
    res = CliRunner().invoke(main, ["ppl", str(model_file(QWEN)), "--kv-boundary", "abc", "--chunks", "1"])
    assert res.exit_code == 2 and res.output.count("--kv-boundary 'abc'") == 1 and "give N[:K/V]" in res.output, res.output


# ----------------------------------------------------------------------------- tqgguf mix

def _sens(n_layer: int, kld: dict) -> "object":
    from tqgguf.mix import Sensitivity

    return Sensitivity(kld, n_layer, ("q8_0", "turbo3"), 100)


@pytest.mark.engine
def test_mix_choice_is_the_exact_optimum_under_the_budget():
    """The DP against brute force over every assignment of a 2-layer model."""
    import itertools

    from tqgguf.mix import bits_of, choose

    from tqgguf.mix import floors, predict

    rng = np.random.default_rng(0)
    kld = {(il, s, t): float(rng.uniform(0.001, 0.1)) * (1 if t == "q8_0" else 5)
           for il in range(2) for s in "kv" for t in ("q8_0", "turbo3")}
    sens = _sens(2, kld)
    fl = floors(sens)
    assert fl == {s: min(v for (_, side, _), v in kld.items() if side == s) for s in "kv"}
    for budget in (bits_of("turbo3"), 5.0, 8.5, 12.0):
        types, predicted, achieved = choose(sens, budget)
        assert achieved <= budget + 1e-9
        cells = list(itertools.product(range(2), "kv"))
        best = min(  # the objective: sensitivity above the side's floor
            (sum(0 if t == "f16" else kld[(il, s, t)] - fl[s] for (il, s), t in zip(cells, combo)), combo)
            for combo in itertools.product(("f16", "q8_0", "turbo3"), repeat=4)
            if sum(bits_of(t) for t in combo) / 4 <= budget + 1e-9)
        got = {cell: t for cell, t in zip(cells, best[1])}
        mine = {(il, s): pair[0 if s == "k" else 1] for il, pair in enumerate(types) for s in "kv"}
        above = sum(0 if t == "f16" else kld[(il, s, t)] - fl[s] for (il, s), t in mine.items())
        assert above == pytest.approx(best[0])
        # the prediction adds each lowered side's floor once
        assert predicted == pytest.approx(above + sum(fl[s] for s in "kv" if any(
            t != "f16" for (il, side), t in mine.items() if side == s)))
        assert predict(sens, [(got[(il, "k")], got[(il, "v")]) for il in range(2)]) == pytest.approx(
            best[0] + sum(fl[s] for s in "kv" if any(t != "f16" for (il, side), t in got.items() if side == s)))


@pytest.mark.engine
def test_mix_refuses_a_budget_below_the_smallest_type():
    from tqgguf.mix import MixError, bits_of, choose

    with pytest.raises(MixError, match=r"--bits 2 is below the smallest type: turbo3 stores 3\.\d+ bits/value"):
        choose(_sens(1, {}), 2.0)
    assert bits_of("turbo3") > 2.0
    for bad in (float("nan"), float("inf")):  # nan compares false with every bound
        with pytest.raises(MixError, match=r"is not a number of bits per value"):
            choose(_sens(1, {}), bad)


@pytest.mark.engine
def test_mix_refuses_a_calibration_text_shorter_than_one_chunk(model_file):
    from tqgguf.mix import MixError, measure

    with pytest.raises(MixError, match=r"calibration text has \d+ tokens, shorter than one chunk of n_ctx 256"):
        measure(model_file(SMOL), "A short text.", n_ctx=256, n_threads=2)


@pytest.mark.engine
def test_mix_end_to_end_writes_a_plan_for_this_model_only(model_file, tmp_path):
    """SmolLM2, one lowered type, a short calibration: the measurements are stored as they
    come and a rerun resumes; the plan file fits the budget, is applied by --kv-plan, and is
    refused for another model."""
    from tqgguf.kvplan import build_plan
    from tqgguf.mix import choose, measure, measure_plans, store_path, write_plan
    from tqgguf.texts import builtin_corpus

    path = model_file(SMOL)
    store = store_path(tmp_path, path, builtin_corpus(), 32, 1)
    sens = measure(path, builtin_corpus(), types=("turbo3",), n_ctx=32, chunks=1, n_threads=2, store=store)
    assert len(sens.kld) == 60 and all(v >= 0 for v in sens.kld.values())
    # the measurements were written as they came; a rerun after a kill measures only what is missing
    lines = store.read_text().splitlines()
    assert len(lines) == 60
    store.write_text("\n".join(lines[:57]) + "\n" + lines[57][:20])  # the 58th cut mid-line by a kill
    runs = []
    again = measure(path, builtin_corpus(), types=("turbo3",), n_ctx=32, chunks=1, n_threads=2, store=store,
                    progress=runs.append)
    assert [r.split(":")[0] for r in runs] == ["layer 28 V turbo3", "layer 29 K turbo3", "layer 29 V turbo3"]
    assert again.kld == pytest.approx(sens.kld, rel=1e-6, abs=1e-9)
    assert store_path(tmp_path, path, builtin_corpus(), 32, 2) != store  # another chunk count: its own file
    types, predicted, achieved = choose(sens, 8.0)
    assert achieved <= 8.0 and sum(t != "f16" for pair in types for t in pair) >= 30
    doc = write_plan(tmp_path / "p.json", path, types, bits=8.0, predicted=predicted, achieved=achieved, sens=sens,
                     text_label="pydoc")
    # the whole-plan check on the calibration chunks: one layer's plan is exactly its sensitivity
    one, whole = measure_plans(path, builtin_corpus(), ["3:turbo3/f16", doc["plan"]], n_ctx=32, chunks=1, n_threads=2)
    assert one == pytest.approx(sens.kld[(3, "k", "turbo3")], rel=1e-6)
    assert whole > max(sens.kld.values())  # 30+ lowered caches cost more than the worst single one
    plan = build_plan(path, plan=str(tmp_path / "p.json"))
    assert plan.engine_value() == doc["plan"] and plan.n_layer == 30
    with pytest.raises(KVPlanError, match="was made for SmolLM2"):
        build_plan(model_file(QWEN), plan=str(tmp_path / "p.json"))


@pytest.mark.engine
def test_mix_checks_every_uniform_pair_that_fits_the_budget_asymmetric_ones_included():
    from tqgguf.mix import pair_bits, uniform_pairs

    types = ("q8_0", "turbo4", "turbo3")
    assert uniform_pairs(types, 3.5) == [("turbo3", "turbo3")]
    assert uniform_pairs(types, 4.25) == [("turbo4", "turbo4"), ("turbo4", "turbo3"), ("turbo3", "turbo4"),
                                          ("turbo3", "turbo3")]
    at_q8_turbo3 = uniform_pairs(types, pair_bits("q8_0", "turbo3"))
    assert {("q8_0", "turbo3"), ("turbo3", "q8_0")} <= set(at_q8_turbo3) and ("q8_0", "turbo4") not in at_q8_turbo3
    assert len(uniform_pairs(types, 16)) == 16  # every pair of f16, q8_0, turbo4, turbo3
    assert pair_bits("q8_0", "turbo3", 2, 1) == pytest.approx((2 * 8.5 + 3.25) / 3)  # K weighed by its values


@pytest.mark.engine
def test_mix_keeps_a_uniform_pair_that_measures_lower_than_the_optimised_plan(model_file, tmp_path):
    """A sensitivity store that misleads the choice (it says turbo3 K costs less than turbo4
    K) makes the optimised plan put turbo3 in nearly every K cache at 4.25 bits; run on the
    calibration text, that measures worse than uniform turbo4/turbo4, and the plan file
    holds the uniform pair that measured lowest, names it, and says by how much it won."""
    from click.testing import CliRunner

    from tqgguf.cli import main
    from tqgguf.mix import store_path
    from tqgguf.texts import builtin_corpus

    path = model_file(SMOL)
    store = store_path(tmp_path, path, builtin_corpus(), 128, 1)
    # turbo3 K "free", V cheap at turbo4 but dearer in later layers: the K bits saved buy f16 V there
    fake = {("k", "turbo3"): lambda il: 0.001, ("k", "turbo4"): lambda il: 0.002,
            ("v", "turbo4"): lambda il: 0.001 * (1 + il), ("v", "turbo3"): lambda il: 0.1}
    store.write_text("".join(json.dumps({"layer": il, "side": side, "type": t, "kld": f(il)}) + "\n"
                             for il in range(30) for (side, t), f in fake.items()))
    res = CliRunner().invoke(main, ["mix", str(path), "--bits", "4.25", "--types", "turbo4,turbo3", "-c", "128",
                                    "--chunks", "1", "-t", "2", "-o", str(tmp_path / "p-{bits}.json")])
    assert res.exit_code == 0, res.output
    assert "layer 0 K" not in res.output  # the stored (misleading) table was used, nothing re-measured
    doc = json.loads((tmp_path / "p-4.25.json").read_text())
    cands = {c["label"]: c for c in doc["candidates"]}
    assert list(cands) == ["optimised plan", "uniform turbo4/turbo4", "uniform turbo4/turbo3",
                           "uniform turbo3/turbo4", "uniform turbo3/turbo3"]
    opt = cands["optimised plan"]
    k_turbo3 = sum(b - a + 1 for e in parse_map(opt["plan"]) if e.k == "turbo3" for a, b in e.ranges)
    assert k_turbo3 >= 25, opt["plan"]  # misled: turbo3 K nearly everywhere
    assert opt["bits_per_value"] <= 4.25 + 1e-9
    measured = {label: c["measured_calibration_kld"] for label, c in cands.items()}
    assert doc["kept"].startswith("uniform turbo4/")  # K at turbo4 matters most on SmolLM2
    assert measured[doc["kept"]] == min(measured.values()) < measured["optimised plan"]
    assert doc["plan"] == cands[doc["kept"]]["plan"] == f"0-29:{doc['kept'].split()[1]}"
    assert doc["measured_calibration_kld"] == measured[doc["kept"]]
    runner_up = sorted(measured.values())[1]
    assert doc["margin_kld"] == pytest.approx(runner_up - measured[doc["kept"]]) and doc["margin_kld"] > 0
    assert f"kept {doc['kept']}" in res.output and f"kept {doc['kept']}" in doc["kept_by"]
    assert build_plan(path, plan=str(tmp_path / "p-4.25.json")).engine_value() == doc["plan"]


# ----------------------------------------------------------------------------- K-shift

@pytest.mark.engine
def test_k_shift_with_a_mixed_plan_stays_as_close_to_f16_as_the_uniform_cache(model_file, wikitext):
    """SmolLM2, K turbo3 with the boundary layers at q8_0 vs uniform turbo3: after the
    K-shift (per-layer dequantize, RoPE, requantize) the mixed cache is no farther from the
    f16 cache than twice the uniform one's distance, and within twice its own unshifted
    distance (turbo3's own error on 16 positions is noisy, KLD 0.1-0.2; a shift that broke
    the mixed layers lands far outside, cf. the centering mutation test's 0.52)."""
    from tqgguf.quality import tokenize
    from tqgguf.runtime import open_model

    from .test_k_center import _kld, _shift_and_fresh

    path = model_file(SMOL)
    eng = open_model(path, n_ctx=64)
    toks = tokenize(eng, wikitext.content[:20000])[:200]  # the thresholds are for WikiText-2
    eng.close()
    shift_ref, fresh_ref = _shift_and_fresh(path, toks, ctk="f16")
    d = {}
    for name, plan in (("uniform", ""), ("mixed", "0-1,28-29:q8_0/f16")):
        s, f = _shift_and_fresh(path, toks, ctk="turbo3", kv_plan=plan)
        d[name] = (_kld(shift_ref, s), _kld(fresh_ref, f))
    print(f"\nK-shift SmolLM2 turbo3 K: KLD to f16 after shift / fresh: uniform {d['uniform'][0]:.2e} / "
          f"{d['uniform'][1]:.2e}, boundary q8_0 {d['mixed'][0]:.2e} / {d['mixed'][1]:.2e}")
    assert d["mixed"][0] < 2 * d["mixed"][1] + 2e-3
    assert d["mixed"][0] < 2 * d["uniform"][0]


@pytest.mark.engine
def test_sweep_auto_centers_a_plan_that_quantizes_k_under_ctk_f16(model_file, tmp_path):
    """`tqgguf sweep qwen --ctk f16 --ctv f16 --kv-plan PLAN` (how a tqgguf mix plan is
    evaluated): the plan's turbo3 K makes K-center auto resolve to full, as in ppl."""
    from click.testing import CliRunner

    from tqgguf.cli import main

    short = tmp_path / "short.txt"
    short.write_text("Too short for one chunk.")  # stops the run after the resolution is printed
    res = CliRunner().invoke(main, ["sweep", str(model_file(QWEN)), "--ctk", "f16", "--ctv", "f16", "--kv-plan",
                                    "0-1:turbo3/f16", "-f", str(short), "-o", str(tmp_path / "s"), "-t", "1"])
    out = " ".join(res.output.split())
    assert "k-center auto -> full for quantized K" in out and "(turbo3)" in out, out
