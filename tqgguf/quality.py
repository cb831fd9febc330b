"""Quality metrics of a KV-cache configuration, computed the way llama-perplexity computes them
(tools/perplexity/perplexity.cpp, pinned tree): perplexity, and KL divergence against an
f16 baseline (``--kl-divergence``). The one module for metrics; ``tqgguf ppl`` and
``tqgguf sweep`` are layers over it.

Perplexity
----------
Method: the whole text is tokenized once (BOS added when the vocab adds BOS, special tokens
not parsed); it is cut into ``n_chunk = min(--chunks, n_tokens // n_ctx)`` chunks of n_ctx
tokens; for each chunk the KV cache is cleared, the chunk's first token is replaced by BOS
when the vocab adds BOS, the chunk is decoded in n_batch pieces, and only the second half
is scored: positions first = n_ctx/2 … n_ctx-2 predict tokens first+1 … n_ctx-1.
Per token: -log softmax (max-subtracted float exp summed in double). After each chunk the
running PPL = exp(mean NLL) is printed as ``[i]ppl,``; the final uncertainty is
``sqrt((E[nll²] - E[nll]²)/(count-1)) · PPL``, as upstream prints it.

KL divergence
-------------
Reference: tools/perplexity/perplexity.cpp in the pinned tree (``log_softmax`` with the
uint16 base log-probs, ``kl_divergence``). The baseline is stored in llama-perplexity's own
``--kl-divergence-base`` file format, so either tool can read the other's file:

    "_logits_" | n_ctx:int32 | n_vocab:int32 | n_chunk:int32 | tokens:int32[n_ctx*n_chunk]
    then per chunk, per scored position (n_ctx-1-n_ctx/2 of them), nv = 2*ceil(n_vocab/2)+4
    uint16: [scale:f32][min_log_prob:f32][q_0 .. q_{n_vocab-1}][pad]
    log p_i ≈ scale*q_i + min_log_prob, covering the 16 nats below the top logit.

That is 2 bytes per vocab entry per scored token (SmolLM2, 20 chunks of 512: 0.5 GB),
instead of 4 for float logits; a JSON sidecar records model, text, n_ctx and chunks so a
baseline from another model or setting is refused with the reason.

Differences from upstream, stated: statistics are accumulated per chunk in numpy
(float32 element math, float64 sums) instead of per thread in C; results agree to the
printed digits (see tests/test_sweep.py and scripts/tools/check_kld_vs_llama_perplexity.py).
"""
from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

from .fsutil import publish
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


# ----------------------------------------------------------------------------- KL divergence

MAGIC = b"_logits_"
F32 = np.float32


class BaselineMismatchError(ValueError):
    """A baseline file belongs to another model, text, n_ctx or vocab (message says which)."""


def nv_of(n_vocab: int) -> int:
    return 2 * ((n_vocab + 1) // 2) + 4


def encode_base_rows(logits: np.ndarray) -> np.ndarray:
    """float32 logits (n, n_vocab) -> uint16 (n, nv) rows in llama-perplexity's format."""
    n, n_vocab = logits.shape
    out = np.zeros((n, nv_of(n_vocab)), dtype=np.uint16)
    mx = logits.max(axis=1)
    mn = np.maximum(logits.min(axis=1), (mx - F32(16)).astype(F32))
    sum_exp = np.exp(logits - mx[:, None]).sum(axis=1, dtype=np.float64)
    lse = np.log(sum_exp).astype(F32)
    min_log_prob = ((mn - mx).astype(F32) - lse).astype(F32)
    scale = ((mx - mn).astype(F32) / F32(65535)).astype(F32)
    with np.errstate(divide="ignore"):
        inv = np.where(scale != 0, F32(1) / scale, F32(0)).astype(F32)
    q = np.rint(inv[:, None] * (logits - mn[:, None])).astype(np.float32)
    q = np.where(logits > mn[:, None], q, 0)
    out[:, 4:4 + n_vocab] = np.clip(q, 0, 65535).astype(np.uint16)
    head = np.stack([scale, min_log_prob], axis=1).astype(F32).view(np.uint16)
    out[:, :4] = head
    return out


def decode_base_rows(rows: np.ndarray, n_vocab: int) -> tuple[np.ndarray, np.ndarray]:
    """uint16 (n, nv) -> (scale, min_log_prob) float32 (n,) each and q uint16 (n, n_vocab)."""
    head = np.ascontiguousarray(rows[:, :4]).view(F32)
    return head[:, 0], head[:, 1], rows[:, 4:4 + n_vocab]


@dataclass
class KLDStats:
    """Running sums of llama-perplexity's kl_divergence_result plus per-token values."""

    sum_nll: float = 0.0
    sum_nll2: float = 0.0
    sum_nll_base: float = 0.0
    sum_nll_base2: float = 0.0
    sum_nll_nll_base: float = 0.0
    sum_kld: float = 0.0
    sum_kld2: float = 0.0
    sum_p_diff: float = 0.0
    sum_p_diff2: float = 0.0
    sum_p_diff4: float = 0.0
    max_p_diff: float = 0.0
    n_same_top: int = 0
    count: int = 0
    kld_values: list = field(default_factory=list, repr=False)
    p_diff_values: list = field(default_factory=list, repr=False)

    def add(self, logits: np.ndarray, base_rows: np.ndarray, targets: np.ndarray) -> None:
        """Accumulate one chunk: logits float32 (n, n_vocab), base rows uint16 (n, nv), targets int (n,)."""
        n, n_vocab = logits.shape
        scale, min_lp, q = decode_base_rows(base_rows, n_vocab)
        idx = np.arange(n)
        mx = logits.max(axis=1)
        imax = logits.argmax(axis=1)
        sum_exp = np.exp(logits - mx[:, None]).sum(axis=1, dtype=np.float64)
        lse = np.log(sum_exp).astype(F32)
        nll = ((mx + lse).astype(F32) - logits[idx, targets]).astype(F32)
        nll_base = (-(scale * q[idx, targets].astype(F32) + min_lp)).astype(F32)
        top = (mx + lse).astype(F32)
        p_log_base = (scale[:, None] * q.astype(F32) + min_lp[:, None]).astype(F32)
        imax_base = p_log_base.argmax(axis=1)
        keep = p_log_base > F32(-16)
        terms = np.exp(p_log_base) * (p_log_base - logits + top[:, None])
        kld = np.where(keep, terms, F32(0)).sum(axis=1, dtype=np.float64)
        p_diff = (np.exp(-nll) - np.exp(-nll_base)).astype(F32)
        nll64, nb64, pd64 = nll.astype(np.float64), nll_base.astype(np.float64), p_diff.astype(np.float64)
        self.sum_nll += nll64.sum()
        self.sum_nll2 += (nll64 * nll64).sum()
        self.sum_nll_base += nb64.sum()
        self.sum_nll_base2 += (nb64 * nb64).sum()
        self.sum_nll_nll_base += (nll64 * nb64).sum()
        self.sum_kld += kld.sum()
        self.sum_kld2 += (kld * kld).sum()
        self.sum_p_diff += pd64.sum()
        self.sum_p_diff2 += (pd64 ** 2).sum()
        self.sum_p_diff4 += (pd64 ** 4).sum()
        self.max_p_diff = max(self.max_p_diff, float(np.abs(p_diff).max()))
        self.n_same_top += int((imax == imax_base).sum())
        self.count += n
        self.kld_values.extend(kld.astype(F32).tolist())
        self.p_diff_values.extend(p_diff.tolist())

    @property
    def finite(self) -> bool:
        return math.isfinite(self.sum_kld) and math.isfinite(self.sum_nll)

    def summary(self) -> dict:
        """Final statistics with llama-perplexity's formulas (means, uncertainties, percentiles)."""
        c = self.count

        def mu(s, s2):
            f = s / c
            df = s2 / c - f * f
            return f, (math.sqrt(df / (c - 1)) if df > 0 and c > 10 else 0.0)

        def cov(a, b, ab):
            return (ab / c - (a / c) * (b / c)) / (c - 1) if c >= 10 else 0.0

        lp, lp_u = mu(self.sum_nll, self.sum_nll2)
        lb, lb_u = mu(self.sum_nll_base, self.sum_nll_base2)
        lcov = cov(self.sum_nll, self.sum_nll_base, self.sum_nll_nll_base)
        ppl, ppl_base = math.exp(lp), math.exp(lb)
        ratio_u = math.sqrt(max(lp_u ** 2 + lb_u ** 2 - 2 * lcov, 0.0))
        kl, kl_u = mu(self.sum_kld, self.sum_kld2)
        mse, mse_u = mu(self.sum_p_diff2, self.sum_p_diff4)
        rms = math.sqrt(mse)
        top = self.n_same_top / c
        kv = np.sort(np.asarray(self.kld_values, dtype=F32))

        def pct(v, fr):
            p = fr * (len(v) - 1)
            ip = int(p)
            p -= ip
            return float((1 - p) * v[ip] + p * v[min(ip + 1, len(v) - 1)])

        return {
            "ppl": ppl, "ppl_err": ppl * lp_u, "ppl_base": ppl_base, "ppl_base_err": ppl_base * lb_u,
            "ppl_ratio_base": ppl / ppl_base, "ln_ppl_ratio": lp - lb, "ln_ppl_ratio_err": ratio_u,
            "kld_mean": kl, "kld_err": kl_u, "kld_p99": pct(kv, 0.99), "kld_median": pct(kv, 0.5), "kld_max": float(kv[-1]),
            "same_top_p": 100.0 * top, "same_top_p_err": 100.0 * math.sqrt(top * (1 - top) / (c - 1)),
            "rms_dp": 100.0 * rms, "rms_dp_err": 100.0 * (0.5 / rms * mse_u if rms > 0 else 0.0),
            "tokens": c,
        }


@dataclass
class BaselineMeta:
    """Identity of a baseline file (the JSON sidecar ``<file>.json``)."""

    model_sha256: str
    model_name: str
    text_sha256: str
    text_label: str
    n_ctx: int
    n_chunk: int
    n_vocab: int

    def check_compatible(self, other: "BaselineMeta", path: Path) -> None:
        """Raise BaselineMismatchError naming every field that differs (chunks may be fewer)."""
        problems = []
        if self.model_sha256 != other.model_sha256:
            problems.append(f"model {self.model_name} (sha256 {self.model_sha256[:12]}) != {other.model_name} "
                            f"({other.model_sha256[:12]})")
        if self.text_sha256 != other.text_sha256:
            problems.append(f"text {self.text_label} != {other.text_label}")
        if self.n_ctx != other.n_ctx:
            problems.append(f"n_ctx {self.n_ctx} != {other.n_ctx}")
        if self.n_vocab != other.n_vocab:
            problems.append(f"n_vocab {self.n_vocab} != {other.n_vocab}")
        if self.n_chunk < other.n_chunk:
            problems.append(f"it has {self.n_chunk} chunks, {other.n_chunk} needed")
        if problems:
            raise BaselineMismatchError(f"baseline {path} does not match this run: " + "; ".join(problems))


class BaselineWriter:
    """Write a baseline file chunk by chunk (atomic: ``.part`` renamed on ``close``)."""

    def __init__(self, path: Path, meta: BaselineMeta, tokens: np.ndarray):
        self.path, self.meta = Path(path), meta
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.tmp = self.path.with_suffix(self.path.suffix + ".part")
        self.f = open(self.tmp, "wb")
        self.f.write(MAGIC)
        self.f.write(np.array([meta.n_ctx, meta.n_vocab, meta.n_chunk], dtype=np.int32).tobytes())
        self.f.write(np.asarray(tokens[: meta.n_ctx * meta.n_chunk], dtype=np.int32).tobytes())

    def add_chunk(self, rows: np.ndarray) -> None:
        self.f.write(np.ascontiguousarray(rows, dtype=np.uint16).tobytes())

    def close(self) -> None:
        self.f.close()
        publish(self.tmp, self.path)
        Path(str(self.path) + ".json").write_text(json.dumps(asdict(self.meta), indent=1))

    def abort(self) -> None:
        self.f.close()
        self.tmp.unlink(missing_ok=True)


class BaselineReader:
    """Read a baseline file (ours or llama-perplexity's) chunk by chunk via a memory map."""

    def __init__(self, path: Path):
        self.path = Path(path)
        with open(self.path, "rb") as f:
            if f.read(8) != MAGIC:
                raise BaselineMismatchError(f"{path} is not a llama-perplexity logits file (no _logits_ magic)")
            self.n_ctx, self.n_vocab, self.n_chunk = (int(v) for v in np.frombuffer(f.read(12), dtype=np.int32))
        self.tokens = np.memmap(self.path, dtype=np.int32, mode="r", offset=20, shape=(self.n_ctx * self.n_chunk,))
        self.nv = nv_of(self.n_vocab)
        self.n_tok = self.n_ctx - 1 - self.n_ctx // 2
        off = 20 + 4 * self.n_ctx * self.n_chunk
        expect = off + 2 * self.nv * self.n_tok * self.n_chunk
        if self.path.stat().st_size != expect:
            raise BaselineMismatchError(f"{path} is truncated or corrupt ({self.path.stat().st_size} bytes, {expect} expected)")
        self.rows = np.memmap(self.path, dtype=np.uint16, mode="r", offset=off, shape=(self.n_chunk, self.n_tok, self.nv))
        side = Path(str(self.path) + ".json")
        self.meta = BaselineMeta(**json.loads(side.read_text())) if side.exists() else None

    def chunk(self, c: int) -> np.ndarray:
        return np.asarray(self.rows[c])
