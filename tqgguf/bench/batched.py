"""llama-batched-bench's measurement (its default mode: prompts not shared, generation
interleaved): one context of n_seq_max = max(npl) sequences, a warmup, then per (pp, tg,
pl) the prompt phase and the generation steps, timed apart (S_PP, S_TG, S).
"""
from __future__ import annotations

import random
import time
from contextlib import closing
from typing import Callable

from .decode import SeqBatch, vocab
from .spec import BenchSpec, plan_fields

#: the number of warmup tokens llama-batched-bench decodes before its table.
BATCHED_WARMUP_TOKENS = 16


def run_batched(spec: BenchSpec, engine, cfg, facts: dict, todo: set[tuple[int, int, int]], seed: int,
                on_row: Callable[[tuple[int, int, int], dict | None], None]) -> None:
    """llama-batched-bench's table for one configuration ``cfg`` (ctk, ctv, fa, plan) on the
    open model ``engine``: for every case (pp, tg, pl) of ``spec.batched`` in order, measure
    it when it is in ``todo`` and call ``on_row(case, row)``, else ``on_row(case, None)``
    (stored before: the caller reuses it in its place). ``facts``: the fields every row
    carries. Raises RuntimeError when llama_decode fails."""
    import llama_cpp

    from ..engine import cpu_threadpool
    from ..runtime import open_context

    b = spec.batched
    n_seq = max(b.npl)
    # as llama-batched-bench (common's threadpools): one context and one CPU threadpool
    with closing(open_context(engine, n_ctx=b.n_ctx, n_batch=spec.n_batch, n_ubatch=spec.n_ubatch,
                              n_seq_max=n_seq)) as ctx, cpu_threadpool(ctx.ctx, engine.n_threads):
        n_vocab, _, _ = vocab(engine)
        rng = random.Random(seed)
        mem = llama_cpp.llama_get_memory(ctx.ctx)
        cap = max(max(pl * pp for pp, _, pl in b.cases()), n_seq, BATCHED_WARMUP_TOKENS)
        batch = SeqBatch(cap)

        n_batch = llama_cpp.llama_n_batch(ctx.ctx)  # llama.cpp caps n_batch at n_ctx; a larger batch aborts

        def decode_all(sync_each: bool) -> None:
            for off in range(0, batch.n, n_batch):
                n = min(n_batch, batch.n - off)
                res = llama_cpp.llama_decode(ctx.ctx, batch.view(off, n))
                if res != 0:
                    raise RuntimeError(f"llama_decode failed (returned {res}) in the batched bench")
                if sync_each:
                    llama_cpp.llama_synchronize(ctx.ctx)

        w = min(BATCHED_WARMUP_TOKENS, n_batch, b.n_ctx)  # a context of fewer cells (-npl 1 -npp 8 -ntg 2) takes fewer
        batch.fill([rng.randrange(n_vocab) for _ in range(w)], list(range(w)), [0] * w, [0] * w)
        decode_all(True)
        for pp, tg, pl in b.cases():
            if (pp, tg, pl) not in todo:
                on_row((pp, tg, pl), None)  # measured before: reuse it, in its place
                continue
            batch.fill([rng.randrange(n_vocab) for _ in range(pl * pp)], [i for _ in range(pl) for i in range(pp)],
                       [j for j in range(pl) for _ in range(pp)], [int(i == pp - 1) for _ in range(pl) for i in range(pp)])
            steps = [[rng.randrange(n_vocab) for _ in range(pl)] for _ in range(tg)]
            seqs, outs = list(range(pl)), [1] * pl
            llama_cpp.llama_memory_clear(mem, False)
            t0 = time.perf_counter_ns()
            decode_all(False)
            llama_cpp.llama_synchronize(ctx.ctx)
            t1 = time.perf_counter_ns()
            for i in range(tg):
                batch.fill(steps[i], [pp + i] * pl, seqs, outs)
                decode_all(True)
            t2 = time.perf_counter_ns()
            kv = [llama_cpp.llama_memory_seq_pos_max(mem, j) + 1 for j in range(pl)]
            t_pp, t_tg = (t1 - t0) / 1e9, (t2 - t1) / 1e9
            on_row((pp, tg, pl), {
                **facts, "kind": "batched", "type_k": cfg[0], "type_v": cfg[1], "fa_asked": cfg[2],
                "flash_attn": int(engine.flash_attn), "n_kv_max": b.n_ctx, "n_batch": spec.n_batch,
                "n_ubatch": min(spec.n_ubatch, spec.n_batch), "is_pp_shared": 0, "n_gpu_layers": engine.n_gpu_layers,
                "n_threads": engine.n_threads, "pp": pp, "tg": tg, "pl": pl, "n_kv": pl * (pp + tg),
                "t_pp": t_pp, "speed_pp": pl * pp / t_pp, "t_tg": t_tg, "speed_tg": pl * tg / t_tg,
                "t": t_pp + t_tg, "speed": (pl * pp + pl * tg) / (t_pp + t_tg),
                "kv_tokens_per_seq": kv, "k_mib": ctx.report.k_mib, "v_mib": ctx.report.v_mib,
                "test_time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **plan_fields(cfg[3], engine)})

