"""tqgguf.shapes: real model shapes as random-weight GGUF files (speed only) — the registry
against the models' published sizes and llama.cpp's tensor rules, the written file, loading
it in the engine, and the refusal of quality verbs."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import gguf
import numpy as np
import pytest
from click.testing import CliRunner

from tqgguf import shapes as S
from tqgguf.cli import main as cli

ROOT = Path(__file__).resolve().parents[1]

#: total parameters of the real models (their model cards / safetensors index, HF counting:
#: embeddings, linear weights, biases and norms; rope_freqs is a buffer, not a parameter)
PUBLISHED_PARAMS = {
    "llama-3.1-8b": 8_030_261_248,
    "llama-3.2-1b": 1_235_814_400,
    "qwen2.5-7b": 7_615_616_512,
    "llama-3.1-70b-slice": 70_553_706_496,  # the whole 70B: 80 layers
}


def _arch_rules(s: S.Shape, n_layer: int) -> dict[str, tuple[int, ...]]:
    """What llama.cpp's load_arch_tensors (src/models/{llama,qwen2,gemma3}.cpp) creates, as
    name -> ggml shape (ne0 first), for the tensors a real GGUF of the model has."""
    e, hd, ff, v = s.n_embd, s.head_dim, s.n_ff, s.n_vocab
    q, kv = s.n_head * hd, s.n_head_kv * hd
    out = {"token_embd.weight": (e, v), "output_norm.weight": (e,)}
    if not s.tied_embeddings:
        out["output.weight"] = (e, v)
    if s.arch == "llama":
        out["rope_freqs.weight"] = (hd // 2,)  # Llama 3's rope_scaling, TENSOR_NOT_REQUIRED but in every GGUF
    for i in range(n_layer):
        b = f"blk.{i}."
        out |= {b + "attn_norm.weight": (e,), b + "attn_q.weight": (e, q), b + "attn_k.weight": (e, kv),
                b + "attn_v.weight": (e, kv), b + "attn_output.weight": (q, e), b + "ffn_norm.weight": (e,),
                b + "ffn_gate.weight": (e, ff), b + "ffn_up.weight": (e, ff), b + "ffn_down.weight": (ff, e)}
        if s.arch == "qwen2":
            out |= {b + "attn_q.bias": (q,), b + "attn_k.bias": (kv,), b + "attn_v.bias": (kv,)}
        if s.arch == "gemma3":
            out |= {b + "attn_q_norm.weight": (hd,), b + "attn_k_norm.weight": (hd,),
                    b + "post_attention_norm.weight": (e,), b + "post_ffw_norm.weight": (e,)}
    return out


@pytest.mark.parametrize("name", list(S.SHAPES))
@pytest.mark.parametrize("n_layer", [1, 2])
def test_every_shape_has_exactly_the_tensors_llama_cpp_loads_for_its_arch(name, n_layer):
    s = S.SHAPES[name]
    plan = S.tensor_plan(s, n_layer)
    assert {t.name: t.ne for t in plan} == _arch_rules(s, n_layer)
    assert len(plan) == len({t.name for t in plan})
    # every name is one gguf-py allows for the architecture (its MODEL_TENSORS table)
    arch = next(a for a, n in gguf.MODEL_ARCH_NAMES.items() if n == s.arch)
    allowed = {gguf.TENSOR_NAMES[t] for t in gguf.MODEL_TENSORS[arch]}
    assert {t.name.rsplit(".", 1)[0].replace(".0.", ".{bid}.").replace(".1.", ".{bid}.") for t in plan} <= allowed


@pytest.mark.parametrize("name", list(PUBLISHED_PARAMS))
def test_full_shapes_have_the_published_parameter_count(name):
    s = S.SHAPES[name]
    n = sum(t.n_elements for t in S.tensor_plan(s, s.layers_of_source or s.n_layer) if t.fill != "rope_freqs")
    assert n == PUBLISHED_PARAMS[name]


def test_shapes_state_what_the_brief_names():
    q = S.SHAPES["qwen2.5-7b"]
    assert (q.n_head, q.n_head_kv, q.qkv_bias) == (28, 4, True)
    g = S.SHAPES["gemma-3-4b"]
    assert g.head_dim == 256 and g.sliding_window == 1024
    assert g.swa_layers(12) == [0, 1, 2, 3, 4, 6, 7, 8, 9, 10]  # llama.cpp's pattern 6: every 6th layer global
    sl = S.SHAPES["llama-3.1-70b-slice"]
    assert (sl.n_embd, sl.n_ff, sl.layers_of_source) == (8192, 28672, 80) and sl.n_layer < 80
    assert all("config.json" in s.source for s in S.SHAPES.values())


def test_llama3_rope_factors_follow_the_scaling_rule():
    f = S.llama3_rope_factors(128, 500000.0, 8.0, 1.0, 4.0, 8192)
    assert f.shape == (64,) and f.dtype == np.float32
    assert f[0] == 1.0 and f[-1] == 8.0  # highest frequency kept, lowest divided by the factor
    assert np.all(np.diff(f) >= 0) and 1.0 < f[(f > 1) & (f < 8)].mean() < 8.0


@pytest.fixture(scope="module")
def small(tmp_path_factory) -> Path:
    """llama-3.2-1b with 2 layers (220 MB: the 128256 x 2048 embedding dominates)."""
    return S.write_shape("llama-3.2-1b", tmp_path_factory.mktemp("shape") / "l1b.gguf", n_layers=2)


def test_the_written_file_holds_the_plan_and_says_speed_only(small):
    r = gguf.GGUFReader(str(small))
    plan = S.tensor_plan(S.SHAPES["llama-3.2-1b"], 2)
    assert [(t.name, tuple(int(x) for x in t.shape), t.tensor_type.name.lower(), int(t.n_bytes)) for t in r.tensors] \
        == [(t.name, t.ne, t.type, t.nbytes) for t in plan]
    last = r.tensors[-1]
    assert last.data_offset + last.n_bytes <= small.stat().st_size
    field = r.fields[S.SPEED_ONLY_KEY]
    assert bool(field.parts[field.data[0]][0]) is True
    name = bytes(r.fields["general.name"].parts[-1]).decode()
    assert "random weights, speed only" in name
    assert int(r.fields["llama.block_count"].parts[-1][0]) == 2
    assert len(r.fields["tokenizer.ggml.tokens"].data) == 128256
    # q4_0 blocks: the scale of a 2048-wide row makes a unit-RMS input give RMS ~1 outputs
    q = next(t for t in r.tensors if t.name == "blk.0.attn_q.weight")
    blocks = np.frombuffer(bytes(q.data[:18 * 64]), dtype=[("d", "<f2"), ("qs", "u1", (16,))])
    assert np.allclose(blocks["d"].astype(np.float32), 1 / (4.61 * np.sqrt(2048)), rtol=1e-2)
    assert len(np.unique(blocks["qs"])) > 200  # random nibbles, not a constant


def test_a_bad_name_weight_type_or_layer_count_is_refused_with_the_allowed_values(tmp_path):
    with pytest.raises(S.ShapeError, match="allowed: llama-3.1-8b, llama-3.2-1b, qwen2.5-7b"):
        S.write_shape("llama-3.1-9b", tmp_path / "x.gguf")
    with pytest.raises(S.ShapeError, match="allowed: q4_0, q8_0, f16"):
        S.write_shape("llama-3.2-1b", tmp_path / "x.gguf", weight_type="q2_k")
    with pytest.raises(S.ShapeError, match="at least 1 layer"):
        S.write_shape("llama-3.2-1b", tmp_path / "x.gguf", n_layers=0)
    with pytest.raises(S.ShapeError, match="at least 259 tokens"):
        S.write_shape("llama-3.2-1b", tmp_path / "x.gguf", n_layers=1, n_vocab=258)
    assert list(tmp_path.iterdir()) == []


def test_another_vocabulary_size_changes_the_embedding_output_and_tokenizer(tmp_path):
    """n_vocab (write_shape.py --vocab): the output layer's share of a step, measured apart."""
    path = S.write_shape("llama-3.1-8b", tmp_path / "v.gguf", n_layers=1, n_vocab=1000)
    r = gguf.GGUFReader(str(path))
    shapes = {t.name: tuple(int(x) for x in t.shape) for t in r.tensors}
    assert shapes["token_embd.weight"] == shapes["output.weight"] == (4096, 1000)
    assert int(r.fields["llama.vocab_size"].parts[-1][0]) == 1000
    assert len(r.fields["tokenizer.ggml.tokens"].data) == 1000


def test_the_gpu_script_runs_with_numpy_and_gguf_only(tmp_path):
    """scripts/gpu/write_shape.py with click, pydantic, rich, fastapi and matplotlib made unimportable."""
    blocker = (
        "import sys, importlib.abc\n"
        "class Block(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path, target=None):\n"
        "        if name.split('.')[0] in {'click', 'pydantic', 'pydantic_core', 'rich', 'fastapi', 'uvicorn',"
        " 'matplotlib', 'llama_cpp'}:\n"
        "            raise ImportError(f'{name} is blocked')\n"
        "sys.meta_path.insert(0, Block())\n"
        "sys.argv = ['write_shape.py'] + sys.argv[1:]\n"
        f"import runpy; runpy.run_path({str(ROOT / 'scripts/gpu/write_shape.py')!r}, run_name='__main__')\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = tmp_path / "s.gguf"
    p = subprocess.run([sys.executable, "-c", blocker, "llama-3.2-1b", str(out), "--layers", "1"],
                       capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 0, p.stderr
    assert "speed only" in p.stdout and out.stat().st_size > 100e6
    bad = subprocess.run([sys.executable, "-c", blocker, "llama-9b", str(out)], capture_output=True, text=True, env=env)
    assert bad.returncode == 2 and "allowed: llama-3.1-8b" in bad.stderr


def test_ppl_refuses_a_speed_only_file_naming_the_key(small, tmp_path):
    text = tmp_path / "t.txt"
    text.write_text("hello world " * 200)
    res = CliRunner().invoke(cli, ["ppl", str(small), "-f", str(text)])
    assert res.exit_code == 1
    assert f"{S.SPEED_ONLY_KEY} = true" in res.output and "perplexity and KL divergence mean nothing" in res.output


@pytest.mark.parametrize("verb", ["ppl", "sweep", "mix"])
def test_quality_verbs_refuse_a_shape_name_before_writing_it(verb, tmp_path, monkeypatch):
    monkeypatch.setenv("TQGGUF_MODELS", str(tmp_path))
    text = tmp_path / "t.txt"
    text.write_text("hello world " * 200)
    res = CliRunner().invoke(cli, [verb, "shape:llama-3.1-8b", "-f", str(text)] + (["--bits", "4"] if verb == "mix" else []))
    assert res.exit_code in (1, 2), res.output
    assert S.SPEED_ONLY_KEY in res.output and f"tqgguf {verb}" in res.output
    assert not (tmp_path / "shapes").exists()


def test_bench_names_the_allowed_shapes_for_an_unknown_one(tmp_path, monkeypatch):
    monkeypatch.setenv("TQGGUF_MODELS", str(tmp_path))
    res = CliRunner().invoke(cli, ["bench", "shape:llama-3.1-9b", "--dir", str(tmp_path / "b")])
    assert res.exit_code == 2
    assert "allowed: llama-3.1-8b, llama-3.2-1b, qwen2.5-7b, gemma-3-4b, llama-3.1-70b-slice" in res.output


# -- with the engine -------------------------------------------------------------------

def _load(path: Path):
    import llama_cpp

    from tqgguf.engine import ensure_engine

    ensure_engine()
    params = llama_cpp.llama_model_default_params()
    m = llama_cpp.llama_model_load_from_file(str(path).encode(), params)
    assert m, f"llama.cpp could not load {path}"
    return llama_cpp, m


@pytest.mark.engine
def test_the_engine_loads_the_shape_and_decodes(small):
    from contextlib import closing

    from tqgguf.runtime import open_context, open_model

    lc, m = _load(small)
    try:
        assert (lc.llama_model_n_layer(m), lc.llama_model_n_head_kv(m), lc.llama_model_n_embd(m)) == (2, 8, 2048)
        assert lc.llama_model_n_head(m) == 32
        assert lc.llama_vocab_n_tokens(lc.llama_model_get_vocab(m)) == 128256
    finally:
        lc.llama_model_free(m)
    eng = open_model(small, ctk="turbo4", ctv="turbo4", n_ctx=64, n_threads=2)
    try:
        with closing(open_context(eng, n_ctx=64, n_batch=16, n_ubatch=16)) as ctx:
            import ctypes

            toks = (ctypes.c_int32 * 8)(1, 300, 301, 302, 303, 304, 305, 306)
            assert lc.llama_decode(ctx.ctx, lc.llama_batch_get_one(toks, 8)) == 0
            logits = np.ctypeslib.as_array(lc.llama_get_logits_ith(ctx.ctx, -1), shape=(128256,))
            assert np.isfinite(logits).all() and logits.std() > 0
            mem = lc.llama_get_memory(ctx.ctx)
            assert lc.llama_memory_seq_pos_max(mem, 0) == 7
    finally:
        eng.close()


@pytest.mark.engine
@pytest.mark.parametrize("name,n_layer,facts", [
    ("qwen2.5-7b", 1, (1, 4, 3584, 28)),
    ("gemma-3-4b", 6, (6, 4, 2560, 8)),  # 5 window layers and 1 global
])
def test_the_engine_loads_the_other_architectures(name, n_layer, facts, tmp_path):
    path = S.write_shape(name, tmp_path / f"{name}.gguf", n_layers=n_layer)
    lc, m = _load(path)
    try:
        got = (lc.llama_model_n_layer(m), lc.llama_model_n_head_kv(m), lc.llama_model_n_embd(m), lc.llama_model_n_head(m))
        assert got == facts
        if name == "gemma-3-4b":
            assert lc.llama_model_n_swa(m) == 1024
    finally:
        lc.llama_model_free(m)


@pytest.mark.engine
def test_bench_marks_a_shape_s_rows_and_table_as_speed_only(small, tmp_path):
    from tqgguf.bench.report import markdown, table_title
    from tqgguf.bench.runner import run_bench
    from tqgguf.bench.spec import BenchSpec, configs_of, expand, validate

    spec = BenchSpec(model=small, tests=expand(["f16"], ["f16"], ["auto"], [0], [1], [0]),
                     configs=configs_of(["f16"], ["f16"], ["auto"]), reps=1, n_threads=2, out_dir=tmp_path)
    validate(spec)
    rows = run_bench(spec)
    assert rows[0]["speed_only"] is True
    assert markdown(rows).splitlines()[2].startswith("| llama ?B Q4_0 (speed only)")
    assert table_title(small, rows) == f"model: {small.name} (random weights, speed only)"
