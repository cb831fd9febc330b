"""Perplexity the way llama-perplexity computes it (tools/perplexity/perplexity.cpp, pinned tree).

Method: the whole text is tokenized once (BOS added when the vocab adds BOS, special tokens
not parsed); it is cut into ``n_chunk = min(--chunks, n_tokens // n_ctx)`` chunks of n_ctx
tokens; for each chunk the KV cache is cleared, the chunk's first token is replaced by BOS
when the vocab adds BOS, the chunk is decoded in n_batch pieces, and only the second half
is scored: positions first = n_ctx/2 … n_ctx-2 predict tokens first+1 … n_ctx-1.
Per token: -log softmax (max-subtracted float exp summed in double). After each chunk the
running PPL = exp(mean NLL) is printed as ``[i]ppl,``; the final uncertainty is
``sqrt((E[nll²] - E[nll]²)/(count-1)) · PPL``, as upstream prints it.
"""
from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from typing import Callable, Iterator

import numpy as np

from .runtime import Engine


class TextTooShortError(ValueError):
    """The text has fewer than 2·n_ctx tokens (llama-perplexity refuses these too)."""


@dataclass
class PerplexityResult:
    """Result of ``perplexity``: ppl ± ppl_err over ``count`` scored tokens in ``chunks`` chunks;
    ``chunk_ppl`` is the running PPL after each chunk; ``nll``/``nll2`` are sums (nats)."""

    ppl: float
    ppl_err: float
    chunks: int
    n_ctx: int
    count: int
    n_tokens: int
    chunk_ppl: list[float] = field(default_factory=list)
    nll: float = 0.0
    nll2: float = 0.0
    seconds: float = 0.0

    def to_dict(self) -> dict:
        return asdict(self)


def tokenize(engine: Engine, text: str) -> np.ndarray:
    """Tokenize like llama-perplexity (add_special=True, parse_special=False); int32 array."""
    toks = engine.llama.tokenize(text.encode("utf-8"), add_bos=True, special=False)
    return np.asarray(toks, dtype=np.int32)


def chunk_logits(engine: Engine, tokens: np.ndarray, n_ctx: int, n_batch: int, n_chunk: int) -> Iterator[tuple[int, np.ndarray]]:
    """Decode chunk after chunk; yield (chunk index, float32 logits (n_ctx-1-first, n_vocab))
    of the scored positions first … n_ctx-2 (first = n_ctx // 2)."""
    import llama_cpp

    llama = engine.llama
    ctx = llama._ctx.ctx
    vocab = llama_cpp.llama_model_get_vocab(llama._model.model)
    add_bos = bool(llama_cpp.llama_vocab_get_add_bos(vocab))
    bos = llama_cpp.llama_vocab_bos(vocab)
    n_vocab = llama.n_vocab()
    first = n_ctx // 2
    batch = llama_cpp.llama_batch_init(n_batch, 0, 1)
    try:
        for c in range(n_chunk):
            start = c * n_ctx
            llama_cpp.llama_memory_clear(llama_cpp.llama_get_memory(ctx), True)
            out = []
            for j in range(0, n_ctx, n_batch):
                size = min(n_ctx - j, n_batch)
                batch.n_tokens = size
                n_out = 0
                for k in range(size):
                    pos = j + k
                    tok = int(tokens[start + pos])
                    if add_bos and pos == 0:
                        tok = bos
                    batch.token[k] = tok
                    batch.pos[k] = pos
                    batch.n_seq_id[k] = 1
                    batch.seq_id[k][0] = 0
                    need = pos >= first
                    batch.logits[k] = need
                    n_out += need
                rc = llama_cpp.llama_decode(ctx, batch)
                if rc != 0:
                    raise RuntimeError(f"llama_decode failed (code {rc}) in chunk {c + 1}")
                if n_out:
                    ptr = llama_cpp.llama_get_logits(ctx)
                    out.append(np.ctypeslib.as_array(ptr, shape=(n_out, n_vocab)).copy())
            logits = np.concatenate(out, axis=0)[: n_ctx - 1 - first]
            yield c, logits
    finally:
        llama_cpp.llama_batch_free(batch)


def target_log_probs(logits: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """log p(target) per row as llama-perplexity computes it: float32 exp of (logit - max),
    summed in float64. float32 (n, n_vocab), int (n,) -> float64 (n,)."""
    mx = logits.max(axis=1)
    sum_exp = np.exp(logits - mx[:, None]).sum(axis=1, dtype=np.float64)
    picked = logits[np.arange(len(targets)), targets] - mx
    return picked.astype(np.float64) - np.log(sum_exp)


def check_length(n_tokens: int, n_ctx: int) -> None:
    if n_tokens < 2 * n_ctx:
        raise TextTooShortError(f"the text tokenizes to only {n_tokens} tokens; perplexity with n_ctx={n_ctx} "
                                f"needs at least {2 * n_ctx} (use a longer text or a smaller -c)")


def perplexity(engine: Engine, text: str, *, n_ctx: int = 512, n_batch: int | None = None, chunks: int | None = None,
               on_chunk: Callable[[int, int, float], None] | None = None) -> PerplexityResult:
    """Perplexity of ``text`` under ``engine`` (llama-perplexity's method; see module doc).

    Args:
        engine: from ``tqgguf.runtime.open_model(..., n_ctx=n_ctx, logits_all=False)``.
        n_ctx: chunk length in tokens; n_batch: decode batch (default min(n_ctx, 512)).
        chunks: maximum number of chunks (None = all).
        on_chunk: called as (chunk number from 1, n_chunk, running PPL).
    Raises:
        TextTooShortError: fewer than 2·n_ctx tokens.
        RuntimeError: llama_decode failed.
    """
    t0 = time.time()
    tokens = tokenize(engine, text)
    check_length(len(tokens), n_ctx)
    n_batch = n_batch or min(n_ctx, 512)
    n_chunk = len(tokens) // n_ctx if chunks is None else min(chunks, len(tokens) // n_ctx)
    first = n_ctx // 2
    nll = nll2 = 0.0
    count = 0
    running = []
    for c, logits in chunk_logits(engine, tokens, n_ctx, n_batch, n_chunk):
        targets = tokens[c * n_ctx + first + 1: c * n_ctx + n_ctx]
        v = -target_log_probs(logits, targets)
        nll += float(v.sum())
        nll2 += float((v * v).sum())
        count += len(v)
        running.append(math.exp(nll / count))
        if on_chunk:
            on_chunk(c + 1, n_chunk, running[-1])
    mean = nll / count
    var = nll2 / count - mean * mean
    ppl = math.exp(mean)
    err = math.sqrt(var / (count - 1)) * ppl if var > 0 else float("nan")
    return PerplexityResult(ppl, err, n_chunk, n_ctx, count, len(tokens), running, nll, nll2, time.time() - t0)
