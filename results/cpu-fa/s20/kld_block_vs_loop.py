#!/usr/bin/env python3
"""The block softmax's decode against ggml's per-head loop and against the exact per-row mode: KLD per step
and top-token agreement over N decode steps after a 600-token WikiText-2 prompt (tests/test_cpu_decode.py's
child runner, the built engine), per model and K/V pair.

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


def kld_rows(p_logits, q_logits):
    """KL(P || Q) per row (nats), P and Q the softmax of each row of logits."""
    lp, lq = t._log_softmax(p_logits), t._log_softmax(q_logits)
    return (np.exp(lp) * (lp - lq)).sum(axis=-1)


wiki = (Path(__file__).resolve().parents[4] / "shared/data/wiki.test.raw").read_text()
with tempfile.TemporaryDirectory() as td:
    for name, cases in t._PAIRS:
        path = resolve_model(name)
        eng = open_model(path, n_ctx=64)
        toks = np.asarray(tokenize(eng, wiki[:20000])[:t.N_PROMPT + t.N_DECODE], dtype=np.int32)
        eng.close()
        tf = Path(td) / f"{name}.npy"
        np.save(tf, toks)
        out = {m: t._run(path, tf, Path(td) / f"{name}-{m}.npz", cases, m)[0] for m in ("0", "exact", "log")}
        for key in out["0"]:
            loop, exact, block = out["0"][key], out["exact"][key], out["log"][key]
            kb, ke = kld_rows(loop, block), kld_rows(loop, exact)
            print(f"{name} {key}: {t.N_DECODE} steps; block vs loop KLD mean {kb.mean():.2e} max {kb.max():.2e}, "
                  f"top token same {int((loop.argmax(1) == block.argmax(1)).sum())}/{t.N_DECODE}; "
                  f"exact vs loop KLD max {ke.max():.1e}, logits differing {np.count_nonzero(loop.view(np.uint32) != exact.view(np.uint32))}",
                  flush=True)
