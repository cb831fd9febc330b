#!/usr/bin/env python3
"""Decode speed of several KV cache settings in one process, interleaved: t/s and ratios.

    python scripts/tools/decode_ab.py MODEL --case f16/f16 --case turbo4/turbo4:full [--case ...]
                                      [--depth 4096] [--tokens 32] [--rounds 8] [-t 2] [--out FILE.jsonl]

On a machine whose speed drifts (a shared VM: ±10-25 % between runs a minute apart), two
llama-bench processes run one after the other compare the machine's moods as much as the
settings. Here one process loads MODEL once and opens one context per --case (``CTK/CTV`` or
``CTK/CTV:KCENTER``, KCENTER a ``--k-center`` value, default off), fills each with the same
--depth tokens of WikiText-2 (ubatches of 512), then for each of --rounds rounds decodes --tokens
tokens one at a time in each context in turn (the text's next tokens, logits of the last
token, as llama-bench's tg does). A drift then hits every case of a round alike, and the ratio of
each case to the first within a round is what the settings change.

Prints a table: per case the t/s of each round, the median, and the median over rounds of the
per-round ratio to the first case. --out appends one JSON line per round and case as they are
measured (model, case, depth, round, tokens, seconds, t/s). The engine is the installed one
(``tqgguf build``), its environment (GGML_*, LLAMA_*) as the caller sets it; flash attention on.
Asserts nothing.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tqgguf.cachetypes import ggml_type_id  # noqa: E402
from tqgguf.engine import engine_env, ensure_engine  # noqa: E402
from tqgguf.models import resolve_model  # noqa: E402
from tqgguf.texts import resolve_text  # noqa: E402


def parse_case(s: str) -> tuple[str, str, str]:
    """``CTK/CTV[:KCENTER]`` -> (ctk, ctv, k_center); ValueError naming the form otherwise."""
    kv, _, kc = s.partition(":")
    ctk, sep, ctv = kv.partition("/")
    if not sep or not ctk or not ctv:
        raise ValueError(f"--case {s!r}: expected CTK/CTV or CTK/CTV:KCENTER, e.g. turbo4/turbo4:full")
    return ctk, ctv, kc or "off"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", help="a GGUF path or a `tqgguf models` name")
    ap.add_argument("--case", action="append", required=True, help="CTK/CTV[:KCENTER]; the first is the reference")
    ap.add_argument("--depth", type=int, default=4096, help="cells in the cache before timing (default 4096)")
    ap.add_argument("--tokens", type=int, default=32, help="tokens decoded per case and round (default 32)")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--out", help="append JSON lines here as rounds finish")
    a = ap.parse_args()
    cases = [parse_case(c) for c in a.case]
    for ctk, ctv, _ in cases:
        ggml_type_id(ctk), ggml_type_id(ctv)  # unknown names fail here, naming the allowed ones

    ensure_engine()
    import llama_cpp

    quiet = llama_cpp.llama_log_callback(lambda *_: None)  # kept referenced while the engine may log
    llama_cpp.llama_log_set(quiet, ctypes.c_void_p())
    path = resolve_model(a.model)
    mdl = llama_cpp.llama_model_load_from_file(str(path).encode(), llama_cpp.llama_model_default_params())
    if not mdl:
        raise SystemExit(f"could not load {path}")
    vocab = llama_cpp.llama_model_get_vocab(mdl)
    text = resolve_text().content.encode()
    need = a.depth + a.rounds * a.tokens + 1
    buf = (llama_cpp.llama_token * (len(text) // 2 + 16))()
    n = llama_cpp.llama_tokenize(vocab, text, len(text), buf, len(buf), True, False)
    if n < need:
        raise SystemExit(f"the text has {n} tokens, {need} are needed (depth + rounds x tokens)")
    toks = np.frombuffer(buf, dtype=np.int32, count=n).copy()

    ctxs = []
    for ctk, ctv, kc in cases:
        cp = llama_cpp.llama_context_default_params()
        cp.n_ctx, cp.n_batch, cp.n_ubatch = need + 256, 512, 512
        cp.type_k, cp.type_v = ggml_type_id(ctk), ggml_type_id(ctv)
        cp.flash_attn_type = llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED
        cp.n_threads = cp.n_threads_batch = a.threads
        with engine_env(k_center=kc):
            ctx = llama_cpp.llama_init_from_model(mdl, cp)
        if not ctx:
            raise SystemExit(f"could not create a context for {ctk}/{ctv}:{kc}")
        ctxs.append(ctx)

    batch = llama_cpp.llama_batch_init(512, 0, 1)

    def decode(ctx, pos0: int, chunk: np.ndarray) -> None:
        for i, t in enumerate(chunk):
            batch.token[i], batch.pos[i], batch.n_seq_id[i] = int(t), pos0 + i, 1
            batch.seq_id[i][0] = 0
            batch.logits[i] = i == len(chunk) - 1
        batch.n_tokens = len(chunk)
        if llama_cpp.llama_decode(ctx, batch) != 0:
            raise SystemExit("llama_decode failed")

    for (ctk, ctv, kc), ctx in zip(cases, ctxs):
        t0 = time.perf_counter()
        for p in range(0, a.depth, 512):
            decode(ctx, p, toks[p:min(a.depth, p + 512)])
        print(f"filled {ctk}/{ctv}:{kc} to {a.depth} in {time.perf_counter() - t0:.1f} s", file=sys.stderr)

    rates: list[list[float]] = [[] for _ in cases]
    for r in range(a.rounds):
        for k, ((ctk, ctv, kc), ctx) in enumerate(zip(cases, ctxs)):
            p0 = a.depth + r * a.tokens
            t0 = time.perf_counter()
            for i in range(a.tokens):
                decode(ctx, p0 + i, toks[p0 + i:p0 + i + 1])
            dt = time.perf_counter() - t0
            rates[k].append(a.tokens / dt)
            if a.out:
                with open(a.out, "a") as f:
                    f.write(json.dumps({"model": path.name, "case": f"{ctk}/{ctv}:{kc}", "depth": a.depth, "round": r,
                                        "tokens": a.tokens, "seconds": dt, "t_s": a.tokens / dt}) + "\n")
    llama_cpp.llama_batch_free(batch)
    for ctx in ctxs:
        llama_cpp.llama_free(ctx)
    llama_cpp.llama_model_free(mdl)

    print(f"{path.name}, tg{a.tokens} @ d{a.depth}, {a.rounds} interleaved rounds, {a.threads} threads (t/s)")
    print("| case | rounds | median | ratio to first (median of rounds) |")
    print("|---|---|---|---|")
    for k, (ctk, ctv, kc) in enumerate(cases):
        ratio = statistics.median(x / y for x, y in zip(rates[k], rates[0]))
        print(f"| {ctk}/{ctv}:{kc} | {', '.join(f'{x:.1f}' for x in rates[k])} | {statistics.median(rates[k]):.2f} "
              f"| {ratio:.3f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
