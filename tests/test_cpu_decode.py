"""The CPU's one-query decode with quantized caches (native/ggml/src/ggml-cpu/ggml-turbo-fa.h,
``ggml_turbo_fa_decode_chunk``): the Q heads that share a K/V head read each K and V row
together. With the per-row softmax (``GGML_TURBO_FA_GROUPED=exact``) the result is bit for bit
that of ggml's per-head loop it replaces; with the default softmax per block of rows it is the
same computation in another order, within float rounding of that loop.

Real models (SmolLM2-135M: 9 Q / 3 KV heads; Qwen2.5-Coder-0.5B: 14 / 2, with K centering
``full``, whose K reaches attention as F32), real WikiText-2 text, the built engine. Each run
is a child process, because the switch (``GGML_TURBO_FA_GROUPED``: ``0`` ggml's loop, ``log``
the grouped path with the block softmax, ``exact`` with the per-row one, both saying so once on
stderr) is read once per process.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.engine

N_PROMPT = 600  # > 512 cells: ggml's split-KV decode (one query, n_kv >= 512) runs for every token after
N_DECODE = 6

_CHILD = textwrap.dedent("""
    import json, sys
    import numpy as np
    from tqgguf.cachetypes import ggml_type_id
    from tqgguf.engine import engine_env, ensure_engine
    ensure_engine()
    import ctypes
    import llama_cpp

    @llama_cpp.llama_log_callback
    def _log(level, text, user_data):  # the engine's log lines to stderr (the tests read them)
        sys.stderr.write(text.decode("utf-8", "replace"))
    llama_cpp.llama_log_set(_log, ctypes.c_void_p())

    model, toks_file, out_file, cases = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
    toks = np.load(toks_file)
    n_prompt, n_decode = int(sys.argv[5]), int(sys.argv[6])
    mdl = llama_cpp.llama_model_load_from_file(model.encode(), llama_cpp.llama_model_default_params())
    n_vocab = llama_cpp.llama_vocab_n_tokens(llama_cpp.llama_model_get_vocab(mdl))
    out = {}
    for ctk, ctv, kc in cases:
        cp = llama_cpp.llama_context_default_params()
        cp.n_ctx, cp.n_batch, cp.n_ubatch = 1024, 1024, 512
        cp.type_k, cp.type_v = ggml_type_id(ctk), ggml_type_id(ctv)
        cp.flash_attn_type = llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED
        cp.n_threads = cp.n_threads_batch = 2
        with engine_env(k_center=kc):
            ctx = llama_cpp.llama_init_from_model(mdl, cp)
        assert ctx
        rows = []
        batch = llama_cpp.llama_batch_init(n_prompt, 0, 1)
        try:
            for pos0, chunk in [(0, toks[:n_prompt])] + [(n_prompt + i, toks[n_prompt + i:n_prompt + i + 1]) for i in range(n_decode)]:
                for i, t in enumerate(chunk):
                    batch.token[i], batch.pos[i], batch.n_seq_id[i] = int(t), pos0 + i, 1
                    batch.seq_id[i][0] = 0
                    batch.logits[i] = i == len(chunk) - 1
                batch.n_tokens = len(chunk)
                assert llama_cpp.llama_decode(ctx, batch) == 0
                if len(chunk) == 1:
                    p = llama_cpp.llama_get_logits_ith(ctx, 0)
                    rows.append(np.ctypeslib.as_array(p, shape=(n_vocab,)).copy())
        finally:
            llama_cpp.llama_batch_free(batch)
            llama_cpp.llama_free(ctx)
        out[f"{ctk}/{ctv}/{kc}"] = np.array(rows, dtype=np.float32)
    llama_cpp.llama_model_free(mdl)
    np.savez(out_file, **out)
""")


def _run(model: Path, toks_file: Path, out: Path, cases, mode: str, **env_more: str) -> tuple[dict, str]:
    env = dict(os.environ, GGML_TURBO_FA_GROUPED=mode, **env_more)
    proc = subprocess.run([sys.executable, "-c", _CHILD, str(model), str(toks_file), str(out), json.dumps(cases),
                           str(N_PROMPT), str(N_DECODE)], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    with np.load(out) as z:
        return {k: z[k] for k in z.files}, proc.stderr


@pytest.fixture(scope="module")
def wiki_tokens(model_file, wikitext, tmp_path_factory):
    """N_PROMPT + N_DECODE tokens of WikiText-2 per model name (each model's own tokenizer)."""
    from tqgguf.quality import tokenize
    from tqgguf.runtime import open_model

    def get(name: str) -> tuple[Path, Path]:
        path = model_file(name)
        eng = open_model(path, n_ctx=64)
        toks = np.asarray(tokenize(eng, wikitext.content[:20000])[:N_PROMPT + N_DECODE], dtype=np.int32)
        eng.close()
        f = tmp_path_factory.mktemp(name) / "toks.npy"
        np.save(f, toks)
        return path, f
    return get


_PAIRS = [
    # K turbo (decoded once for its heads) with V turbo / F16 / q8_0; K F16 and q8_0 (vec_dot per head) with V turbo
    ("smollm2-135m", [["turbo4", "turbo4", "off"], ["turbo3", "f16", "off"], ["turbo2", "q8_0", "off"],
                      ["f16", "turbo4", "off"], ["q8_0", "turbo3", "off"]]),
    # GQA 7; K centering full hands attention an F32 K
    ("qwen2.5-coder-0.5b", [["turbo4", "turbo4", "off"], ["turbo3", "turbo3", "full"]]),
]


@pytest.mark.parametrize("name,cases", _PAIRS)
def test_grouped_decode_is_bit_exact(wiki_tokens, tmp_path, name, cases):
    model, toks = wiki_tokens(name)
    grouped, err_g = _run(model, toks, tmp_path / "grouped.npz", cases, "exact")
    loop, err_l = _run(model, toks, tmp_path / "loop.npz", cases, "0")
    assert "ggml_turbo_fa_decode_chunk: one-query decode with" in err_g and "softmax per row (exact)" in err_g, \
        "the grouped decode (exact) never ran: " + err_g[-2000:]
    assert "ggml_turbo_fa_decode_chunk" not in err_l
    for key in loop:
        a, b = grouped[key], loop[key]
        assert a.shape == (N_DECODE, b.shape[1]) and np.isfinite(a).all()
        diff = np.count_nonzero(a.view(np.uint32) != b.view(np.uint32))
        assert diff == 0, f"{name} {key}: {diff} logits differ (max |d| {np.abs(a - b).max():.3g})"


def _log_softmax(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


def _cpu_host_exe(out_dir: Path, name: str, flags=(), includes=(), libs=()) -> Path:
    """tests/cpu_host/NAME.cpp built against the installed engine's libggml, libggml-cpu and libggml-base
    (and LIBS before them, e.g. "llama"; the patched source tree's ggml headers, and INCLUDES before them);
    skips without a C++ compiler or a built engine and tree."""
    import shutil

    from tqgguf.builder.source import source_tree
    from tqgguf.cachetypes import _lib_dir

    cxx = shutil.which("g++") or shutil.which("c++")
    inc = source_tree() / "vendor" / "llama.cpp" / "ggml" / "include"
    lib = _lib_dir()
    if cxx is None or not (inc / "ggml.h").exists() or not any(lib.glob("libggml-cpu.*")):
        pytest.skip(f"no C++ compiler, no patched tree ({inc}) or no engine libraries in {lib} (tqgguf build makes them)")
    exe = out_dir / name
    root = Path(__file__).resolve().parents[1]
    cmd = [cxx, *flags, *[f"-I{d}" for d in includes], f"-I{inc}", str(root / "tests" / "cpu_host" / f"{name}.cpp"),
           f"-L{lib}", *[f"-l{x}" for x in libs], "-lggml", "-lggml-cpu", "-lggml-base", f"-Wl,-rpath,{lib}", "-o", str(exe)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, " ".join(cmd) + "\n" + r.stderr[-3000:]
    return exe


def _fa_check(exe: Path, out_dir: Path, mode: str, tk: str, tv: str, *shape: int, **env: str):
    """One run of tests/cpu_host/fa_decode_check.cpp (exe) with GGML_TURBO_FA_GROUPED=mode and ENV: K/V types by
    name, SHAPE its numeric arguments (head dim, K/V heads, G, cells, visible cells[, queries]). Returns the output
    floats (float32, [D, heads, queries]) and the finished process (stdout: ["alone_differ N"] "NMSE X")."""
    from tqgguf.cachetypes import ggml_type_id

    f = out_dir / f"out-{mode}.bin"
    r = subprocess.run([str(exe), str(f), str(ggml_type_id(tk)), str(ggml_type_id(tv)), *map(str, shape)],
                       capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, GGML_TURBO_FA_GROUPED=mode, **env))
    assert r.returncode == 0, r.stderr[-3000:]
    return np.fromfile(f, dtype=np.float32), r


@pytest.fixture(scope="module")
def fa_decode_check(tmp_path_factory) -> Path:
    """tests/cpu_host/fa_decode_check.cpp, built once for the cases below."""
    return _cpu_host_exe(tmp_path_factory.mktemp("fa_decode_check"), "fa_decode_check", flags=("-std=c++17", "-O1"))


# (K, V, head dim, K/V heads, Q heads per K/V head, cells, cells not masked): SmolLM2's and Qwen2.5's
# shapes, a head dim of 128, a last block cut by the mask and one row past a block; F16 / F32 K through
# their own dots, an F16 V through F16 accumulators (ggml's loop keeps those for an F16 V)
_OP_CASES = [("turbo4", "turbo4", 64, 3, 3, 768, 601), ("turbo3", "turbo3", 64, 2, 7, 1024, 1024),
             ("f16", "turbo4", 64, 3, 3, 768, 700), ("q8_0", "turbo3", 128, 2, 4, 640, 513),
             ("turbo2", "q8_0", 128, 1, 8, 512, 497), ("turbo4", "f16", 64, 2, 7, 768, 640),
             ("f32", "turbo4", 64, 2, 7, 512, 512),
             # few visible cells in a long cache (the split shares out only those: ggml-turbo-fa.h): 33 of 768, 300 of
             # 512, one row past a block of 1024
             ("turbo4", "turbo4", 64, 3, 3, 768, 33), ("f16", "turbo4", 64, 3, 3, 512, 300),
             ("q8_0", "turbo3", 128, 2, 4, 1024, 17),
             # below 512 cells (no split: each thread its Q heads over every cell, written to the output directly)
             ("turbo4", "turbo4", 64, 3, 3, 256, 200), ("f16", "turbo4", 64, 2, 7, 100, 100),
             ("q8_0", "turbo3", 128, 2, 4, 300, 77), ("turbo4", "f16", 64, 3, 3, 128, 128)]


@pytest.mark.parametrize("tk,tv,d,hkv,g,nkv,nvalid", _OP_CASES)
def test_block_softmax_decode_is_the_loop_within_rounding(fa_decode_check, tmp_path, tk, tv, d, hkv, g, nkv, nvalid):
    """One decode call on the CPU backend (tests/cpu_host/fa_decode_check.cpp) in the three modes: the
    per-row softmax (``exact``) is bit for bit ggml's loop (``0``); the default block softmax equals it
    within float rounding (relative 1e-5 of the output's largest value with F32 accumulators, 3e-3 with
    the F16 accumulators of an F16 V) and is as close as it to attention in double precision (NMSE).
    A block that skipped its rescale, a row, or a head would be off by far more."""
    out, nmse = {}, {}
    for mode in ("0", "exact", "1", "log"):
        out[mode], r = _fa_check(fa_decode_check, tmp_path, mode, tk, tv, d, hkv, g, nkv, nvalid)
        nmse[mode] = float(r.stdout.split()[-1])
        if mode == "log":
            assert "softmax per block" in r.stderr, r.stderr[-2000:]
    loop, exact, block = out["0"], out["exact"], out["1"]
    assert loop.shape == (d*hkv*g,) and np.isfinite(block).all()
    assert np.array_equal(exact.view(np.uint32), loop.view(np.uint32))
    assert np.array_equal(out["log"].view(np.uint32), block.view(np.uint32))
    tol = 3e-3 if tv == "f16" else 1e-5
    rel = float(np.abs(block - loop).max() / np.abs(loop).max())
    assert rel < tol, f"block softmax {rel:.2e} of the largest output from ggml's loop"
    assert nmse["1"] < 1.5*nmse["0"] + 1e-12, f"NMSE block {nmse['1']:.3e} against loop {nmse['0']:.3e}"


# (K, V, head dim, K/V heads, Q heads per K/V head, cells, cells visible to the last query, queries, attention
# sinks): below 512 cells and 64 queries; SmolLM2's and Qwen2.5's heads (14 Q heads x 3 queries: a thread's share
# ends inside a query and inside a K/V head's group), the most queries before ggml's tiles, an F16 K, an F16 V, a
# q8_0 K; a sink per head (gpt-oss) in two
_BATCH_CASES = [("turbo4", "turbo4", 64, 3, 3, 256, 200, 5, 0), ("turbo3", "turbo3", 64, 2, 7, 100, 90, 3, 0),
                ("f16", "turbo4", 64, 2, 7, 511, 511, 63, 0), ("turbo4", "f16", 64, 3, 3, 128, 128, 4, 0),
                ("q8_0", "turbo2", 128, 2, 4, 300, 77, 2, 0), ("turbo4", "turbo4", 64, 3, 3, 256, 200, 5, 1),
                ("turbo4", "f16", 64, 2, 7, 100, 90, 3, 1)]


@pytest.mark.parametrize("tk,tv,d,hkv,g,nkv,nvalid,nq,sinks", _BATCH_CASES)
def test_a_query_decodes_to_the_same_floats_alone_and_in_a_batch(fa_decode_check, tmp_path, tk, tv, d, hkv, g,
                                                                 nkv, nvalid, nq, sinks):
    """Below 512 cells a query's attention with a quantized K or V is the same floats whether it comes alone (a
    one-token decode) or among a few queries (speculative decoding's verification of its drafts, several
    sequences' tokens in one ubatch), in every GGML_TURBO_FA_GROUPED mode; tests/cpu_host/fa_decode_check.cpp
    decodes nq causal queries in one call and each alone. The grouped path with the per-row softmax is bit for
    bit ggml's loop for the whole batch; the block softmax within rounding of it, and as close as it to attention
    in double precision (NMSE; with sinks, the sink in the sum). A query given another's mask row, Q row or output
    row, a head left out, or a sink ignored, differs in many floats or in its NMSE."""
    out, nmse = {}, {}
    for mode in ("0", "exact", "1"):
        out[mode], r = _fa_check(fa_decode_check, tmp_path, mode, tk, tv, d, hkv, g, nkv, nvalid, nq,
                                 FA_CHECK_SINKS=str(sinks))
        words = r.stdout.split()
        assert words[0] == "alone_differ" and int(words[1]) == 0, f"mode {mode}: {r.stdout}"
        nmse[mode] = float(words[-1])
    loop, exact, block = out["0"], out["exact"], out["1"]
    assert loop.shape == (d*hkv*g*nq,) and np.isfinite(block).all()
    assert np.array_equal(exact.view(np.uint32), loop.view(np.uint32))
    tol = 3e-3 if tv == "f16" else 1e-5
    assert float(np.abs(block - loop).max() / np.abs(loop).max()) < tol
    # ggml's loop against attention in double precision over the cache's values: 1e-13 (turbo K) to 6e-5 (q8_0 K: Q
    # rounded to q8_0); the block softmax no further from it
    assert nmse["0"] < 1e-3 and nmse["1"] < 1.5*nmse["0"] + 1e-12, nmse


# (head dim, Q heads, K/V heads, tokens, cells, cells visible to the last token, threads): Qwen2.5-0.5B's decode
# at depth 4K (14 heads on 2 K/V heads: a pass of 8 and one of 6), 4 tokens per ubatch, a head dim of 128, GQA
# 3 and 1, cell counts that are not a multiple of the 16-cell tile, one thread and three
_FOLD_CASES = [(64, 14, 2, 1, 4352, 4100, 2), (64, 14, 2, 4, 4096, 4000, 2), (128, 12, 4, 3, 1000, 1000, 3),
               (64, 9, 3, 2, 40, 33, 1), (80, 5, 1, 1, 272, 250, 2)]


@pytest.mark.parametrize("d,nh,nkvh,nt,nkv,nvalid,nth", _FOLD_CASES)
def test_k_center_fold_ops_equal_the_sums_in_double(tmp_path, d, nh, nkvh, nt, nkv, nvalid, nth):
    """K centering ``full``'s decode fold as the engine computes it (llama_k_center_fold_table: R(pos)·uA
    less its mean over the cells, in tiles of 16 cells; llama_k_center_fold_mask: c = scale · M q per head from
    its K/V head's M, then the mask plus c · table per head, rounded to F16), tests/cpu_host/fold_check.cpp,
    against the same sums in double precision: the table within 2e-6 (a float mean over up to 4,352 values in
    [-1, 1]), the mask term within half an F16 ulp plus 1e-6 of the sum of the absolute products behind it (F32
    rounding of c and of the sum), masked cells -inf. A wrong head, K/V head, token, tile, scale or a missing
    mean is off by order 1."""
    exe = _cpu_host_exe(tmp_path, "fold_check", flags=("-std=c++17", "-O1"), libs=("llama",))
    r = subprocess.run([str(exe), *map(str, (d, nh, nkvh, nt, nkv, nvalid, nth))], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    err_table, err_mask = map(float, r.stdout.split())
    assert err_table < 2e-6, f"table {err_table:.3e} from w less its mean"
    assert err_mask < 1e-6, f"mask term {err_mask:.3e} of the sum of |products| from the double-precision sum"


# (type, values per row, rows, threads): one token's K of Qwen2.5-0.5B (2 K/V heads of 64) and of an 8B (8 of 128)
# on 2-3 threads, more threads than blocks, a row of one block, several rows (fewer than threads, and more)
_SET_ROWS_CASES = [("turbo4_0", 128, 1, 2), ("turbo3_0", 128, 1, 3), ("turbo2_0", 256, 1, 4), ("turbo4_0", 1024, 1, 3),
                   ("turbo4_0", 64, 1, 2), ("turbo4_0", 320, 2, 4), ("turbo3_0", 128, 5, 2)]


@pytest.mark.parametrize("tn,nc,nr,nth", _SET_ROWS_CASES)
def test_set_rows_into_a_turbo_cache_on_several_threads_writes_the_encoder_s_bytes(tmp_path, tn, nc, nr, nth):
    """ggml's CPU SET_ROWS into a turbo tensor runs on every thread (patch 0014: rows split over the threads,
    or, with fewer rows than threads, each row's 64-value blocks), tests/cpu_host/set_rows_check.cpp: the
    destination rows hold exactly the bytes quantize_row_turboN_0 writes for each row alone, the other rows
    their old bytes. A thread writing its blocks at the wrong offset, a block left out or written twice, or a
    row sent to the wrong index differs in some byte."""
    exe = _cpu_host_exe(tmp_path, "set_rows_check", flags=("-std=c++17", "-O1"))
    r = subprocess.run([str(exe), tn, str(nc), str(nr), str(nth)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.startswith("OK "), r.stdout + r.stderr[-2000:]


# (head dim, Q heads, K/V heads, threads, V written from F16, the pairs whose barrier the graph loop leaves out):
# SmolLM2-135M and Qwen2.5-0.5B on 2 threads, an 8B's heads on 3, more threads than K rows; two where K's cache
# write cannot follow its transform without a barrier (3 and 5 K rows of 128 on 2 threads: a thread's half of the
# blocks reaches into a row the other thread transforms); and V's cache write from an F16 source (its conversion
# uses a slice of the work buffer per thread: the barrier after K's write stays)
_ROT = ["ROPE->MUL_MAT", "ROPE->MUL_MAT"]
_BARRIER_CASES = [(64, 9, 3, 2, 0, _ROT + ["MUL_MAT->SET_ROWS", "SET_ROWS->SET_ROWS"]),
                  (64, 14, 2, 2, 0, _ROT + ["MUL_MAT->SET_ROWS", "SET_ROWS->SET_ROWS"]),
                  (128, 32, 8, 3, 0, _ROT + ["MUL_MAT->SET_ROWS", "SET_ROWS->SET_ROWS"]),
                  (64, 9, 3, 4, 0, _ROT + ["MUL_MAT->SET_ROWS", "SET_ROWS->SET_ROWS"]),
                  (128, 12, 3, 2, 0, _ROT + ["SET_ROWS->SET_ROWS"]),
                  (128, 20, 5, 2, 0, _ROT + ["SET_ROWS->SET_ROWS"]),
                  (64, 9, 3, 2, 1, _ROT + ["MUL_MAT->SET_ROWS"])]


@pytest.mark.parametrize("d,nh,nkv,nth,f16_v,skips", _BARRIER_CASES)
def test_the_barriers_a_decode_step_leaves_out_change_no_byte(tmp_path, d, nh, nkv, nth, f16_v, skips):
    """ggml-cpu's graph loop leaves out the barrier after a RoPE before the Hadamard transform of its rows, after that
    transform before the turbo cache write of its rows when each thread's blocks lie in its rows, and between two
    cache writes (patch 0015, native/ggml/src/ggml-cpu/ggml-turbo-barrier.h). tests/cpu_host/barrier_check.cpp builds
    a decode step's Q, K and V as llama-graph does (q8_0 projections, NEOX RoPE, the transforms, turbo4 cache writes,
    ggml's graph allocator), lists the pairs the loop's rule takes, and computes it 200 times with random inputs on
    ``nth`` threads and on one: the rotated Q and both caches byte for byte the same. The rule with its nesting test
    taken out leaves the barrier out in the last two cases too, and the K cache then differs within 20 iterations."""
    from tqgguf.builder.source import source_tree

    root = Path(__file__).resolve().parents[1]
    exe = _cpu_host_exe(tmp_path, "barrier_check", flags=("-std=c++17", "-O1"),
                        includes=(root / "native" / "ggml" / "src" / "ggml-cpu", source_tree() / "vendor" / "llama.cpp" / "ggml" / "src"))
    r = subprocess.run([str(exe), *map(str, (d, nh, nkv, nth, 200, f16_v))], capture_output=True, text=True, timeout=300)
    lines = r.stdout.split("\n")
    assert r.returncode == 0 and "OK 200" in lines, r.stdout[-2000:] + r.stderr[-2000:]
    assert [x.removeprefix("skip ") for x in lines if x.startswith("skip ")] == skips


@pytest.mark.parametrize("n,nr,nth", [(64, 9, 2), (128, 32, 3), (256, 5, 2), (512, 4, 2), (16, 10, 2), (8, 3, 2), (32, 7, 1)])
def test_the_hadamard_transform_equals_its_loop_bit_for_bit(tmp_path, n, nr, nth):
    """ggml-cpu's Hadamard transform (the rotation of Q, K, V and the attention output; patch 0016 runs its stages
    within a SIMD vector in registers, native/ggml/src/ggml-cpu/ggml-turbo-fwht.h), tests/cpu_host/fwht_check.cpp,
    against the transform written out (scale, then the stages len = 1 .. n/2 of u + v, u - v) on rows of values from
    2^-20 to 2^19: every float the same. A lane paired with the wrong partner, a sign on the wrong half, or a stage
    done twice or left out changes values; rows shorter than a vector take upstream's loop."""
    exe = _cpu_host_exe(tmp_path, "fwht_check", flags=("-std=c++17", "-O1", "-ffp-contract=off"))
    r = subprocess.run([str(exe), str(n), str(nr), str(nth)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.startswith(f"OK {n*nr}"), r.stdout + r.stderr[-2000:]


@pytest.mark.parametrize("isa,flags,want", [("avx2", ("-mavx2", "-mno-avx512f"), 8), ("avx512f", ("-mavx512f",), 16),
                                            (None, ("-mno-avx2", "-mno-avx512f"), 1)])
def test_each_instruction_set_s_transform_head_equals_the_loop(tmp_path, isa, flags, want):
    """Patch 0016's in-register stages for each instruction set the header has (the engine is built for this
    machine's, so its other branch is checked here): tests/cpu_host/fwht_head_check.cpp compiled with the flags,
    rows of 2..1024 values, the head then the remaining stages against the transform written out, bit for bit; the
    head must take the stages below the vector width (8 with AVX2, 16 with AVX-512; none without either)."""
    import platform
    import shutil

    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None or platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip("needs an x86-64 C++ compiler")
    cpu_flags = Path("/proc/cpuinfo").read_text().split() if Path("/proc/cpuinfo").exists() else []
    if isa is not None and isa not in cpu_flags:
        pytest.skip(f"this CPU has no {isa}")
    root = Path(__file__).resolve().parents[1]
    exe = tmp_path / "fwht_head_check"
    r = subprocess.run([cxx, "-std=c++17", "-O2", "-ffp-contract=off", *flags, f"-I{root / 'native/ggml/src/ggml-cpu'}",
                        str(root / "tests/cpu_host/fwht_head_check.cpp"), "-o", str(exe)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    r = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == f"OK 200 L={want}", r.stdout + r.stderr[-2000:]


def test_k_center_full_decode_folds_the_bias_into_the_mask(wiki_tokens, tmp_path):
    """K centering ``full`` in decode on the CPU: q·R(pos)·b per head in the attention mask, K as
    cached (LLAMA_K_CENTER_FOLD, default on), against adding R(pos)·b to every cell of K (=0).
    Both are exact in real arithmetic and round differently (an F16 mask term against an F16 K);
    each is measured against the f16 cache's decode, and they must agree with each other far more
    closely than either agrees with f16."""
    from .test_k_center import _kld

    model, toks = wiki_tokens("qwen2.5-coder-0.5b")
    cases = [["turbo4", "turbo4", "full"], ["f16", "f16", "off"]]
    fold, err_f = _run(model, toks, tmp_path / "fold.npz", cases, "1", LLAMA_K_CENTER_FOLD="1")
    back, err_b = _run(model, toks, tmp_path / "back.npz", cases, "1", LLAMA_K_CENTER_FOLD="0")
    assert "q·R(pos)·b in the attention mask" in err_f, "the fold was not active: " + err_f[-2000:]
    assert "q·R(pos)·b in the attention mask" not in err_b
    ref = _log_softmax(fold["f16/f16/off"])
    assert np.array_equal(fold["f16/f16/off"], back["f16/f16/off"])  # nothing centered: the switch changes nothing
    lf, lb = _log_softmax(fold["turbo4/turbo4/full"]), _log_softmax(back["turbo4/turbo4/full"])
    k_fold, k_back, k_between = _kld(ref, lf), _kld(ref, lb), _kld(lb, lf)
    print(f"\nKLD vs f16: fold {k_fold:.5f}, add-back {k_back:.5f}; between them {k_between:.2e}")
    assert k_between < 0.25 * k_back, (k_between, k_back)
    assert k_fold < 1.1 * k_back, (k_fold, k_back)  # the mask term less its mean: 0.0502 vs 0.0546 here
    assert (lf.argmax(-1) == lb.argmax(-1)).sum() >= N_DECODE - 1


def test_multi_head_helpers_equal_ggml_per_head(tmp_path):
    """ggml_turbo_fa_dot_f16_multi and ggml_turbo_fa_mad_f32_multi (ggml-turbo-fa.h) give, bit for bit,
    what ggml_vec_dot_f16 (the engine's libggml-cpu) and vec.h's ggml_vec_mad_f32 give per head, on
    random rows of 8..256 values (with and without vec.cpp's scalar leftovers) and 1..8 heads:
    tests/cpu_host/fa_multi_check.cpp, compiled with the flags the engine compiled vec.cpp with
    (its compile_commands.json: the ISA and the floating-point contraction of -std=gnu++17)."""
    import shlex

    from tqgguf.builder.source import source_tree
    from tqgguf.fsutil import cache_dir

    tree = source_tree() / "vendor" / "llama.cpp"
    cc = cache_dir() / "build" / "cpu" / "compile_commands.json"
    if not cc.exists() or not (tree / "ggml" / "src" / "ggml-cpu" / "vec.h").exists():
        pytest.skip(f"no CPU engine build ({cc}) or no patched tree ({tree})")
    entry = next(e for e in json.loads(cc.read_text()) if e["file"].endswith("ggml-cpu/vec.cpp"))
    args = shlex.split(entry["command"]) if "command" in entry else entry["arguments"]
    flags = [a for a in args if a.startswith(("-m", "-std=", "-O", "-ffp-contract"))]  # ISA, language, optimization
    ROOT = Path(__file__).resolve().parents[1]
    exe = _cpu_host_exe(tmp_path, "fa_multi_check", flags=flags,
                        includes=(ROOT / "native/ggml/src/ggml-cpu", ROOT / "native/ggml/src",
                                  tree / "ggml/src/ggml-cpu", tree / "ggml/src"))
    r = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "all OK" in r.stdout, r.stdout[-3000:] + r.stderr[-1000:]
    assert r.stdout.count("OK   dot_f16_multi") == 24 and r.stdout.count("OK   mad_f32_multi") == 24
