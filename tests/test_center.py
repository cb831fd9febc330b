"""``tqgguf center``: data-free K-bias centering of a GGUF.

The Qwen2.5-Coder tests (real model, ~1 min on a loaded 2-core box) check that only the
24 attn_k.bias tensors change and that exactly the slow RoPE pairs are zeroed, with the
periods recomputed here from the GGUF fields. Tiny synthetic GGUFs cover the pairings,
scaling, and every bad input.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

gguf = pytest.importorskip("gguf")

from tqgguf.cli import main  # noqa: E402

KC = "tqgguf.k_center."


def run_cli(*args):
    return CliRunner().invoke(main, ["center", *map(str, args)])


def assert_clean_error(res, *needles):
    """Non-zero exit with a ClickException message, no traceback."""
    assert res.exit_code != 0, res.output
    assert isinstance(res.exception, SystemExit), repr(res.exception)
    assert "Traceback" not in res.output
    for n in needles:
        assert n.lower() in res.output.lower(), res.output


def field(reader, key):
    f = reader.fields.get(key)
    return None if f is None else f.contents()


def field_bytes(f) -> bytes:
    return b"".join(bytes(p) for p in f.parts)


# ----------------------------------------------------------------------------- tiny models

def tiny_gguf(path: Path, *, arch: str = "qwen2", head_dim: int = 32, n_head: int = 4, n_head_kv: int = 2,
              n_layer: int = 2, ctx: int = 256, n_rot: int | None = None, base: float | None = 10000.0,
              k_bias: bool = True, bias_type: str = "F32", attention: bool = True,
              extra_kv: dict | None = None, extra_tensors: dict | None = None, seed: int = 0) -> Path:
    """A small random GGUF; the K bias has a large constant (100 + ...) in every component."""
    n_embd = head_dim * n_head
    n_kv = head_dim * n_head_kv
    n_vocab = 64
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name("tqgguf-center-test")
    w.add_context_length(ctx)
    w.add_embedding_length(n_embd)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(2 * n_embd)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_layer_norm_rms_eps(1e-6)
    if base is not None:
        w.add_rope_freq_base(base)
    if n_rot is not None:
        w.add_rope_dimension_count(n_rot)
    for k, (v, t) in (extra_kv or {}).items():
        w.add_key_value(k, v, t)
    w.add_tokenizer_model("none")
    w.add_vocab_size(n_vocab)
    rng = np.random.default_rng(seed)

    def t(name, *shape):
        w.add_tensor(name, (rng.standard_normal(shape) * 0.02).astype(np.float32))

    t("token_embd.weight", n_vocab, n_embd)
    w.add_tensor("output_norm.weight", np.ones(n_embd, dtype=np.float32))
    for name, arr in (extra_tensors or {}).items():
        w.add_tensor(name, arr)
    for i in range(n_layer):
        w.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(n_embd, dtype=np.float32))
        if attention:
            t(f"blk.{i}.attn_q.weight", n_embd, n_embd)
            t(f"blk.{i}.attn_k.weight", n_kv, n_embd)
            t(f"blk.{i}.attn_v.weight", n_kv, n_embd)
            t(f"blk.{i}.attn_output.weight", n_embd, n_embd)
            if k_bias:
                b = (100.0 + rng.standard_normal(n_kv) * 10).astype(np.float32)
                if bias_type == "F32":
                    w.add_tensor(f"blk.{i}.attn_k.bias", b)
                elif bias_type == "F16":
                    w.add_tensor(f"blk.{i}.attn_k.bias", b.astype(np.float16))
                else:
                    qt = gguf.GGMLQuantizationType[bias_type]
                    w.add_tensor(f"blk.{i}.attn_k.bias", gguf.quants.quantize(b.reshape(1, -1), qt),
                                 raw_dtype=qt)
        w.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(n_embd, dtype=np.float32))
        t(f"blk.{i}.ffn_up.weight", 2 * n_embd, n_embd)
        t(f"blk.{i}.ffn_down.weight", n_embd, 2 * n_embd)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def expected_mask(*, head_dim, n_rot, base, ctx, neox, factor=1.0, freq_factors=None):
    """Independent recomputation: which head dims a centering at ``ctx`` must zero."""
    mask = np.zeros(head_dim, dtype=bool)
    for i in range(n_rot // 2):
        theta = base ** (-2.0 * i / n_rot) / factor
        if freq_factors is not None:
            theta /= freq_factors[i]
        if 2 * math.pi / theta > ctx:
            dims = (i, i + n_rot // 2) if neox else (2 * i, 2 * i + 1)
            mask[list(dims)] = True
    mask[n_rot:] = True
    return mask


def check_zeroed(src, out, mask: np.ndarray) -> int:
    """Every attn_k.bias of ``out`` equals ``src`` with exactly ``mask`` (per head) zeroed;
    every other tensor is byte-identical (``src``/``out``: paths or GGUFReaders). Returns
    the number of biases checked."""
    a = src if isinstance(src, gguf.GGUFReader) else gguf.GGUFReader(src)
    b = out if isinstance(out, gguf.GGUFReader) else gguf.GGUFReader(out)
    n = 0
    for ta, tb in zip(a.tensors, b.tensors, strict=True):
        assert ta.name == tb.name and ta.tensor_type == tb.tensor_type
        if ta.name.endswith("attn_k.bias"):
            x = np.asarray(ta.data, dtype=np.float64).reshape(-1, mask.size)
            y = np.asarray(tb.data, dtype=np.float64).reshape(-1, mask.size)
            assert np.all(y[:, mask] == 0)
            assert np.array_equal(y[:, ~mask], x[:, ~mask])
            n += 1
        else:
            assert bytes(ta.data) == bytes(tb.data), ta.name
    return n


# ----------------------------------------------------------------------------- synthetic: geometry

@pytest.mark.parametrize("arch,neox", [("qwen2", True), ("llama", False)])
def test_tiny_pairing_neox_vs_interleaved(tmp_path, arch, neox):
    src = tiny_gguf(tmp_path / "m.gguf", arch=arch, head_dim=32, n_head=4, n_head_kv=4 if arch == "llama" else 2)
    out = tmp_path / "c.gguf"
    res = run_cli(src, "-o", out)
    assert res.exit_code == 0, res.output
    mask = expected_mask(head_dim=32, n_rot=32, base=10000.0, ctx=256, neox=neox)
    assert 0 < mask.sum() < 32
    assert check_zeroed(src, out, mask) == 2
    r = gguf.GGUFReader(out)
    assert field(r, KC + "rope_pairing") == ("neox" if neox else "norm")
    assert field(r, KC + "ctx") == 256
    assert field(r, KC + "pairs_removed") == [int(mask.sum()) // 2 * (2 if neox else 4)] * 2


def test_tiny_ctx_option_and_partial_rotary(tmp_path):
    src = tiny_gguf(tmp_path / "m.gguf", head_dim=32, n_rot=16)
    out = tmp_path / "c.gguf"
    res = run_cli(src, "-o", out, "--ctx", 64)
    assert res.exit_code == 0, res.output
    mask = expected_mask(head_dim=32, n_rot=16, base=10000.0, ctx=64, neox=True)
    assert mask[16:].all() and mask[:16].any() and not mask[:16].all()
    check_zeroed(src, out, mask)
    r = gguf.GGUFReader(out)
    assert field(r, KC + "ctx") == 64 and field(r, KC + "unrotated_dims") == 16


def test_tiny_linear_scaling_and_freq_factors(tmp_path):
    T = gguf.GGUFValueType
    ff = np.linspace(1.0, 8.0, 16).astype(np.float32)
    src = tiny_gguf(tmp_path / "m.gguf", head_dim=32, extra_kv={
        "qwen2.rope.scaling.type": ("linear", T.STRING), "qwen2.rope.scaling.factor": (4.0, T.FLOAT32)},
        extra_tensors={"rope_freqs.weight": ff})
    out = tmp_path / "c.gguf"
    assert run_cli(src, "-o", out).exit_code == 0
    mask = expected_mask(head_dim=32, n_rot=32, base=10000.0, ctx=256, neox=True, factor=4.0, freq_factors=ff)
    assert mask.sum() > expected_mask(head_dim=32, n_rot=32, base=10000.0, ctx=256, neox=True).sum()
    check_zeroed(src, out, mask)


def test_tiny_yarn_matches_ggml_formula(tmp_path):
    """YaRN interpolates the slow pairs by the factor; fast pairs keep their speed."""
    from tqgguf.center import Rope, ROPE_NEOX

    r = Rope(arch="x", rope_type=ROPE_NEOX, rope_type_source="table", head_dim=64, n_rot=64, freq_base=10000.0,
             scaling="yarn", factor=4.0, n_ctx_train=4096, n_ctx_orig=1024, yarn_ext_factor=1.0,
             yarn_beta_fast=32.0, yarn_beta_slow=1.0)
    base_theta = 10000.0 ** (-2.0 * np.arange(32) / 64)
    th = r.theta()
    assert np.isclose(th[0], base_theta[0])          # fastest pair: extrapolated (unchanged)
    assert np.isclose(th[-1], base_theta[-1] / 4.0)  # slowest pair: interpolated by the factor
    assert np.all(np.diff(th) < 0)


def test_f16_bias_is_supported(tmp_path):
    src = tiny_gguf(tmp_path / "m.gguf", bias_type="F16")
    out = tmp_path / "c.gguf"
    res = run_cli(src, "-o", out)
    assert res.exit_code == 0, res.output
    check_zeroed(src, out, expected_mask(head_dim=32, n_rot=32, base=10000.0, ctx=256, neox=True))


def test_dry_run_writes_nothing(tmp_path):
    src = tiny_gguf(tmp_path / "m.gguf")
    res = run_cli(src, "-n")
    assert res.exit_code == 0, res.output
    assert "dry run" in res.output
    res = run_cli(src, "--dry-run", "-o", tmp_path / "c.gguf")
    assert res.exit_code == 0 and not (tmp_path / "c.gguf").exists()


# ----------------------------------------------------------------------------- bad input

def test_missing_output_is_a_usage_error(tmp_path):
    res = run_cli(tiny_gguf(tmp_path / "m.gguf"))
    assert res.exit_code == 2 and "--output" in res.output


def test_not_a_gguf(tmp_path):
    src = tmp_path / "notes.gguf"
    src.write_text("hello, I am not a model\n")
    res = run_cli(src, "-o", tmp_path / "c.gguf")
    assert_clean_error(res, "not a GGUF")
    assert not (tmp_path / "c.gguf").exists()


@pytest.mark.parametrize("keep", [0.5, 0.98, 24])
def test_truncated_gguf(tmp_path, keep):
    src = tiny_gguf(tmp_path / "m.gguf")
    raw = src.read_bytes()
    n = keep if isinstance(keep, int) else int(len(raw) * keep)
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(raw[:n])
    res = run_cli(cut, "-o", tmp_path / "c.gguf")
    assert_clean_error(res)
    assert "truncated" in res.output.lower() or "corrupt" in res.output.lower(), res.output
    assert not (tmp_path / "c.gguf").exists()


def test_no_attention_layers(tmp_path):
    src = tiny_gguf(tmp_path / "m.gguf", attention=False)
    res = run_cli(src, "-o", tmp_path / "c.gguf")
    assert_clean_error(res, "no attention layers")


def test_output_equal_to_input(tmp_path):
    src = tiny_gguf(tmp_path / "m.gguf")
    before = src.read_bytes()
    for out in (src, tmp_path / "sub" / ".." / "m.gguf"):
        (tmp_path / "sub").mkdir(exist_ok=True)
        res = run_cli(src, "-o", out, "--force")
        assert_clean_error(res, "is the input")
    assert src.read_bytes() == before


def test_output_exists_needs_force(tmp_path):
    src = tiny_gguf(tmp_path / "m.gguf")
    out = tmp_path / "c.gguf"
    out.write_bytes(b"keep me")
    res = run_cli(src, "-o", out)
    assert_clean_error(res, "exists", "--force")
    assert out.read_bytes() == b"keep me"
    res = run_cli(src, "-o", out, "--force")
    assert res.exit_code == 0, res.output
    assert gguf.GGUFReader(out).fields[KC + "ctx"].contents() == 256


def test_already_centered(tmp_path):
    src = tiny_gguf(tmp_path / "m.gguf")
    once = tmp_path / "c1.gguf"
    assert run_cli(src, "-o", once).exit_code == 0
    res = run_cli(once, "-o", tmp_path / "c2.gguf")
    assert_clean_error(res, "already K-centered")
    assert not (tmp_path / "c2.gguf").exists()


@pytest.mark.parametrize("qtype", ["Q8_0", "Q4_0"])
def test_quantized_bias(tmp_path, qtype):
    src = tiny_gguf(tmp_path / "m.gguf", bias_type=qtype)
    res = run_cli(src, "-o", tmp_path / "c.gguf")
    assert_clean_error(res, qtype, "F32/F16")
    assert not (tmp_path / "c.gguf").exists()


@pytest.mark.parametrize("stype,needle", [("longrope", "LongRoPE"), ("weird", "unknown RoPE scaling type 'weird'")])
def test_unsupported_rope_scaling(tmp_path, stype, needle):
    src = tiny_gguf(tmp_path / "m.gguf", extra_kv={"qwen2.rope.scaling.type": (stype, gguf.GGUFValueType.STRING)})
    res = run_cli(src, "-o", tmp_path / "c.gguf")
    assert_clean_error(res, needle)


def test_fused_qkv_bias_is_refused_not_ignored(tmp_path):
    src = tiny_gguf(tmp_path / "m.gguf", k_bias=False,
                    extra_tensors={"blk.0.attn_qkv.bias": np.ones(256, dtype=np.float32)})
    res = run_cli(src, "-o", tmp_path / "c.gguf")
    assert_clean_error(res, "attn_qkv.bias")


def test_unknown_arch_without_engine_is_refused(tmp_path, monkeypatch):
    from tqgguf import center

    monkeypatch.setattr(center, "llama_rope_type", lambda path: None)
    src = tiny_gguf(tmp_path / "m.gguf", arch="madeup")
    res = run_cli(src, "-o", tmp_path / "c.gguf")
    assert_clean_error(res, "unknown RoPE pairing", "madeup")


def test_fallback_table_agrees_for_qwen2_and_llama(tmp_path, monkeypatch):
    from tqgguf import center

    monkeypatch.setattr(center, "llama_rope_type", lambda path: None)
    for arch, pairing in (("qwen2", "neox"), ("llama", "norm")):
        src = tiny_gguf(tmp_path / f"{arch}.gguf", arch=arch, n_head_kv=4)
        plan = center.plan_center(src)
        assert plan.rope.pairing == pairing and plan.rope.rope_type_source == "table"


# ----------------------------------------------------------------------------- real models

@pytest.fixture(scope="module")
def qwen(model_file):
    return model_file("qwen2.5-coder-0.5b")


@pytest.fixture(scope="module")
def qwen_centered(qwen, tmp_path_factory):
    out = tmp_path_factory.mktemp("center") / "qwen-centered.gguf"
    res = run_cli(qwen, "-o", out)
    assert res.exit_code == 0, res.output
    assert "wrote" in res.output and "24 attn_k.bias" in res.output
    return out


@pytest.fixture(scope="module")
def qwen_readers(qwen, qwen_centered):
    """GGUFReaders of the original and the centered file (each takes ~10-20 s: the vocab)."""
    return gguf.GGUFReader(qwen), gguf.GGUFReader(qwen_centered)


@pytest.mark.slow
def test_qwen_only_k_biases_differ(qwen_readers):
    a, b = qwen_readers
    # KV fields: same keys in the same order, byte-identical, plus the tqgguf.k_center.* keys
    ka = [k for k in a.fields if k != "GGUF.kv_count"]
    kb = [k for k in b.fields if k != "GGUF.kv_count"]
    added = [k for k in kb if k.startswith(KC)]
    assert {KC + "ctx", KC + "pairs_removed", KC + "norm_before", KC + "norm_after"} <= set(added)
    assert [k for k in kb if not k.startswith(KC)] == ka
    for k in ka:
        assert field_bytes(a.fields[k]) == field_bytes(b.fields[k]), k
    assert int(b.fields["GGUF.kv_count"].contents()) == int(a.fields["GGUF.kv_count"].contents()) + len(added)
    assert a.alignment == b.alignment
    # tensors: same order, types, shapes, relative offsets; bytes differ only for attn_k.bias
    assert [t.name for t in a.tensors] == [t.name for t in b.tensors]
    differ = []
    for ta, tb in zip(a.tensors, b.tensors):
        assert ta.tensor_type == tb.tensor_type and list(ta.shape) == list(tb.shape), ta.name
        assert ta.n_bytes == tb.n_bytes
        assert int(ta.field.parts[-1][0]) == int(tb.field.parts[-1][0]), ta.name  # offset in data section
        if not np.array_equal(np.asarray(ta.data).view(np.uint8), np.asarray(tb.data).view(np.uint8)):
            differ.append(ta.name)
    assert sorted(differ) == sorted(f"blk.{i}.attn_k.bias" for i in range(24))


@pytest.mark.slow
def test_qwen_removed_components_are_the_slow_pairs(qwen_readers):
    a, b = qwen_readers
    arch = field(a, "general.architecture")
    assert arch == "qwen2"
    base = field(a, "qwen2.rope.freq_base")
    ctx = field(a, "qwen2.context_length")
    head_dim = field(a, "qwen2.embedding_length") // field(a, "qwen2.attention.head_count")
    n_rot = field(a, "qwen2.rope.dimension_count") or head_dim
    assert (head_dim, n_rot, ctx, base) == (64, 64, 32768, 1e6)
    # qwen2 ropes NEOX-style: pair i is (i, i + n_rot/2); period 2*pi*base^(2i/n_rot)
    periods = [2 * math.pi * base ** (2 * i / n_rot) for i in range(n_rot // 2)]
    slow = [i for i, p in enumerate(periods) if p > ctx]
    assert slow == list(range(20, 32))
    mask = expected_mask(head_dim=64, n_rot=64, base=base, ctx=ctx, neox=True)
    assert sorted(np.nonzero(mask)[0]) == sorted(slow + [i + 32 for i in slow])
    assert check_zeroed(a, b, mask) == 24
    # the recorded metadata matches what was done
    assert field(b, KC + "ctx") == ctx
    assert field(b, KC + "pairs") == slow
    assert field(b, KC + "pairs_removed") == [len(slow) * 2] * 24
    assert field(b, KC + "rope_pairing") == "neox"
    before = np.array(field(b, KC + "norm_before"))
    after = np.array(field(b, KC + "norm_after"))
    removed = np.array(field(b, KC + "norm_removed"))
    for layer in range(24):
        x = np.asarray(a.tensors[[t.name for t in a.tensors].index(f"blk.{layer}.attn_k.bias")].data, np.float64)
        assert np.isclose(before[layer], np.linalg.norm(x), rtol=1e-6)
    assert np.allclose(before ** 2, after ** 2 + removed ** 2, rtol=1e-5)
    assert before.max() > 250 and after.max() < 100  # the constant part really is what dominates


@pytest.mark.engine
def test_llama_cpp_reports_the_pairing(qwen, model_file):
    from tqgguf.center import ROPE_NEOX, ROPE_NORM, llama_rope_type

    assert llama_rope_type(qwen) == ROPE_NEOX
    assert llama_rope_type(model_file("smollm2-135m")) == ROPE_NORM


@pytest.mark.engine
@pytest.mark.slow
def test_qwen_centered_loads_in_the_engine(qwen_centered):
    from tqgguf.runtime import open_model

    eng = open_model(qwen_centered, n_ctx=256)
    try:
        assert eng.llama.n_ctx() == 256
    finally:
        eng.close()


def test_smollm2_nothing_to_do(tmp_path, model_file):
    smol = model_file("smollm2-135m")
    out = tmp_path / "smol-centered.gguf"
    res = run_cli(smol, "-o", out)
    assert res.exit_code == 0, res.output
    assert "nothing to do" in res.output.lower()
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_drift_is_the_rotation_of_the_removed_part():
    """removed_drift = max over d <= ctx of |R(d) b_removed - b_removed|, by brute force."""
    from tqgguf.center import ROPE_NEOX, ROPE_NORM, Rope, removed_drift, slow_mask

    rng = np.random.default_rng(1)
    for rt in (ROPE_NEOX, ROPE_NORM):
        r = Rope(arch="x", rope_type=rt, rope_type_source="table", head_dim=32, n_rot=24, freq_base=10000.0,
                 scaling="none", factor=1.0, n_ctx_train=256, n_ctx_orig=256, yarn_ext_factor=0.0,
                 yarn_beta_fast=32.0, yarn_beta_slow=1.0)
        mask, slow, periods = slow_mask(r, 256)
        heads = rng.standard_normal((2, 32)) * 50
        removed = np.where(mask, heads, 0.0)
        best = 0.0
        for d in range(257):
            rot = removed.copy()
            for i in slow:
                a, c = r.pair_dims(i)
                ang = 2 * math.pi / periods[i] * d
                rot[:, a] = removed[:, a] * math.cos(ang) - removed[:, c] * math.sin(ang)
                rot[:, c] = removed[:, a] * math.sin(ang) + removed[:, c] * math.cos(ang)
            best = max(best, float(np.linalg.norm(rot - removed)))
        assert math.isclose(removed_drift(r, heads, slow, periods, 256), best, rel_tol=1e-9)
        assert 0 < best < 2 * np.linalg.norm(removed)


def test_unwritable_output_is_a_clean_error(tmp_path):
    src = tiny_gguf(tmp_path / "m.gguf")
    res = run_cli(src, "-o", "/proc/x.gguf")
    assert_clean_error(res, "cannot write")
