"""`tqgguf bench`: llama-bench's tests through the engine — expansion, what a run decodes,
the t/s arithmetic, resume, the three output formats, the batched table, refusals."""
from __future__ import annotations

import csv
import io
import json
import re
import statistics
from pathlib import Path

import pytest
from click.testing import CliRunner

from tqgguf.bench import spec as bench_spec
from tqgguf.bench.decode import Decoder, vocab
from tqgguf.bench.report import CSV_ROOFLINE_FIELDS, CSV_TEST_FIELDS, csv_text, markdown, plot
from tqgguf.devices import DevicePlacement
from tqgguf.bench.roofline import BANDWIDTH_FILE, kv_bytes_per_cell, kv_read_bytes, weight_read_bytes, weights_on
from tqgguf.bench.runner import run_bench
from tqgguf.bench.spec import (NO_PLAN, BatchedSpec, BenchError, BenchSpec, append_row, configs_of, expand, load_results,
                               parse_fa_list, parse_int_list, validate)
from tqgguf.cachetypes import MAX_SEQUENCES
from tqgguf.cli import main as cli

P, N, D, R = 16, 4, (0, 32), 2  # tiny sizes: SmolLM2 on 2 shared cores


def _spec(model: Path, out: Path, ctv=("f16", "q8_0"), depths=D, batched=None) -> BenchSpec:
    ks, vs, fas = ["f16"], list(ctv), ["auto"]
    return BenchSpec(model=model, tests=expand(ks, vs, fas, [P], [N], list(depths)),
                     configs=configs_of(ks, vs, fas), reps=R, n_threads=1, out_dir=out, batched=batched)


@pytest.fixture(scope="module")
def smollm2(model_file) -> Path:
    return model_file("smollm2-135m")


@pytest.fixture(scope="module")
def run(smollm2, tmp_path_factory):
    """One real run: f16/f16 and f16/q8_0, pp16 and tg4 at depths 0 and 32, 2 repetitions."""
    out = tmp_path_factory.mktemp("bench")
    spec = _spec(smollm2, out)
    validate(spec)
    seen = []
    rows = run_bench(spec, on_result=lambda r, resumed: seen.append(resumed))
    return spec, rows, seen


# -- expansion (no engine) --------------------------------------------------------------

def test_lists_expand_to_every_combination_in_llama_bench_order():
    tests = expand(["q8_0", "turbo4"], ["turbo4"], ["on"], [512], [128, 32], [0, 8192])
    assert len(tests) == 2 * 1 * 1 * 2 * 3
    assert [t.name for t in tests[:6]] == ["pp512", "tg128", "tg32", "pp512 @ d8192", "tg128 @ d8192",
                                           "tg32 @ d8192"]
    assert [(t.ctk, t.ctv) for t in tests[::6]] == [("q8_0", "turbo4"), ("turbo4", "turbo4")]
    assert all(t.n_ctx == t.n_prompt + t.n_gen + t.n_depth for t in tests)


def test_a_zero_size_makes_no_test_like_llama_bench():
    assert [t.name for t in expand(["f16"], ["f16"], ["auto"], [0], [64], [0, 128])] == ["tg64", "tg64 @ d128"]


@pytest.mark.parametrize("value,flag,err", [("8,-1", "-p", ">= 0"), ("1,x", "-d", "not an integer"),
                                            ("", "-n", "not an integer")])
def test_bad_integer_lists_name_the_flag_and_the_rule(value, flag, err):
    with pytest.raises(BenchError, match=re.escape(flag) + ".*" + re.escape(err)):
        parse_int_list(value, flag, minimum=0)


# -- a real run -------------------------------------------------------------------------



@pytest.mark.engine
def test_each_test_decodes_exactly_its_tokens_after_its_depth(run):
    spec, rows, seen = run
    assert [r["test"] for r in rows] == ["pp16", "tg4", "pp16 @ d32", "tg4 @ d32"] * 2
    assert [(r["type_k"], r["type_v"]) for r in rows] == [("f16", "f16")] * 4 + [("f16", "q8_0")] * 4
    assert seen == [False] * 8
    for r in rows:
        # after every timed repetition the KV cache holds depth + the test's tokens: the
        # depth was restored (from the saved state after the first repetition) and the
        # test decoded exactly n_prompt or n_gen tokens
        assert r["n_decoded"] == [r["n_prompt"] + r["n_gen"]] * R
        assert r["n_kv_after"] == [r["n_depth"] + r["n_prompt"] + r["n_gen"]] * R
        assert len(r["samples_ns"]) == R and all(s > 0 for s in r["samples_ns"])


@pytest.mark.engine
def test_t_per_s_is_tokens_over_time_averaged_over_repetitions(run):
    _, rows, _ = run
    for r in rows:
        n = r["n_prompt"] + r["n_gen"]
        rates = [1e9 * n / s for s in r["samples_ns"]]
        assert r["avg_ts"] == pytest.approx(statistics.fmean(rates), rel=1e-12)
        assert r["stddev_ts"] == pytest.approx(statistics.stdev(rates), rel=1e-9)
        assert r["avg_ns"] == pytest.approx(statistics.fmean(r["samples_ns"]), abs=1)


@pytest.mark.engine
def test_rows_carry_the_model_and_the_kv_llama_cpp_allocated(run):
    _, rows, _ = run
    r0 = rows[0]
    assert r0["model_type"].startswith("llama") and "Q4_1" in r0["model_type"]
    assert 130e6 < r0["model_n_params"] < 140e6 and r0["backends"] == "CPU" and r0["flash_attn"] == 1
    f16, q8 = rows[2], rows[6]  # pp16 @ d32, same n_ctx: V q8_0 is 8.5/16 of f16's bytes
    assert q8["v_mib"] / f16["v_mib"] == pytest.approx(8.5 / 16, rel=0.02)
    assert q8["k_mib"] == pytest.approx(f16["k_mib"])


@pytest.mark.engine
def test_results_are_written_as_they_come_and_a_rerun_resumes(run, smollm2):
    spec, rows, _ = run
    lines = spec.results.read_text().splitlines()
    assert len(lines) == 8 and [json.loads(ln)["test"] for ln in lines] == [r["test"] for r in rows]
    seen = []
    again = run_bench(spec, on_result=lambda r, resumed: seen.append(resumed))
    assert seen == [True] * 8 and again == rows and len(spec.results.read_text().splitlines()) == 8
    # a line cut by a kill reruns that test only; a new depth adds only its tests
    spec.results.write_text("\n".join(lines[:-1]) + "\n" + lines[-1][:40])
    more = _spec(smollm2, spec.out_dir, ctv=("q8_0",), depths=(32, 48))
    seen = []
    rows2 = run_bench(more, on_result=lambda r, resumed: seen.append(resumed))
    assert [r["test"] for r in rows2] == ["pp16 @ d32", "tg4 @ d32", "pp16 @ d48", "tg4 @ d48"]
    assert seen == [True, False, False, False]
    assert rows2[3]["n_kv_after"] == [48 + N] * R


@pytest.mark.engine
def test_the_three_output_formats_have_llama_bench_s_shape(run):
    spec, _, _ = run
    rows = run_bench(spec)  # all stored: the rows as they are in results.jsonl now
    args = ["bench", str(spec.model), "-ctk", "f16", "-ctv", "f16,q8_0", "-p", str(P), "-n", str(N),
            "-d", ",".join(map(str, D)), "-r", str(R), "-t", "1", "--dir", str(spec.out_dir), "--no-plot"]
    md = CliRunner().invoke(cli, args + ["-o", "md"])
    assert md.exit_code == 0, md.output
    lines = [ln for ln in md.stdout.splitlines() if ln.startswith("|")]
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    assert head == ["model", "size", "params", "backend", "threads", "type_k", "type_v", "fa", "test", "t/s",
                    "KV MB/tok", "W MB/tok", "% BW meas"]
    assert len(lines) == 2 + 8
    cells = [[c.strip() for c in ln.strip("|").split("|")] for ln in lines[2:]]
    assert [c[8] for c in cells[:4]] == ["pp16", "tg4", "pp16 @ d32", "tg4 @ d32"]
    assert cells[0][1] == f"{rows[0]['model_size'] / 2 ** 20:.2f} MiB"
    assert cells[3][9] == f"{rows[3]['avg_ts']:.2f} ± {rows[3]['stddev_ts']:.2f}"

    out = CliRunner().invoke(cli, args + ["-o", "csv"])
    table = list(csv.DictReader(io.StringIO(out.stdout)))
    assert list(table[0]) == CSV_TEST_FIELDS + CSV_ROOFLINE_FIELDS and len(table) == 8
    assert [float(t["avg_ts"]) for t in table] == [r["avg_ts"] for r in rows]
    assert [(t["n_prompt"], t["n_gen"], t["n_depth"]) for t in table[:2]] == [(str(P), "0", "0"), ("0", str(N), "0")]

    out = CliRunner().invoke(cli, args + ["-o", "jsonl"])
    objs = [json.loads(ln) for ln in out.stdout.splitlines()]
    assert len(objs) == 8 and "key" not in objs[0]
    assert [o["avg_ts"] for o in objs] == [r["avg_ts"] for r in rows]
    assert {"type_k", "type_v", "n_prompt", "n_gen", "n_depth", "avg_ts", "stddev_ts", "samples_ns"} <= set(objs[0])


@pytest.mark.engine
def test_the_plot_is_a_png_with_a_panel_per_test_kind(run, tmp_path):
    _, rows, _ = run
    plot(rows, tmp_path / "b.png", "t")
    data = (tmp_path / "b.png").read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width = int.from_bytes(data[16:20], "big")
    assert width == 2 * 6 * 110  # two panels (pp16, tg4), 6 inches each at 110 dpi


@pytest.mark.engine
def test_batched_measures_s_tg_over_every_sequence(smollm2, tmp_path):
    spec = _spec(smollm2, tmp_path, ctv=("f16",), depths=(0,), batched=BatchedSpec((8,), (4,), (1, 3)))
    spec.tests = []
    validate(spec)
    rows = run_bench(spec)
    assert [(r["pl"], r["n_kv"], r["n_kv_max"]) for r in rows] == [(1, 12, 36), (3, 36, 36)]
    for r in rows:
        assert r["kv_tokens_per_seq"] == [8 + 4] * r["pl"]
        assert r["speed_tg"] == pytest.approx(r["pl"] * 4 / r["t_tg"])
        assert r["speed"] == pytest.approx(r["pl"] * 12 / (r["t_pp"] + r["t_tg"]))
    md = markdown(rows)
    assert "| S_TG t/s |" in md.replace("  ", " ") or "S_TG t/s" in md.splitlines()[0]
    assert len(md.splitlines()) == 4


# -- refusals: clear errors before any run ------------------------------------------------

@pytest.mark.engine
@pytest.mark.parametrize("extra,code,msg", [
    (["-ctk", "f16,turbo5"], 2, "turbo5"),
    (["-d", "0,9000"], 2, "n_ctx_train = 8192"),
    (["-p", "8000", "-d", "512"], 2, "8512 positions"),
    (["-ngl", "99"], 2, "CPU only"),
    (["-p", "-5"], 2, ">= 0"),
    (["-r", "0"], 2, "repetitions must be >= 1"),
    (["-p", "0", "-n", "0"], 2, "nothing to run"),
    (["-ctv", "q8_0", "-fa", "off"], 2, "flash attention"),
    (["-fa", "maybe"], 2, "on, off, auto"),
    (["--batched", "-npl", f"1,{MAX_SEQUENCES + 1}"], 2, "at most"),
    (["--batched", "-npp", "0"], 2, ">= 1"),
    (["--k-center", "sideways"], 2, "sideways"),
])
def test_bad_input_is_refused_before_any_run(smollm2, tmp_path, extra, code, msg):
    out = tmp_path / "b"
    res = CliRunner().invoke(cli, ["bench", str(smollm2), "--dir", str(out), *extra])
    assert res.exit_code == code, res.output
    assert msg in res.output
    assert not out.exists()  # nothing ran, nothing written


@pytest.mark.engine
def test_depth_beyond_the_training_context_is_timed_only_when_asked(smollm2, tmp_path):
    spec = _spec(smollm2, tmp_path / "b", depths=(0, 9000))
    with pytest.raises(BenchError, match="pp16 @ d9000 needs 9016 positions.*--beyond-n-ctx-train"):
        validate(spec)
    spec.beyond_train = True
    validate(spec)  # accepted (the run itself is llama-bench's, which never checks)


# -- layer plans (--kv-boundary / --kv-swa / --kv-plan as axes, as in tqgguf sweep) -------

def test_plan_axis_expands_after_fa_and_keeps_old_keys(tmp_path):
    from tqgguf.kvplan import parse_plan_axes

    plans = parse_plan_axes("0,2", "none", ())
    tests = expand(["turbo3"], ["turbo3"], ["on"], [16], [0], [0, 32], plans)
    assert [(t.plan, t.n_depth) for t in tests] == [(NO_PLAN, 0), (NO_PLAN, 32), (("2:q8_0/q8_0", "", ""), 0),
                                                    (("2:q8_0/q8_0", "", ""), 32)]
    spec = BenchSpec(model=tmp_path / "m.gguf", tests=tests, configs=configs_of(["turbo3"], ["turbo3"], ["on"], plans))
    assert spec.configs == [("turbo3", "turbo3", "on", NO_PLAN), ("turbo3", "turbo3", "on", ("2:q8_0/q8_0", "", ""))]
    # a test without a plan keeps the key results.jsonl files from before plans hold
    old = dict(model="x", ctk="turbo3", ctv="turbo3", fa="on", p=16, n=0, d=0, b=spec.n_batch, ub=spec.n_ubatch,
               t=None, ngl=0, r=spec.reps, warmup=True)
    import hashlib
    assert bench_spec.test_key(spec, "x", tests[0]) == hashlib.sha256(json.dumps(old, sort_keys=True).encode()).hexdigest()[:20]
    assert bench_spec.test_key(spec, "x", tests[2]) != bench_spec.test_key(spec, "x", tests[0])


@pytest.mark.engine
def test_bench_runs_a_layer_plan_and_reports_its_bytes(smollm2, tmp_path):
    """turbo3/turbo3 with and without --kv-boundary 2 on SmolLM2 (30 layers): the plan row
    allocates layers 0-1 and 28-29 at q8_0 (4 × 8.5 + 26 × 3.25 bits over 30 layers) and
    the table names the plan in its own column."""
    args = ["bench", str(smollm2), "-ctk", "turbo3", "-ctv", "turbo3", "--kv-boundary", "0,2", "-p", "16", "-n", "0",
            "-r", "1", "-t", "1", "--dir", str(tmp_path), "--no-plot"]
    r = CliRunner().invoke(cli, args)
    assert r.exit_code == 0, r.output
    rows = [json.loads(ln) for ln in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert [x.get("kv_plan") for x in rows] == [None, "--kv-boundary 2:q8_0/q8_0"]
    assert rows[1]["kv_plan_engine"] == "0-1,28-29:q8_0/q8_0"
    assert rows[1]["bits_per_value"] == pytest.approx((4 * 8.5 + 26 * 3.25) / 30, abs=1e-3)
    assert rows[1]["k_mib"] / rows[0]["k_mib"] == pytest.approx((4 * 8.5 + 26 * 3.25) / (30 * 3.25), rel=0.02)
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("|")]
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    assert head[5:9] == ["type_k", "type_v", "kv_plan", "fa"]
    assert [ln.split("|")[8].strip() for ln in lines[2:]] == ["-", "--kv-boundary 2:q8_0/q8_0"]


@pytest.mark.parametrize("extra,msg", [
    (["--kv-plan", "0-1,40-41:q8_0/q8_0"], "layer 41 is named, but SmolLM2-135M-Instruct.Q4_1.gguf has 30 layers"),
    (["-fa", "off", "-ctv", "f16", "--kv-boundary", "2:f16/q8_0"], "quantized V type q8_0"),
    (["--kv-swa", "f16"], "has no sliding-window layers"),
])
def test_bench_refuses_a_plan_that_does_not_fit_before_running(smollm2, tmp_path, extra, msg):
    args = ["bench", str(smollm2), "-p", "16", "-n", "0", "-r", "1", "--dir", str(tmp_path), *extra]
    r = CliRunner().invoke(cli, args)
    assert r.exit_code == 2 and msg in r.output, r.output
    assert not (tmp_path / "results.jsonl").exists()


@pytest.mark.engine
def test_the_cpu_threadpool_llama_bench_attaches_changes_no_result(smollm2):
    """bench attaches a ggml CPU threadpool per test as llama-bench does (tqgguf.engine.
    cpu_threadpool, a ctypes mirror of struct ggml_threadpool_params): the logits of the
    same tokens are the same with and without it, and a context keeps working after it
    is detached."""
    import llama_cpp
    import numpy as np

    from tqgguf.engine import cpu_threadpool
    from tqgguf.runtime import open_context, open_model

    e = open_model(smollm2, n_ctx=64, n_threads=2)
    try:
        def logits_of(pool: bool) -> np.ndarray:
            ctx = open_context(e, n_ctx=64, n_batch=64, n_ubatch=64)
            try:
                dec = Decoder(ctx.ctx, *vocab(e), seed=3)
                toks = dec.tokens(8)
                if pool:
                    with cpu_threadpool(ctx.ctx, 2):
                        dec.gen(toks)
                else:
                    dec.gen(toks)
                n_vocab = vocab(e)[0]
                out = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(ctx.ctx, -1), shape=(n_vocab,)).copy()
                dec.gen(dec.tokens(2))  # detached: still decodes
                return out
            finally:
                ctx.close()

        with_pool, without = logits_of(True), logits_of(False)
        assert np.all(np.isfinite(with_pool)) and np.array_equal(with_pool, without)
    finally:
        e.close()


# -- K centering and rotation: the settings of ppl and serve ------------------------------

@pytest.mark.engine
def test_bench_runs_the_k_centering_ppl_and_serve_would_use(model_file, tmp_path):
    """On Qwen2.5-Coder (keys with a bias) a quantized K gets K centering `full` by default
    (auto), as in ppl and serve, and the rows, the table and the resume key say so; --k-center
    off is another measurement (another key), and f16 K stays off under auto."""
    qwen = model_file("qwen2.5-coder-0.5b")
    out = tmp_path / "b"
    args = ["bench", str(qwen), "-ctk", "f16,turbo4", "-ctv", "f16", "-p", "0", "-n", "2", "-r", "1", "-t", "1",
            "--no-warmup", "--no-plot", "--dir", str(out), "-o", "md"]
    res = CliRunner().invoke(cli, args, env={"TQGGUF_K_CENTER": None, "LLAMA_K_CENTER": None})
    assert res.exit_code == 0, res.output
    rows = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    assert [(r["type_k"], r["k_center"], r["attn_rotation"]) for r in rows] == [("f16", "off", True), ("turbo4", "full", True)]
    header = next(x for x in res.output.splitlines() if x.startswith("| model"))
    assert "k_center" in header and "rot" in header
    assert re.search(r"\|\s+turbo4\s+\|\s+f16\s+\|\s+full\s+\|\s+1\s+\|", res.output)
    res2 = CliRunner().invoke(cli, args[:-2] + ["-o", "jsonl", "--k-center", "off", "--no-rot"])
    assert res2.exit_code == 0, res2.output
    new = [json.loads(x) for x in res2.output.splitlines() if x.startswith("{")]
    assert [(r["k_center"], r["attn_rotation"]) for r in new] == [("off", False), ("off", False)]
    stored = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    assert len(stored) == 4 and len({r["key"] for r in stored}) == 4  # measured again, not resumed


@pytest.mark.engine
def test_bench_takes_the_cache_types_from_the_settings_and_refuses_a_bad_one(smollm2, tmp_path):
    out = tmp_path / "b"
    args = ["bench", str(smollm2), "-p", "0", "-n", "2", "-r", "1", "-t", "1", "--no-warmup", "--no-plot",
            "--dir", str(out), "-o", "jsonl"]
    res = CliRunner().invoke(cli, args, env={"TQGGUF_KV_CACHE_TYPE": "q8_0"})
    assert res.exit_code == 0, res.output
    row = json.loads(next(x for x in res.output.splitlines() if x.startswith("{")))
    assert (row["type_k"], row["type_v"]) == ("q8_0", "q8_0")
    bad = CliRunner().invoke(cli, args, env={"OLLAMA_KV_CACHE_TYPE": "foo"})
    assert bad.exit_code == 2 and "OLLAMA_KV_CACHE_TYPE" in bad.output, bad.output


@pytest.mark.engine
def test_a_flag_overrides_the_variable_it_would_conflict_through(smollm2, tmp_path):
    """OLLAMA_KV_CACHE_TYPE=turbo4 with OLLAMA_FLASH_ATTENTION=0 is a conflict only while both apply: -ctv f16 or
    -fa on on the command line replaces its variable and the run goes ahead (as in ppl and serve); without
    either the conflict is refused naming both variables."""
    env = {"OLLAMA_KV_CACHE_TYPE": "turbo4", "OLLAMA_FLASH_ATTENTION": "0", "TQGGUF_KV_CACHE_TYPE": None,
           "TQGGUF_FLASH_ATTENTION": None}
    args = ["bench", str(smollm2), "-p", "0", "-n", "2", "-r", "1", "-t", "1", "--no-warmup", "--no-plot",
            "-o", "jsonl"]
    for extra, want in ((["-ctv", "f16"], ("turbo4", "f16", 0)), (["-fa", "on"], ("turbo4", "turbo4", 1))):
        res = CliRunner().invoke(cli, args + ["--dir", str(tmp_path / extra[0]), *extra], env=env)
        assert res.exit_code == 0, res.output
        row = json.loads(next(x for x in res.output.splitlines() if x.startswith("{")))
        assert (row["type_k"], row["type_v"], int(row["flash_attn"])) == want, row
    bad = CliRunner().invoke(cli, args + ["--dir", str(tmp_path / "bad")], env=env)
    assert bad.exit_code == 2, bad.output
    assert "OLLAMA_FLASH_ATTENTION" in bad.output and "OLLAMA_KV_CACHE_TYPE" in bad.output, bad.output


def test_a_row_after_a_cut_last_line_stays_a_line_of_its_own(tmp_path):
    """A kill during a write leaves a last line without its newline: it is skipped on resume
    (that test reruns), and the next row is appended as a line of its own."""
    f = tmp_path / "results.jsonl"
    f.write_text(json.dumps({"key": "a", "v": 1}) + "\n" + '{"key": "b", "v"')
    append_row(f, {"key": "c", "v": 3})
    lines = f.read_text().splitlines()
    assert lines[-1] == json.dumps({"key": "c", "v": 3})
    assert set(load_results(f)) == {"a", "c"}


@pytest.mark.engine
def test_ctrl_c_keeps_what_finished_exits_130_and_the_same_command_resumes(smollm2, tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "b"
    # 8 tests of 5 x 32 tokens each: seconds per test even on a fast idle machine, so the
    # interrupt (sent when the first result is stored) lands mid-run
    cmd = [sys.executable, "-m", "tqgguf", "bench", str(smollm2), "-ctv", "f16,q8_0", "-p", "0", "-n", "32",
           "-d", "0,32,64,96", "-r", "4", "-t", "1", "--no-plot", "--dir", str(out)]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    deadline = time.time() + 300
    while time.time() < deadline and p.poll() is None:
        if (out / "results.jsonl").exists() and (out / "results.jsonl").read_text().count("\n") >= 1:
            break
        time.sleep(0.05)
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=120)
    assert p.returncode == 130, err
    kept = len((out / "results.jsonl").read_text().splitlines())
    assert 1 <= kept < 8
    assert f"{kept} finished result(s) kept" in err and "resumes" in err and "Aborted" not in err
    assert (out / "table.md").exists()
    again = subprocess.run(cmd + ["-o", "jsonl"], capture_output=True, text=True, timeout=600,
                           env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    assert again.returncode == 0, again.stderr
    assert len((out / "results.jsonl").read_text().splitlines()) == 8
    assert again.stderr.count("bench: f16/") == 8 - kept  # only the tests that had not finished ran


@pytest.mark.engine
def test_csv_of_a_run_with_batched_is_one_table(smollm2, tmp_path):
    """-o csv --batched: one header (a kind column, llama-bench's columns, the batched ones),
    so a csv reader gets every row with its own fields; without --batched, llama-bench's shape."""
    args = ["bench", str(smollm2), "-p", "8", "-n", "2", "-r", "1", "-t", "1", "--no-warmup", "--no-plot",
            "--batched", "-npp", "8", "-ntg", "2", "-npl", "1,2", "--dir", str(tmp_path / "b"), "-o", "csv"]
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 0, res.output
    table = list(csv.DictReader(io.StringIO(res.stdout)))
    assert [t["kind"] for t in table] == ["test", "test", "batched", "batched"]
    assert [t["n_prompt"] for t in table[:2]] == ["8", "0"] and float(table[1]["avg_ts"]) > 0
    assert [t["pl"] for t in table[2:]] == ["1", "2"] and all(float(t["speed_tg"]) > 0 for t in table[2:])
    assert table[2]["avg_ts"] == ""  # a batched row has no llama-bench t/s
    assert list(csv.DictReader(io.StringIO(csv_text(load_results(tmp_path / "b" / "results.jsonl").values())))) == table


@pytest.mark.engine
def test_a_result_of_another_engine_build_is_measured_again(smollm2, tmp_path):
    spec = _spec(smollm2, tmp_path / "b", ctv=("f16",), depths=(0,))
    spec.reps = 1
    first = run_bench(spec)
    assert all(r["engine_fingerprint"] and r["build_commit"] for r in first)
    assert [r["samples_ns"] for r in run_bench(spec)] == [r["samples_ns"] for r in first]  # same build: resumed
    lines = spec.results.read_text().splitlines()
    spec.results.write_text("".join(json.dumps({**json.loads(x), "engine_fingerprint": "another"}) + "\n" for x in lines))
    logged = []
    again = run_bench(spec, log=logged.append)
    assert any("another engine build" in m for m in logged)
    assert [r["samples_ns"] for r in again] != [r["samples_ns"] for r in first]
    assert all(r["engine_fingerprint"] == first[0]["engine_fingerprint"] for r in again)


@pytest.mark.engine
def test_one_directory_adds_up_the_runs_of_one_model(smollm2, model_file, tmp_path):
    """Two runs into one --dir (the K = V diagonals are separate runs): table.md shows both;
    another model's run into that directory is refused before it runs."""
    out = tmp_path / "b"
    base = ["bench", str(smollm2), "-p", "0", "-n", "2", "-r", "1", "-t", "1", "--no-warmup", "--no-plot",
            "--dir", str(out)]
    for kv in ("f16", "q8_0"):
        res = CliRunner().invoke(cli, base + ["-ctk", kv, "-ctv", kv])
        assert res.exit_code == 0, res.output
    table = (out / "table.md").read_text()
    assert re.search(r"\|\s+f16\s+\|\s+f16\s+\|", table) and re.search(r"\|\s+q8_0\s+\|\s+q8_0\s+\|", table)
    other = CliRunner().invoke(cli, ["bench", str(model_file("gemma3-270m")), "-p", "0", "-n", "2", "--dir", str(out)])
    assert other.exit_code == 2 and "another model" in other.output and "SmolLM2" in other.output
    assert len((out / "results.jsonl").read_text().splitlines()) == 2


def test_fa_on_and_auto_are_one_measurement():
    assert parse_fa_list("1,0,auto") == ["on", "off"]
    assert parse_fa_list("auto,on") == ["auto"]
    assert parse_fa_list("off,0") == ["off"]


@pytest.mark.engine
def test_flags_that_only_pp_tg_tests_use_are_named_when_none_run(smollm2, tmp_path):
    args = ["bench", str(smollm2), "-p", "0", "-n", "0", "--batched", "-npp", "8", "-ntg", "2", "-npl", "1",
            "-t", "1", "--no-plot", "--dir", str(tmp_path / "b")]
    res = CliRunner().invoke(cli, args + ["-d", "0,64", "-r", "7"])
    assert res.exit_code == 0, res.output
    assert "warning: -d, -r apply to the pp/tg tests" in res.stderr
    quiet = CliRunner().invoke(cli, args)
    assert quiet.exit_code == 0 and "warning" not in quiet.stderr


# -- the roofline columns -----------------------------------------------------------------

#: SmolLM2-135M: 30 layers, 3 KV heads of 64 (its GGUF header)
SMOL = dict(n_layer=30, n_head_kv=3, head=64)


def _hand_row_bytes(t: str, n: int) -> int:
    """ggml_row_size by hand: f16 2 bytes a value; q8_0 34 bytes / 32 values; turbo4 34 / 64."""
    return {"f16": 2 * n, "q8_0": 34 * n // 32, "turbo4": 34 * n // 64}[t]


@pytest.mark.parametrize("k,v,per_cell", [("f16", "f16", 30 * (384 + 384)),      # 23040, kvplan's docstring
                                          ("turbo4", "turbo4", 30 * (102 + 102)),  # 3 x 64-value blocks of 34 B
                                          ("f16", "turbo4", 30 * (384 + 102))])
def test_kv_bytes_read_per_token_at_depth_512_match_a_hand_count_for_smollm2(k, v, per_cell):
    from tqgguf.kvplan import ModelLayers
    from tqgguf.runtime import KVCacheInfo

    layers = ModelLayers("llama", 30, False, 0, 64, 64, 3)
    b = kv_bytes_per_cell(KVCacheInfo(False, 1024, 30, k, v), layers, _hand_row_bytes)
    assert b == per_cell
    # tg1 @ d512 reads the 512 cells of the depth and its own: 513; tg4 @ d512: 513..516, mean 514.5
    assert kv_read_bytes([(b, False)], 512, 1) == per_cell * 513
    assert kv_read_bytes([(b, False)], 512, 4) == per_cell * 514.5
    # a sliding-window cache of 256 cells reads 256 of them at that depth; pp rows read none here
    assert kv_read_bytes([(b, True)], 512, 4, n_swa=256) == per_cell * 256
    assert kv_read_bytes([(b, False)], 512, 0) == 0


def test_the_engine_s_plan_line_gives_a_cache_s_bytes_per_cell():
    from tqgguf.kvplan import ModelLayers
    from tqgguf.runtime import parse_kv_report

    log = ("llama_kv_cache_iswa: creating non-SWA KV cache, size = 4096 cells\n"
           "llama_kv_cache: size =   12.00 MiB (  4096 cells,   3 layers,  1/1 seqs), K (f16):    6.00 MiB, "
           "V (f16):    6.00 MiB\n"
           "llama_kv_cache_iswa: creating     SWA KV cache, size = 1024 cells\n"
           "llama_kv_cache: size =   15.00 MiB (  1024 cells,  15 layers,  1/1 seqs), K (mixed):    7.50 MiB, "
           "V (turbo4):    7.50 MiB\n"
           "llama_kv_plan_log: kv_plan = 0-1:q8_0/q8_0: layers 0-1 q8_0/q8_0, 2-14 turbo4/turbo4 (15 layers); "
           "4321 bytes per token, 5.000 bits/value\n")
    full, window = parse_kv_report(log).caches
    assert (full.swa, full.cells, full.n_layers, full.plan_bytes_per_token) == (False, 4096, 3, None)
    assert (window.swa, window.n_layers, window.plan_bytes_per_token) == (True, 15, 4321)
    layers = ModelLayers("gemma3", 18, True, 0, 256, 256, 1)
    assert kv_bytes_per_cell(full, layers, _hand_row_bytes) == 3 * 2 * 512
    assert kv_bytes_per_cell(window, layers, _hand_row_bytes) == 4321


def test_weight_bytes_per_token_leave_out_the_gathered_embeddings_unless_they_are_the_output():
    untied = {"token_embd.weight": 1000, "output.weight": 1000, "blk.0.attn_q.weight": 10}
    assert weight_read_bytes(untied) == 1010
    tied = {"token_embd.weight": 1000, "blk.0.attn_q.weight": 10}
    assert weight_read_bytes(tied) == 1010  # the embedding matrix is the output layer, read whole


def _placed(*devs):
    return [DevicePlacement(name, layers, output) for name, layers, output in devs]


@pytest.mark.parametrize("placement,where", [
    (_placed(("CPU", [(0, 29)], True)), "CPU"),
    (_placed(("CPU", [], False), ("CUDA0", [(0, 29)], True)), "CUDA0"),  # -ngl 99, -ngl all, -ngl 31
    (_placed(("CPU", [], False), ("CUDA1", [(0, 29)], True)), "CUDA1"),  # -dev CUDA1
    (_placed(("CPU", [(0, 0)], False), ("CUDA0", [(1, 29)], True)), None),  # -ngl 30: a layer on the CPU
    (_placed(("CPU", [], True), ("CUDA0", [(0, 29)], False)), None),  # the output layer left on the CPU
    (_placed(("CPU", [], False), ("CUDA0", [(0, 14)], False), ("CUDA1", [(15, 29)], True)), None),  # -sm layer
])
def test_the_bandwidth_fraction_needs_every_weight_on_one_device(placement, where):
    """From where the engine put the layers (its load log), not from the asked -ngl: the CLI's
    -ngl lives in the offload plan (-ngl auto, -dev, workers), and the spec's own n_gpu_layers
    stayed 0, so a run with every layer on an H200 divided by the CPU's copy bandwidth (392 %)."""
    assert weights_on(placement, 30) == where


@pytest.mark.engine
def test_tg_rows_carry_the_bytes_read_and_the_fraction_of_the_measured_bandwidth(run):
    from tqgguf.kvplan import tensor_bytes

    spec, rows, _ = run
    tg = [r for r in rows if r["n_gen"]]
    assert all("kv_read_bytes" not in r for r in rows if r["n_prompt"])
    by = {(r["type_v"], r["n_depth"]): r for r in tg}
    # f16/f16: 23040 bytes a cell; tg4 @ d32 reads 33..36 cells, mean 34.5; V q8_0: 384 + 204 bytes a layer
    assert by[("f16", 32)]["kv_read_bytes"] == 23040 * 34.5
    assert by[("q8_0", 0)]["kv_read_bytes"] == 30 * (384 + 204) * 2.5
    # SmolLM2's embeddings are its output layer: every byte of the file is read per token
    assert tg[0]["weight_read_bytes"] == tg[0]["model_size"] == sum(tensor_bytes(spec.model, _sizes()).values())
    bw = json.loads((spec.out_dir / BANDWIDTH_FILE).read_text())["cpu, 1 threads"]
    assert 1e8 < bw["bytes_per_s"] < 1e13
    for r in tg:
        assert r["bandwidth_source"] == "measured" and r["bandwidth_bytes_per_s"] == bw["bytes_per_s"]
        assert r["bandwidth_fraction"] == pytest.approx((r["kv_read_bytes"] + r["weight_read_bytes"]) * r["avg_ts"]
                                                        / bw["bytes_per_s"])
    cells = markdown(rows).splitlines()
    assert cells[0].rstrip().endswith("| KV MB/tok |  W MB/tok |  % BW meas |")
    assert cells[2].rstrip().endswith("|         - |         - |          - |")  # pp16
    last = [c.strip() for c in cells[3].strip("| ").split("|")][-3:]  # tg4: KV, W, % BW
    assert last == [f"{tg[0]['kv_read_bytes'] / 1e6:.2f}", f"{tg[0]['weight_read_bytes'] / 1e6:.1f}",
                    f"{100 * tg[0]['bandwidth_fraction']:.1f}"]


def _sizes():
    from tqgguf.cachetypes import all_types

    return {t.id: (t.block_size, t.type_size) for t in all_types().values()}


@pytest.mark.engine
def test_a_given_bandwidth_is_used_and_named_in_the_header(smollm2, tmp_path):
    args = ["bench", str(smollm2), "-p", "0", "-n", "1", "-r", "1", "-t", "1", "--dir", str(tmp_path), "--no-plot",
            "--bandwidth", "2.5"]
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 0, res.output
    lines = [ln for ln in res.stdout.splitlines() if ln.startswith("|")]
    assert lines[0].rstrip().endswith("| % BW given |")
    row = json.loads((tmp_path / "results.jsonl").read_text().splitlines()[0])
    assert row["bandwidth_source"] == "given" and row["bandwidth_bytes_per_s"] == 2.5e9
    assert not (tmp_path / BANDWIDTH_FILE).exists()  # nothing measured
