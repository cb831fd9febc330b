"""`tqgguf sweep`: grid parsing, KLD statistics, baseline files, resume, failures, outputs."""
from __future__ import annotations

import json
import math
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from tqgguf import quality as K
from tqgguf.cachetypes import CacheTypeError
from tqgguf.cli import main as cli
from tqgguf.sweep.grid import BASELINE, expand, parse_rot, parse_types

ROOT = Path(__file__).resolve().parents[1]


# -- grid ------------------------------------------------------------------------------

def test_lists_expand_to_every_combination_with_the_baseline_first():
    cfgs = expand(parse_types("q8_0,turbo4", "--ctk"), parse_types("turbo3", "--ctv"), parse_rot("on,off"))
    assert cfgs[0] == BASELINE
    assert [c.key for c in cfgs[1:]] == ["q8_0/turbo3/rot=on", "q8_0/turbo3/rot=off",
                                          "turbo4/turbo3/rot=on", "turbo4/turbo3/rot=off"]


def test_rotation_is_not_repeated_for_unquantized_pairs():
    cfgs = expand(["f16", "bf16"], ["f16"], [True, False])
    assert [c.key for c in cfgs] == ["f16/f16/rot=n/a", "bf16/f16/rot=n/a"]


@pytest.mark.parametrize("bad,err", [("", ValueError), ("q8_0,,turbo4", ValueError), ("q8_0,turbo5", CacheTypeError)])
def test_bad_type_lists_are_refused(bad, err):
    with pytest.raises(err) as e:
        parse_types(bad, "--ctk")
    if err is CacheTypeError:
        assert "turbo5" in str(e.value) and "turbo4" in str(e.value)


def test_rot_accepts_only_on_and_off():
    assert parse_rot("off,on") == [False, True]
    with pytest.raises(ValueError, match="on, off or on,off"):
        parse_rot("yes")


# -- KLD statistics against an exact float64 computation ---------------------------------

def _exact_kl(base_logits, logits):
    lp = base_logits - np.logaddexp.reduce(base_logits, axis=1, keepdims=True)
    lq = logits - np.logaddexp.reduce(logits, axis=1, keepdims=True)
    p = np.exp(lp)
    keep = lp > -16  # llama-perplexity drops base log-probs below -16 nats
    return np.where(keep, p * (lp - lq), 0).sum(axis=1)


def test_kld_statistics_match_an_exact_float64_computation():
    rng = np.random.default_rng(1)
    n, vocab = 300, 2000
    base = (rng.standard_normal((n, vocab)) * 3).astype(np.float32)
    noisy = (base + rng.standard_normal((n, vocab)).astype(np.float32) * 0.3).astype(np.float32)
    targets = rng.integers(0, vocab, n)
    rows = K.encode_base_rows(base)
    assert rows.shape == (n, K.nv_of(vocab)) and rows.dtype == np.uint16
    st = K.KLDStats()
    st.add(noisy, rows, targets)
    s = st.summary()
    exact = _exact_kl(base.astype(np.float64), noisy.astype(np.float64))
    assert s["kld_mean"] == pytest.approx(exact.mean(), rel=2e-3)
    assert s["kld_err"] == pytest.approx(exact.std(ddof=0) / math.sqrt(n - 1), rel=2e-2)
    same = (noisy.argmax(1) == base.argmax(1)).mean() * 100
    assert s["same_top_p"] == pytest.approx(same, abs=1e-9)
    lq = noisy - np.logaddexp.reduce(noisy.astype(np.float64), axis=1, keepdims=True)
    assert s["ppl"] == pytest.approx(math.exp(-lq[np.arange(n), targets].mean()), rel=1e-5)
    # identical logits: KLD ~ 0 (only the uint16 rounding of the base remains)
    st0 = K.KLDStats()
    st0.add(base, rows, targets)
    assert abs(st0.summary()["kld_mean"]) < 1e-5 and st0.summary()["same_top_p"] == 100.0


def test_baseline_file_round_trips_and_refuses_other_runs(tmp_path):
    rng = np.random.default_rng(2)
    n_ctx, vocab = 16, 50
    meta = K.BaselineMeta("a" * 64, "m.gguf", "b" * 64, "text", n_ctx, 2, vocab)
    tokens = rng.integers(0, vocab, n_ctx * 2).astype(np.int32)
    w = K.BaselineWriter(tmp_path / "base.kld", meta, tokens)
    chunks = [K.encode_base_rows(rng.standard_normal((n_ctx - 1 - n_ctx // 2, vocab)).astype(np.float32)) for _ in range(2)]
    for c in chunks:
        w.add_chunk(c)
    w.close()
    r = K.BaselineReader(tmp_path / "base.kld")
    assert (r.n_ctx, r.n_vocab, r.n_chunk) == (n_ctx, vocab, 2)
    assert np.array_equal(np.asarray(r.tokens), tokens) and np.array_equal(r.chunk(1), chunks[1])
    other = K.BaselineMeta("c" * 64, "other.gguf", "b" * 64, "text", 32, 3, vocab)
    with pytest.raises(K.BaselineMismatchError) as e:
        r.meta.check_compatible(other, tmp_path / "base.kld")
    assert "other.gguf" in str(e.value) and "n_ctx 16 != 32" in str(e.value) and "3 needed" in str(e.value)
    data = (tmp_path / "base.kld").read_bytes()
    (tmp_path / "cut.kld").write_bytes(data[:-10])
    with pytest.raises(K.BaselineMismatchError, match="truncated"):
        K.BaselineReader(tmp_path / "cut.kld")


# -- the real thing ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def small(wikitext) -> list[str]:
    """A small sweep of SmolLM2 on WikiText-2: n_ctx 128, 2 chunks."""
    return ["-f", str(wikitext.path), "-c", "128", "--chunks", "2"]


def _sweep(small, args, out):
    return CliRunner().invoke(cli, ["sweep", "smollm2-135m", *small, "-o", str(out), *args])


def _rows(out):
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]


@pytest.mark.engine
def test_sweep_writes_table_jsonl_csv_and_plot_and_resumes_without_recomputing(tmp_path, small):
    out = tmp_path / "sw"
    res = _sweep(small, ["--ctk", "q8_0,turbo3", "--ctv", "turbo4", "--rot", "on"], out)
    assert res.exit_code == 0, res.output
    rows = _rows(out)
    assert [r["key"] for r in rows] == ["f16/f16/rot=n/a", "q8_0/turbo4/rot=on", "turbo3/turbo4/rot=on"]
    by = {r["key"]: r for r in rows}
    assert abs(by["f16/f16/rot=n/a"]["kld_mean"]) < 1e-4
    assert 0 < by["q8_0/turbo4/rot=on"]["kld_mean"] < by["turbo3/turbo4/rot=on"]["kld_mean"]
    assert by["q8_0/turbo4/rot=on"]["attn_rot_k"] is True
    # KV bytes per token, exact (not llama.cpp's 2-decimal MiB over the cells, which gives 23020 for
    # f16 here): 30 layers x (K + V) rows of 3 KV heads x 64 values; f16 2 bytes a value, q8_0 8.5 bits,
    # turbo4 4.25 bits
    assert by["f16/f16/rot=n/a"]["kv_bytes_per_token"] == 30 * 2 * 192 * 2 == 23040
    assert by["q8_0/turbo4/rot=on"]["kv_bytes_per_token"] == 30 * 192 * (8.5 + 4.25) / 8 == 9180
    assert by["q8_0/turbo4/rot=on"]["compression_vs_f16"] == 23040 / 9180
    assert by["q8_0/turbo4/rot=on"]["measured_bits_per_value"] == by["q8_0/turbo4/rot=on"]["bits_per_value"] == 6.375
    for f in ("results.csv", "table.md", "sweep.png"):
        assert (out / f).stat().st_size > 100
    assert (out / "sweep.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "| turbo3 | turbo4 | on |" in res.output
    t0 = time.time()
    again = _sweep(small, ["--ctk", "q8_0,turbo3", "--ctv", "turbo4", "--rot", "on"], out)
    assert again.exit_code == 0 and "resuming: 3 of 3" in again.output
    assert len(_rows(out)) == 3 and time.time() - t0 < 30


@pytest.mark.engine
def test_a_sweep_killed_midway_finishes_on_restart_without_redoing_rows(tmp_path, small):
    out = tmp_path / "killed"
    cmd = [sys.executable, "-m", "tqgguf", "sweep", "smollm2-135m", *small, "-o", str(out),
           "--ctk", "q8_0,q4_0,turbo4", "--ctv", "turbo3", "--rot", "on"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    results = out / "results.jsonl"
    deadline = time.time() + 300
    while time.time() < deadline and (not results.exists() or len(results.read_text().splitlines()) < 2):
        time.sleep(0.5)
    proc.kill()
    proc.wait()
    before = results.read_text().splitlines()
    assert 2 <= len(before) < 4, "killed after the baseline and at least one row, before the end"
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    after = results.read_text().splitlines()
    assert after[:len(before)] == before  # finished rows untouched
    keys = [json.loads(x)["key"] for x in after]
    assert sorted(keys) == sorted(set(keys)) and len(keys) == 4
    assert f"resuming: {len(before)} of 4" in done.stderr


@pytest.mark.engine
def test_nan_logits_mark_the_row_failed_and_the_sweep_goes_on(tmp_path, monkeypatch, small):
    from tqgguf.sweep import runner

    real = runner.chunk_logits

    def poisoned(engine, *a, **kw):
        for c, logits in real(engine, *a, **kw):
            if engine.ctk == "q4_0":
                logits = logits.copy()
                logits[3, :10] = np.nan
            yield c, logits

    monkeypatch.setattr(runner, "chunk_logits", poisoned)
    out = tmp_path / "nan"
    res = _sweep(small, ["--ctk", "q4_0,q8_0", "--ctv", "q8_0", "--rot", "on"], out)
    assert res.exit_code == 0, res.output
    by = {r["key"]: r for r in _rows(out)}
    assert by["q4_0/q8_0/rot=on"]["status"] == "failed" and "non-finite logits" in by["q4_0/q8_0/rot=on"]["error"]
    assert by["q8_0/q8_0/rot=on"]["status"] == "ok"
    assert "failed: non-finite logits" in res.output


@pytest.mark.engine
def test_a_baseline_from_another_n_ctx_is_refused_with_the_reason(tmp_path, small):
    out = tmp_path / "a"
    assert _sweep(small, ["--ctk", "q8_0", "--ctv", "q8_0", "--baseline", str(tmp_path / "b.kld")], out).exit_code == 0
    res = CliRunner().invoke(cli, ["sweep", "smollm2-135m", "-f", small[1], "-c", "64", "--chunks", "2", "-o",
                                   str(tmp_path / "b"), "--ctk", "q8_0", "--ctv", "q8_0", "--baseline", str(tmp_path / "b.kld")])
    assert res.exit_code == 1
    assert "does not match" in res.output and "n_ctx 128 != 64" in res.output


def test_an_output_dir_with_another_runs_sweep_is_refused_before_any_work(tmp_path, small):
    out = tmp_path / "sw"
    out.mkdir()
    there = {"run_id": "0123456789abcdef-0123456789ab-c512-n20", "model": "SmolLM2-135M-Instruct.Q4_1.gguf",
             "text": "WikiText-2 test", "n_ctx": 512, "key": "f16/f16/rot=n/a", "status": "ok"}
    (out / "results.jsonl").write_text(json.dumps(there) + "\n")
    (out / "table.md").write_text("the c512 map\n")
    t0 = time.time()
    r = _sweep(small, ["--ctk", "q8_0", "--ctv", "q8_0"], out)
    assert r.exit_code == 1, r.output
    msg = " ".join(r.output.split())
    assert "holds the sweep of another run" in msg
    assert "n_ctx 512 there, 128 here" in msg and "chunks 20 there, 2 here" in msg
    assert "model SmolLM2" not in msg  # the same model: not named as a difference
    assert "another -o DIR" in msg
    assert (out / "table.md").read_text() == "the c512 map\n" and len(_rows(out)) == 1
    assert time.time() - t0 < 30  # refused before any model run


def test_bad_sweep_arguments_fail_before_any_work(tmp_path):
    r = CliRunner().invoke(cli, ["sweep", "smollm2-135m", "--ctk", "", "-o", str(tmp_path / "x")])
    assert r.exit_code == 2 and "empty" in r.output
    r = CliRunner().invoke(cli, ["sweep", "smollm2-135m", "--ctv", "q8_0,turbo9", "-o", str(tmp_path / "x")])
    assert r.exit_code == 2 and "turbo9" in r.output and "turbo3" in r.output
    r = CliRunner().invoke(cli, ["sweep", "smollm2-135m", "--rot", "maybe", "-o", str(tmp_path / "x")])
    assert r.exit_code == 2 and "maybe" in r.output
    r = CliRunner().invoke(cli, ["sweep", "smollm2-135m", "--recommend", "-o", str(tmp_path / "x")])
    assert r.exit_code == 2 and "--max-kld" in r.output


@pytest.mark.engine
def test_an_output_dir_that_is_not_writable_is_refused(tmp_path, small):
    blocker = tmp_path / "file"
    blocker.write_text("not a dir")
    r = CliRunner().invoke(cli, ["sweep", "smollm2-135m", *small, "--ctk", "q8_0", "--ctv", "q8_0", "-o", str(blocker / "out")])
    assert r.exit_code == 1 and "not writable" in r.output


@pytest.mark.engine
def test_recommend_picks_the_smallest_kv_within_the_budget_and_prints_flags(tmp_path, small):
    out = tmp_path / "rec"
    r = _sweep(small, ["--ctk", "q8_0,turbo4", "--ctv", "turbo4", "--recommend", "--max-kld", "0.03"], out)
    assert r.exit_code == 0, r.output
    rows = {x["key"]: x for x in _rows(out)}
    ok = sorted((x for x in rows.values() if x["status"] == "ok" and x["kld_mean"] <= 0.03),
                key=lambda x: x["kv_bytes_per_token"])
    best = ok[0]
    assert f"recommended: K={best['ctk']} V={best['ctv']}" in r.output
    assert f"tqgguf serve smollm2-135m --ctk {best['ctk']} --ctv {best['ctv']}" in r.output
    assert f"-ctk {best['ctk']} -ctv {best['ctv']} -fa on" in r.output
