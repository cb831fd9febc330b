"""`tqgguf ppl` and the runtime on a real model and real text: KV sizes, rotation, bad input."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from tqgguf.cli import main as cli
from tqgguf.texts import resolve_text

from .synthetic import tiny_llama_gguf

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.engine


@pytest.fixture(scope="module")
def smollm2(model_file) -> Path:
    return model_file("smollm2-135m")


@pytest.fixture(scope="module")
def wiki(wikitext) -> Path:
    return wikitext.path


def _kv_dims(path: Path) -> tuple[int, int]:
    """(n_layer, n_embd_k_gqa) from the GGUF metadata."""
    import gguf

    r = gguf.GGUFReader(str(path))
    arch = bytes(r.fields["general.architecture"].parts[-1]).decode()

    def val(key):
        f = r.fields[f"{arch}.{key}"]
        return int(f.parts[f.data[0]][0])

    n_layer, n_embd, n_head, n_head_kv = (val(k) for k in ("block_count", "embedding_length", "attention.head_count",
                                                             "attention.head_count_kv"))
    return n_layer, n_embd // n_head * n_head_kv


@pytest.mark.parametrize("ctk,ctv", [("turbo4", "turbo3"), ("turbo3", "turbo4"), ("f16", "q8_0"), ("turbo2", "turbo2")])
def test_kv_buffers_llama_cpp_allocates_match_the_format_bits(smollm2, ctk, ctv):
    from tqgguf.cachetypes import type_info
    from tqgguf.runtime import open_model

    n_ctx = 4096
    eng = open_model(smollm2, ctk=ctk, ctv=ctv, n_ctx=n_ctx)
    try:
        n_layer, n_embd_kv = _kv_dims(smollm2)
        for t, got in ((ctk, eng.report.k_mib), (ctv, eng.report.v_mib)):
            want = n_layer * n_embd_kv * n_ctx * type_info(t).bits_per_value / 8 / 2**20
            assert got == pytest.approx(want, abs=0.006), (t, got, want)  # llama.cpp prints 2 decimals
        assert (eng.report.k_type, eng.report.v_type) == (ctk, ctv)
        # the exact bytes per token, counted from the types and the header, not from the rounded MiB
        row = lambda t: n_embd_kv // type_info(t).block_size * type_info(t).type_size  # noqa: E731
        assert eng.report.kv_bytes_per_token == n_layer * (row(ctk) + row(ctv))
        assert eng.report.kv_bytes_per_token * n_ctx / 2**20 == pytest.approx(
            eng.report.k_mib + eng.report.v_mib, abs=0.011)
        assert eng.report.bits_per_value == (type_info(ctk).bits_per_value + type_info(ctv).bits_per_value) / 2
    finally:
        eng.close()
    assert type_info("turbo4").bits_per_value == 4.25 and type_info("turbo3").bits_per_value == 3.25


def _ppl(args, tmp_path, name) -> dict:
    out = tmp_path / f"{name}.json"
    res = CliRunner().invoke(cli, ["ppl", *args, "--json", str(out)])
    assert res.exit_code == 0, (res.output, res.exception)
    assert "Final estimate: PPL = " in res.output
    assert "[1]" in res.output and "[3]" in res.output
    return json.loads(out.read_text())


def test_ppl_reports_rotation_flags_and_orders_configurations_sensibly(smollm2, wiki, tmp_path):
    common = [str(smollm2), "-f", str(wiki), "-c", "256", "--chunks", "3"]
    f16 = _ppl(common, tmp_path, "f16")
    q8 = _ppl(common + ["--ctk", "q8_0", "--ctv", "q8_0"], tmp_path, "q8")
    t4 = _ppl(common + ["--ctk", "turbo4", "--ctv", "turbo4"], tmp_path, "t4")
    t4_off = _ppl(common + ["--ctk", "turbo4", "--ctv", "turbo4", "--no-rot"], tmp_path, "t4off")
    assert 5 < f16["ppl"] < 200
    assert f16["attn_rot_k"] is False and f16["attn_rot_v"] is False  # f16 is never rotated
    assert t4["attn_rot_k"] is True and t4["attn_rot_v"] is True
    assert t4_off["attn_rot_k"] is False and t4_off["attn_rot_v"] is False
    assert abs(q8["ppl"] / f16["ppl"] - 1) < 0.01
    assert t4["ppl"] > f16["ppl"] * 0.99
    assert abs(t4["ppl"] - f16["ppl"]) < abs(t4_off["ppl"] - f16["ppl"]), "rotation must help turbo4"
    assert t4["count"] == 3 * (256 - 1 - 128)


@pytest.mark.engine
def test_kv_plan_line_lists_only_the_layers_that_exist(smollm2, wiki):
    """The engine's layer list covers every layer; nothing is appended for "others" (with
    --kv-boundary 2 on SmolLM2's 30 layers there are no layers outside 0-1, 2-27, 28-29)."""
    res = CliRunner().invoke(cli, ["ppl", str(smollm2), "-f", str(wiki), "--ctk", "turbo4", "--ctv", "turbo4",
                                   "--kv-boundary", "2", "-c", "64", "--chunks", "1", "-t", "2"])
    assert res.exit_code == 0, res.output
    line = next(ln for ln in res.output.splitlines() if ln.startswith("kv plan:"))
    assert ("-> layers 0-1 q8_0/q8_0, 2-27 turbo4/turbo4, 28-29 q8_0/q8_0; 6936 bytes per token" in line), line
    assert "others" not in line, line


def test_a_context_past_the_training_context_is_warned_about(smollm2):
    from tqgguf.bench.spec import n_ctx_train
    from tqgguf.runtime import open_model, training_context_warning

    train = n_ctx_train(smollm2)  # GGUF <arch>.context_length
    for n_ctx, over in ((2 * train, True), (512, False)):
        e = open_model(smollm2, n_ctx=n_ctx, n_threads=2)
        try:
            assert (e.report.n_ctx, e.report.n_ctx_train) == (n_ctx, train)
            w = training_context_warning(e.report.n_ctx, e.report.n_ctx_train)
            assert (w is not None) == over
            if over:
                assert f"n_ctx {n_ctx} is beyond the model's training context ({train})" in w
        finally:
            e.close()


def test_unknown_cache_type_lists_the_valid_names(smollm2):
    res = CliRunner().invoke(cli, ["ppl", str(smollm2), "--ctk", "turbo5"])
    assert res.exit_code == 2
    assert "turbo5" in res.output and "turbo4" in res.output and "q8_0" in res.output


def test_turbo_on_a_head_dim_that_is_not_a_multiple_of_64_is_refused_naming_it(tmp_path):
    from tqgguf.runtime import EngineError, open_model

    model = tiny_llama_gguf(tmp_path / "tiny-hd32.gguf", head_dim=32)
    for fa in ("auto", "on", "off"):  # the engine checks it whatever the flash attention mode
        with pytest.raises(EngineError, match=r"K cache type turbo4 with block size 64 does not fit this model: "
                                              r"n_embd_head_k = 32"):
            open_model(model, ctk="turbo4", ctv="f16", n_ctx=64, flash_attn=fa)
    eng = open_model(model, ctk="f16", ctv="f16", n_ctx=64)  # the model itself is fine
    eng.close()


def test_quantized_v_with_flash_attention_off_is_a_clear_error(smollm2):
    res = CliRunner().invoke(cli, ["ppl", str(smollm2), "--ctv", "turbo4", "-fa", "off", "--chunks", "1"])
    assert res.exit_code == 2  # a usage error, refused before the model loads
    assert "flash attention is off" in res.output and "turbo4" in res.output and "is quantized" in res.output
    from tqgguf.runtime import resolve_flash_attn  # the library refuses it too

    with pytest.raises(ValueError, match="quantized V cache"):
        resolve_flash_attn("off", "f16", "q8_0")


def test_missing_and_truncated_model_files_are_reported(smollm2, wiki, tmp_path):
    res = CliRunner().invoke(cli, ["ppl", str(tmp_path / "nope.gguf"), "-f", str(wiki)])
    assert res.exit_code == 1 and "nope.gguf" in res.output
    cut = tmp_path / "cut.gguf"
    with open(smollm2, "rb") as f:
        cut.write_bytes(f.read(3_000_000))
    res = CliRunner().invoke(cli, ["ppl", str(cut), "-f", str(wiki)])
    assert res.exit_code == 1 and "cut.gguf" in res.output
    assert "Traceback" not in res.output


def test_text_shorter_than_two_contexts_is_refused(smollm2, tmp_path):
    short = tmp_path / "short.txt"
    short.write_text("A short text of a few words. " * 10)
    res = CliRunner().invoke(cli, ["ppl", str(smollm2), "-f", str(short), "-c", "512"])
    assert res.exit_code == 1
    assert "needs at least 1024" in res.output


def test_ppl_before_build_tells_the_user_what_to_run(tmp_path, smollm2, wiki):
    fake = tmp_path / "fake" / "llama_cpp"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("# a llama_cpp without the patched libraries\n")
    env = dict(os.environ, PYTHONPATH=f"{tmp_path / 'fake'}{os.pathsep}{ROOT}")
    out = subprocess.run([sys.executable, "-m", "tqgguf", "ppl", str(smollm2), "-f", str(wiki)], capture_output=True,
                         text=True, env=env, timeout=120)
    assert out.returncode == 1
    assert "tqgguf build" in out.stderr
    assert "Traceback" not in out.stderr


def test_an_unwritable_json_path_is_refused_before_the_run(smollm2, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    res = CliRunner().invoke(cli, ["ppl", str(smollm2), "--json", str(blocker / "out.json")])
    assert res.exit_code == 2
    assert "cannot write" in res.output and "Traceback" not in res.output
