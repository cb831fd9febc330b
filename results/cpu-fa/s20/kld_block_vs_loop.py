#!/usr/bin/env python3
"""The decode's block softmax against ggml's per-head loop over N decode steps after a 600-token WikiText-2
prompt (tests/test_cpu_decode.py's child runner, the built engine), per model and K/V pair:

- block vs loop: KLD per step and top-token agreement (the two differ by float rounding in attention, which
  a quantized cache amplifies: a new token's K/V lands on other codes, and so on);
- for scale, the same comparison for a change of rounding alone in ggml's loop: the codec's portable C
  (GGML_TURBO_NO_SIMD=1, another summation order of the turbo dot);
- quality: each mode's mean KLD against the f16/f16 cache's logits (the "same quality" criterion, DESIGN.md 17);
- exact (per-row softmax) vs loop: logits differing (0: bit for bit).

    python3 results/cpu-fa/s20/kld_block_vs_loop.py [N_DECODE]   (from the repository root)
"""
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
import tests.test_cpu_decode as t  # noqa: E402
from tqgguf.models import resolve_model  # noqa: E402
from tqgguf.quality import tokenize  # noqa: E402
from tqgguf.runtime import open_model  # noqa: E402

t.N_DECODE = int(sys.argv[1]) if len(sys.argv) > 1 else 32
N = t.N_DECODE


def kld_rows(p_logits, q_logits):
    """KL(P || Q) per row (nats), P and Q the softmax of each row of logits."""
    lp, lq = t._log_softmax(p_logits), t._log_softmax(q_logits)
    return (np.exp(lp) * (lp - lq)).sum(axis=-1)


wiki = (Path(__file__).resolve().parents[4] / "shared/data/wiki.test.raw").read_text()
with tempfile.TemporaryDirectory() as td:
    for name, cases in t._PAIRS:
        path = resolve_model(name)
        eng = open_model(path, n_ctx=64)
        toks = np.asarray(tokenize(eng, wiki[:20000])[:t.N_PROMPT + N], dtype=np.int32)
        eng.close()
        tf = Path(td) / f"{name}.npy"
        np.save(tf, toks)
        ref = t._run(path, tf, Path(td) / "f16.npz", [["f16", "f16", "off"]], "0")[0]["f16/f16/off"]
        out = {m: t._run(path, tf, Path(td) / f"{m}.npz", cases, m)[0] for m in ("0", "exact", "1")}
        nosimd = t._run(path, tf, Path(td) / "nosimd.npz", cases, "0", GGML_TURBO_NO_SIMD="1")[0]
        for key in out["0"]:
            loop, exact, block, ns = out["0"][key], out["exact"][key], out["1"][key], nosimd[key]
            kb, kn = kld_rows(loop, block), kld_rows(loop, ns)
            same = lambda a, b: int((a.argmax(1) == b.argmax(1)).sum())  # noqa: E731
            print(f"{name} {key}: {N} steps | block vs loop KLD mean {kb.mean():.2e} max {kb.max():.2e}, top {same(loop, block)}/{N} "
                  f"| loop, portable codec, vs loop KLD mean {kn.mean():.2e} max {kn.max():.2e}, top {same(loop, ns)}/{N} "
                  f"| vs f16/f16 KLD mean: loop {kld_rows(ref, loop).mean():.3e}, block {kld_rows(ref, block).mean():.3e} "
                  f"| exact vs loop: {np.count_nonzero(loop.view(np.uint32) != exact.view(np.uint32))} logits differ", flush=True)
