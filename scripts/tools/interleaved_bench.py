#!/usr/bin/env python3
"""Prefill and decode speed of several KV cache settings in one process, interleaved: t/s and ratios.

    python scripts/tools/interleaved_bench.py MODEL --case f16/f16 --case turbo4/turbo4:full [--case ...]
                        [--depth 4096] [--prompt 0] [--tokens 32] [--rounds 8] [-t 2] [--out FILE.jsonl]

On a machine whose speed drifts (a shared VM: ±10-25 % between runs a minute apart), two
llama-bench processes run one after the other compare the machine's moods as much as the
settings. Here one process loads MODEL once and opens one context per --case (``CTK/CTV``,
``CTK/CTV:KCENTER`` with KCENTER a ``--k-center`` value, default off, or ``CTK/CTV:KCENTER:norot``
with the Hadamard rotation off; ``:VAR=VALUE`` items after those set an engine variable, LLAMA_* or GGML_*,
while that context is created — for switches read there, e.g. ``turbo4/turbo4:full:LLAMA_K_CENTER_FOLD=0``),
fills each with the same
--depth tokens of WikiText-2 (ubatches of 512), then for each of --rounds rounds and each context in
turn: with --prompt N, the text's next N tokens as one batch (ubatches of 512, logits of the last:
llama-bench's ppN @ dDEPTH), then those cells removed again (llama_memory_seq_rm); then --tokens
tokens one at a time (logits of each: llama-bench's tgN), removed again. A drift then hits every
case of a round alike, and the ratio of each case to the first within a round is what the
settings change.

Prints a table per test: per case the t/s of each round, the median, and the median over rounds
of the per-round ratio to the first case. --out appends one JSON line per round, case and test as
they are measured (model, case, test, depth, round, tokens, seconds, t/s). The engine is the installed one
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


def parse_case(s: str) -> tuple[str, str, str, bool, dict[str, str]]:
    """``CTK/CTV[:KCENTER[:norot]][:VAR=VALUE ...]`` -> (ctk, ctv, k_center, rotation, {VAR: VALUE}); ValueError
    naming the form otherwise (VAR must be an engine variable: LLAMA_* or GGML_*)."""
    kv, *parts = s.split(":")
    n_plain = next((i for i, p in enumerate(parts) if "=" in p), len(parts))  # KCENTER, norot: before the VAR=VALUE items
    rest, items = parts[:n_plain], parts[n_plain:]
    env = dict(p.partition("=")[::2] for p in items)
    kc, rot = (rest + ["", ""])[:2]
    ctk, sep, ctv = kv.partition("/")
    if (not sep or not ctk or not ctv or rot not in ("", "norot") or len(rest) > 2 or any("=" not in p for p in items)
            or any(not k.startswith(("LLAMA_", "GGML_")) or not v for k, v in env.items())):
        raise ValueError(f"--case {s!r}: expected CTK/CTV[:KCENTER[:norot]][:VAR=VALUE ...] with VAR LLAMA_* or GGML_*, "
                         "e.g. turbo4/turbo4:full, turbo4/turbo4:off:norot (the Hadamard rotation off) or "
                         "turbo4/turbo4:full:LLAMA_K_CENTER_FOLD=0")
    return ctk, ctv, kc or "off", rot != "norot", env


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", help="a GGUF path or a `tqgguf models` name")
    ap.add_argument("--case", action="append", required=True, help="CTK/CTV[:KCENTER[:norot]][:VAR=VALUE ...]; the first is the reference")
    ap.add_argument("--depth", type=int, default=4096, help="cells in the cache before timing (default 4096)")
    ap.add_argument("--prompt", type=int, default=0, help="tokens of one prefill per case and round (default 0: none)")
    ap.add_argument("--tokens", type=int, default=32, help="tokens decoded per case and round (default 32; 0: none)")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--out", help="append JSON lines here as rounds finish")
    a = ap.parse_args()
    try:
        cases = [parse_case(c) for c in a.case]
        for ctk, ctv, *_ in cases:
            ggml_type_id(ctk), ggml_type_id(ctv)  # unknown names fail here, naming the allowed ones
    except ValueError as e:
        raise SystemExit(f"error: {e}") from None
    if a.prompt < 0 or a.tokens < 0 or a.prompt + a.tokens == 0 or a.depth < 0 or a.rounds < 1 or a.threads < 1:
        raise SystemExit("error: --prompt and --tokens >= 0 (not both 0), --depth >= 0, --rounds >= 1, -t >= 1")

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
    need = a.depth + max(a.prompt, a.tokens) + 1
    buf = (llama_cpp.llama_token * (len(text) // 2 + 16))()
    n = llama_cpp.llama_tokenize(vocab, text, len(text), buf, len(buf), True, False)
    if n < need:
        raise SystemExit(f"the text has {n} tokens, {need} are needed (depth + the larger of --prompt and --tokens + 1)")
    toks = np.frombuffer(buf, dtype=np.int32, count=n).copy()

    labels = [f"{ctk}/{ctv}:{kc}" + ("" if rot else ":norot") + "".join(f":{k}={v}" for k, v in env.items())
              for ctk, ctv, kc, rot, env in cases]
    ctxs = []
    for (ctk, ctv, kc, rot, env), label in zip(cases, labels):
        cp = llama_cpp.llama_context_default_params()
        cp.n_ctx, cp.n_batch, cp.n_ubatch = need + 256, max(512, a.prompt), 512
        cp.type_k, cp.type_v = ggml_type_id(ctk), ggml_type_id(ctv)
        cp.flash_attn_type = llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED
        cp.n_threads = cp.n_threads_batch = a.threads
        with engine_env(k_center=kc, rotation=rot, extra=env):  # env: read by the engine while it builds the context
            ctx = llama_cpp.llama_init_from_model(mdl, cp)
        if not ctx:
            raise SystemExit(f"could not create a context for {label}")
        ctxs.append(ctx)

    batch = llama_cpp.llama_batch_init(max(512, a.prompt), 0, 1)

    def decode(ctx, pos0: int, chunk: np.ndarray) -> None:
        for i, t in enumerate(chunk):
            batch.token[i], batch.pos[i], batch.n_seq_id[i] = int(t), pos0 + i, 1
            batch.seq_id[i][0] = 0
            batch.logits[i] = i == len(chunk) - 1
        batch.n_tokens = len(chunk)
        if llama_cpp.llama_decode(ctx, batch) != 0:
            raise SystemExit("llama_decode failed")

    for label, ctx in zip(labels, ctxs):
        t0 = time.perf_counter()
        for p in range(0, a.depth, 512):
            decode(ctx, p, toks[p:min(a.depth, p + 512)])
        print(f"filled {label} to {a.depth} in {time.perf_counter() - t0:.1f} s", file=sys.stderr)

    tests = ([f"pp{a.prompt}"] if a.prompt else []) + ([f"tg{a.tokens}"] if a.tokens else [])
    rates: dict[str, list[list[float]]] = {t: [[] for _ in cases] for t in tests}
    for r in range(a.rounds):
        for k, (label, ctx) in enumerate(zip(labels, ctxs)):
            for test in tests:
                n_tok = a.prompt if test.startswith("pp") else a.tokens
                src = toks[a.depth:a.depth + n_tok]
                t0 = time.perf_counter()
                if test.startswith("pp"):
                    decode(ctx, a.depth, src)
                else:
                    for i in range(n_tok):
                        decode(ctx, a.depth + i, src[i:i + 1])
                dt = time.perf_counter() - t0
                if not llama_cpp.llama_memory_seq_rm(llama_cpp.llama_get_memory(ctx), 0, a.depth, -1):
                    raise SystemExit("could not remove the timed cells from the cache")
                rates[test][k].append(n_tok / dt)
                if a.out:
                    with open(a.out, "a") as f:
                        f.write(json.dumps({"model": path.name, "case": label, "test": test, "depth": a.depth,
                                            "round": r, "tokens": n_tok, "seconds": dt, "t_s": n_tok / dt}) + "\n")
    llama_cpp.llama_batch_free(batch)
    for ctx in ctxs:
        llama_cpp.llama_free(ctx)
    llama_cpp.llama_model_free(mdl)

    for test in tests:
        print(f"\n{path.name}, {test} @ d{a.depth}, {a.rounds} interleaved rounds, {a.threads} threads (t/s)")
        print("| case | rounds | median | ratio to first (median of rounds) |")
        print("|---|---|---|---|")
        for k, label in enumerate(labels):
            x = rates[test][k]
            ratio = statistics.median(u / v for u, v in zip(x, rates[test][0]))
            print(f"| {label} | {', '.join(f'{v:.1f}' for v in x)} | {statistics.median(x):.2f} | {ratio:.3f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
