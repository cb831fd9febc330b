"""More than 256 sequences in one context (issue 26 item 4, patches/0011-max-seq-1024.patch).

Upstream llama.cpp refuses ``n_seq_max > 256`` (LLAMA_MAX_SEQ, src/llama-cparams.h); the patch
raises it to 1024. These tests run the engine on SmolLM2-135M (CPU) with a turbo4 cache: 512
sequences, each in its own KV stream, decoded in one batch, must give every sequence the logits
it gets when decoded alone — a sequence id past 256 that landed in another sequence's cells or
stream, or a seq bitset that wrapped, would mix two prompts and change them.
"""
from __future__ import annotations

import ctypes
import random

import numpy as np
import pytest

from tqgguf.cachetypes import MAX_SEQUENCES as MAX_SEQ  # LLAMA_MAX_SEQ of patch 0011

pytestmark = pytest.mark.engine

N_SEQ = 512          # more than upstream's 256
PROMPT = 4           # tokens per sequence


@pytest.fixture(scope="module")
def smol(model_file):
    return model_file("smollm2-135m")


def _engine_limit() -> int:
    import llama_cpp

    return int(llama_cpp.llama_max_parallel_sequences())


def _skip_before_patch():
    most = _engine_limit()
    if most < N_SEQ:
        pytest.skip(f"the installed engine holds at most {most} sequences (built before patch 0011; "
                    f"`tqgguf build` rebuilds it)")


def _decode_last_logits(ctx, n_vocab: int, prompts: list[list[int]], seqs: list[int]) -> np.ndarray:
    """Decode every prompt (prompts[i] as sequence seqs[i], positions 0..) in one llama_batch;
    the float32 logits of each prompt's last token, [len(prompts), n_vocab]."""
    import llama_cpp

    n = sum(len(p) for p in prompts)
    batch = llama_cpp.llama_batch_init(n, 0, 1)
    try:
        last = []
        i = 0
        for p, s in zip(prompts, seqs):
            for pos, tok in enumerate(p):
                batch.token[i] = tok
                batch.pos[i] = pos
                batch.n_seq_id[i] = 1
                batch.seq_id[i][0] = s
                batch.logits[i] = pos == len(p) - 1
                i += 1
            last.append(i - 1)
        batch.n_tokens = n
        rc = llama_cpp.llama_decode(ctx, batch)
        assert rc == 0, f"llama_decode returned {rc}"
        out = np.empty((len(prompts), n_vocab), dtype=np.float32)
        for j, idx in enumerate(last):
            ptr = llama_cpp.llama_get_logits_ith(ctx, idx)
            out[j] = np.ctypeslib.as_array(ctypes.cast(ptr, ctypes.POINTER(ctypes.c_float)), shape=(n_vocab,))
        return out
    finally:
        llama_cpp.llama_batch_free(batch)


def test_512_sequences_decode_as_if_alone(smol):
    """512 sequences of 4 random tokens, one KV stream each, turbo4 K/V, one batch of 2048 tokens:
    the last-token logits of sequences 0, 255, 256, 300 and 511 are bit for bit those of the same
    prompt decoded alone in a one-sequence context. Any difference in attention's rounding between
    the two (ggml's per-query loop for the streams against the grouped decode alone gave 0.70 of a
    31.5 spread for sequence 511: the turbo cache turns a last bit into another code) shows."""
    import llama_cpp

    from tqgguf.runtime import open_context, open_model

    _skip_before_patch()
    eng = open_model(smol, ctk="turbo4", ctv="turbo4", n_ctx=256, flash_attn="on")
    try:
        n_vocab = llama_cpp.llama_vocab_n_tokens(llama_cpp.llama_model_get_vocab(eng.llama.model))
        rng = random.Random(26)
        prompts = [[rng.randrange(n_vocab) for _ in range(PROMPT)] for _ in range(N_SEQ)]
        n_tok = N_SEQ * PROMPT
        big = open_context(eng, n_ctx=N_SEQ * 16, n_batch=n_tok, n_ubatch=512, n_seq_max=N_SEQ)
        try:
            assert big.report.k_type == "turbo4"
            got = _decode_last_logits(big.ctx, n_vocab, prompts, list(range(N_SEQ)))
        finally:
            big.close()
        for s in (0, 255, 256, 300, N_SEQ - 1):
            one = open_context(eng, n_ctx=16, n_batch=16, n_ubatch=16, n_seq_max=1)
            try:
                ref = _decode_last_logits(one.ctx, n_vocab, [prompts[s]], [0])[0]
            finally:
                one.close()
            spread = float(ref.max() - ref.min())
            diff = float(np.abs(got[s] - ref).max())
            assert np.array_equal(got[s].view(np.uint32), ref.view(np.uint32)), \
                f"sequence {s}: max |logit difference| {diff:.4g} (spread {spread:.4g})"
            assert int(got[s].argmax()) == int(ref.argmax()), f"sequence {s}: another next token"
        # and the sequences are not all the same (the comparison above could not tell them apart)
        assert float(np.abs(got[256] - got[0]).max()) > 0.1
    finally:
        eng.close()


def test_more_than_the_limit_is_refused_with_the_limit(smol):
    """n_seq_max = LLAMA_MAX_SEQ + 1 is refused when the context is created, and the error says
    the limit; the engine reports the limit as llama_max_parallel_sequences()."""
    from tqgguf.runtime import EngineError, open_context, open_model

    _skip_before_patch()
    assert _engine_limit() == MAX_SEQ
    eng = open_model(smol, ctk="turbo4", ctv="turbo4", n_ctx=256, flash_attn="on")
    try:
        with pytest.raises(EngineError, match=f"n_seq_max must be <= {MAX_SEQ}"):
            open_context(eng, n_ctx=(MAX_SEQ + 1) * 16, n_batch=512, n_ubatch=512, n_seq_max=MAX_SEQ + 1)
    finally:
        eng.close()
