"""``tqgguf mix``: choose per-layer K/V types under a bit budget from measured sensitivities.

1. **Sensitivity.** On a calibration text (default: the built-in pydoc corpus, which is not
   the WikiText-2 evaluation text), the f16/f16 logits are computed once. Then, for every
   layer l, side (K or V) and candidate type t, only that one cache is lowered to t (every
   other layer and side stays f16) and the mean KL divergence of the scored positions
   against f16 is measured (llama-perplexity's KLD, tqgguf.quality.KLDStats):
   s[l, side, t]. f16 has s = 0.
2. **Prediction.** A plan's KLD is predicted as the sum of its choices' s (first-order:
   small independent perturbations of the output distribution add; HAWQ-style mixed
   precision makes the same additivity assumption for weights, Dong et al., 2019), with
   one correction: lowering any layer's K (V) switches the Hadamard rotation on for the
   whole K (V) cache, which alone costs a KLD floor that every single-layer s contains
   (measured on SmolLM2, pydoc corpus: one layer's K at q8_0 0.0036, all 30 layers' K at
   q8_0 0.0040). The floor of a side is taken as its smallest s; each s counts only above
   it, and the floor once per side that has a lowered cache.
3. **Choice.** Minimise the predicted KLD subject to the average bits per stored value
   (each layer's K and V weighted by its values per token) ≤ B: a multiple-choice knapsack,
   solved exactly by dynamic programming over bits in 1/32-bit steps.
4. **Check and fallback.** The prediction is first-order and made on a short text, so the
   chosen plan is run whole on the same calibration chunks, together with every uniform
   configuration that fits the budget (each K/V pair of f16 and the candidate types, the
   K/V-asymmetric ones included, e.g. turbo4/turbo3): whichever measures the lowest KLD is
   kept (:func:`choose_checked`). On SmolLM2 at 4.25 bits the optimised plan measured
   0.0453 on WikiText-2 where uniform turbo4/turbo4 measures 0.0449; a uniform
   configuration that is better is not beaten by a plan file that only predicts to be.
5. The plan is written as JSON (tqgguf.kvplan plan file) with the model's sha256, its layer
   count, the predicted and measured KLD, the achieved bits/value, every checked candidate
   with which was kept and by how much, and the sensitivity table. ``--kv-plan FILE``
   applies it; a plan for another model file is refused.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from .cachetypes import check_cache_type, type_info
from .fsutil import atomic_output, sha256_file_cached
from .kvplan import PLAN_FILE_FORMAT, bits_per_value, model_layers
from .quality import KLDStats, chunk_logits, encode_base_rows, tokenize
from .runtime import open_model

#: lowered types tried per layer by default, best first
DEFAULT_TYPES = ("q8_0", "turbo4", "turbo3")
_STEP = 32  # DP resolution: 1/32 bit per value


class MixError(ValueError):
    """A mix request that cannot be served (budget, types, text); the message says why."""


@dataclass
class Sensitivity:
    """``kld[(layer, side, type)]``: mean KLD vs f16 with only that cache lowered (side "k"
    or "v"); ``tokens``: scored positions per measurement."""

    kld: dict[tuple[int, str, str], float]
    n_layer: int
    types: tuple[str, ...]
    tokens: int


def bits_of(t: str) -> float:
    """Stored bits per value of cache type ``t`` (from the built library)."""
    return type_info(t).bits_per_value


def check_budget(bits: float, types: tuple[str, ...]) -> None:
    """Raise MixError when ``bits`` is not a finite number, below the smallest candidate type or above f16."""
    if not math.isfinite(bits):
        raise MixError(f"--bits {bits:g} is not a number of bits per value; give one between the smallest "
                       f"type's and 16, e.g. --bits 4.25")
    low = min(types, key=bits_of)
    if bits < bits_of(low):
        raise MixError(f"--bits {bits:g} is below the smallest type: {low} stores {bits_of(low):.4g} bits/value; "
                       f"allowed: {bits_of(low):.4g} to 16 (or add a smaller type with --types)")
    if bits > 16:
        raise MixError(f"--bits {bits:g} is above f16 (16 bits/value): nothing to choose")


def store_path(out_dir: str | os.PathLike, model_path: str | os.PathLike, text: str, n_ctx: int, chunks: int, *,
               gpu: bool = False) -> Path:
    """Where :func:`measure` keeps the sensitivities of this model file, calibration text,
    n_ctx and chunk count (so a rerun resumes and another budget reuses them):
    ``OUT_DIR/<model stem>.kv-sens-<12 hex of sha256(model sha256, text sha256, n_ctx, chunks)>.jsonl``;
    gpu (measured with -ngl other than 0, whose KLDs differ from the CPU's): ``"gpu"`` is
    added to the hashed key, so GPU and CPU measurements are never mixed."""
    key = json.dumps([sha256_file_cached(model_path), hashlib.sha256(text.encode()).hexdigest(), n_ctx, chunks]
                     + (["gpu"] if gpu else []))
    return Path(out_dir) / f"{Path(model_path).stem}.kv-sens-{hashlib.sha256(key.encode()).hexdigest()[:12]}.jsonl"


def _load_store(path: Path | None) -> dict[tuple[int, str, str], float]:
    """Measurements already in ``path`` (a line cut by a kill is skipped: that one reruns)."""
    done: dict[tuple[int, str, str], float] = {}
    if path is None or not path.exists():
        return done
    for line in path.read_text().splitlines():
        try:
            row = json.loads(line)
            done[(int(row["layer"]), str(row["side"]), str(row["type"]))] = float(row["kld"])
        except (ValueError, KeyError, TypeError):
            continue
    return done


def measure(model_path: str | os.PathLike, text: str, *, types: tuple[str, ...] = DEFAULT_TYPES, n_ctx: int = 256,
            chunks: int = 2, n_threads: int | None = None, progress: Callable[[str], None] | None = None,
            store: str | os.PathLike | None = None, offload=None) -> Sensitivity:
    """Measure :class:`Sensitivity` of every layer's K and V on ``text``.

    n_ctx: tokens per chunk (the second half of each is scored); chunks: how many;
    offload: where every run's model goes (tqgguf.devices.Offload; None: the CPU); GPUOffloadError
        when the engine cannot place it.
    Costs 1 + 2 * n_layer * len(types) runs over chunks * n_ctx tokens. store: a JSONL file
    (:func:`store_path` names one per model/text/n_ctx/chunks) that each measurement is
    appended to as it is made; measurements already there are not repeated.
    Raises MixError for a text shorter than one chunk, EngineError from the engine,
    OSError when the store cannot be written.
    """
    store = Path(store) if store is not None else None
    done = _load_store(store)
    layers = model_layers(model_path)
    todo = [(il, side, t) for il in range(layers.n_layer) for side in ("k", "v") for t in types
            if (il, side, t) not in done]
    cal = _calibrate(model_path, text, n_ctx, chunks, n_threads, offload, with_logits=bool(todo))
    out: dict[tuple[int, str, str], float] = {}
    for il in range(layers.n_layer):
        for side in ("k", "v"):
            for t in types:
                if (il, side, t) in done:
                    out[(il, side, t)] = done[(il, side, t)]
                    continue
                kt, vt = (t, "f16") if side == "k" else ("f16", t)
                out[(il, side, t)] = _plan_kld(model_path, cal, f"{il}:{kt}/{vt}", n_threads, offload)
                if store is not None:
                    with open(store, "a") as f:
                        f.write(json.dumps({"layer": il, "side": side, "type": t, "kld": out[(il, side, t)]}) + "\n")
                if progress:
                    progress(f"layer {il} {side.upper()} {t}: KLD {out[(il, side, t)]:.6f}")
    return Sensitivity(out, layers.n_layer, tuple(types), cal.scored)


@dataclass
class _Calibration:
    """Calibration tokens and, when computed, the f16 logits' rows (encode_base_rows) per chunk."""

    tokens: np.ndarray
    n_ctx: int
    n_chunk: int
    rows: list

    @property
    def scored(self) -> int:
        return self.n_chunk * (self.n_ctx - 1 - self.n_ctx // 2)


def _calibrate(model_path, text: str, n_ctx: int, chunks: int, n_threads: int | None, offload=None, *,
               with_logits: bool = True) -> _Calibration:
    """Tokenize ``text`` and (with_logits) compute the f16/f16 logits of its first chunks."""
    base = open_model(model_path, ctk="f16", ctv="f16", n_ctx=n_ctx, flash_attn="on", n_threads=n_threads,
                      offload=offload, k_center="auto")
    try:
        tokens = tokenize(base, text)
        if len(tokens) < n_ctx:
            raise MixError(f"the calibration text has {len(tokens)} tokens, shorter than one chunk of n_ctx {n_ctx}; "
                           "give a longer text (-f) or a smaller -c")
        n_chunk = min(chunks, len(tokens) // n_ctx)
        rows = [encode_base_rows(lg) for _, lg in chunk_logits(base, tokens, n_ctx, min(n_ctx, 512), n_chunk)] \
            if with_logits else []  # everything stored: the f16 logits are not needed
    finally:
        base.close()
    return _Calibration(tokens, n_ctx, n_chunk, rows)


def _plan_kld(model_path, cal: _Calibration, kv_plan: str, n_threads: int | None, offload=None) -> float:
    """Mean KLD against f16 over the calibration chunks with ``kv_plan`` (other layers f16/f16)."""
    n_ctx, first = cal.n_ctx, cal.n_ctx // 2
    eng = open_model(model_path, ctk="f16", ctv="f16", n_ctx=n_ctx, flash_attn="on", n_threads=n_threads,
                     offload=offload, kv_plan=kv_plan, k_center="auto")
    try:
        st = KLDStats()
        for c, lg in chunk_logits(eng, cal.tokens, n_ctx, min(n_ctx, 512), cal.n_chunk):
            st.add(lg, cal.rows[c], cal.tokens[c * n_ctx + first + 1:(c + 1) * n_ctx])
    finally:
        eng.close()
    return st.sum_kld / st.count


def measure_plans(model_path: str | os.PathLike, text: str, plans: list[str], *, n_ctx: int = 256, chunks: int = 2,
                  n_threads: int | None = None, progress: Callable[[str], None] | None = None,
                  offload=None) -> list[float]:
    """The measured mean KLD against f16 of each whole plan (an explicit map, -ctk/-ctv f16
    elsewhere) on the calibration chunks :func:`measure` used: how well the additive
    prediction held on the text it was made from. Costs 1 + len(plans) runs; progress gets
    one line per plan. Raises MixError for a text shorter than one chunk, EngineError."""
    cal = _calibrate(model_path, text, n_ctx, chunks, n_threads, offload)
    out = []
    for p in plans:
        out.append(_plan_kld(model_path, cal, p, n_threads, offload))
        if progress:
            progress(f"{p}: KLD {out[-1]:.6f}")
    return out


@dataclass
class Candidate:
    """One configuration :func:`choose_checked` runs on the calibration text.

    label: "optimised plan" or "uniform K/V"; types: (K, V) per layer; bits: its average
    bits per stored value (K and V weighted by their values per token); predicted: the
    additive prediction (:func:`predict`); measured: mean KLD against f16 on the
    calibration chunks (None until run).
    """

    label: str
    types: list[tuple[str, str]]
    bits: float
    predicted: float
    measured: float | None = None

    @property
    def plan(self) -> str:
        """The explicit map (:func:`plan_map`) that applies it under -ctk/-ctv f16."""
        return plan_map(self.types)

    @property
    def uniform(self) -> tuple[str, str] | None:
        """(K, V) when every layer has the same pair, else None."""
        return self.types[0] if len(set(self.types)) == 1 else None


@dataclass
class Choice:
    """What :func:`choose_checked` kept for one budget: ``kept`` (the lowest measured KLD)
    out of ``candidates`` (the optimised plan first, then the uniform pairs by bits)."""

    budget: float
    kept: Candidate
    candidates: list[Candidate]

    @property
    def runner_up(self) -> Candidate | None:
        """The best candidate that was not kept (None when there was only one)."""
        others = [c for c in self.candidates if c is not self.kept]
        return min(others, key=lambda c: c.measured) if others else None

    def summary(self) -> str:
        """One line: which candidate was kept and by how much it measured lower than the
        runner-up (absolute KLD and relative), e.g. ``kept uniform turbo4/turbo4 (KLD 0.0400):
        0.0027 (6.3%) below optimised plan (0.0427)``."""
        k, r = self.kept, self.runner_up
        head = f"kept {k.label} (measured KLD {k.measured:.6f})"
        if r is None:
            return head + ": the only configuration that fits"
        d = r.measured - k.measured
        rel = f" ({100 * d / r.measured:.1f}%)" if r.measured > 0 else ""
        return f"{head}: {d:.6f}{rel} below the runner-up, {r.label} ({r.measured:.6f})"


def pair_bits(k: str, v: str, head_k: int = 1, head_v: int = 1) -> float:
    """Average bits per stored value of K type ``k`` and V type ``v`` (weighted by the K and V
    values per token, head_k / head_v)."""
    return bits_per_value([(k, v)], head_k, head_v, bits_of)


def uniform_pairs(types: tuple[str, ...], bits: float, head_k: int = 1, head_v: int = 1) -> list[tuple[str, str]]:
    """Every (K, V) pair of f16 and ``types`` whose bits/value (:func:`pair_bits`) is ≤
    ``bits``, the K/V-asymmetric ones included, most bits first (at most (len(types)+1)²)."""
    options = ("f16",) + tuple(types)
    fit = [(k, v) for k in options for v in options if pair_bits(k, v, head_k, head_v) <= bits + 1e-9]
    return sorted(fit, key=lambda p: (-pair_bits(*p, head_k, head_v), options.index(p[0]), options.index(p[1])))


def choose_checked(model_path: str | os.PathLike, text: str, sens: Sensitivity, budgets: list[float], *,
                   head_k: int = 1, head_v: int = 1, n_ctx: int = 256, chunks: int = 2,
                   n_threads: int | None = None, progress: Callable[[str], None] | None = None,
                   offload=None) -> list[Choice]:
    """For each budget: the optimised plan (:func:`choose`) and every uniform pair that fits
    (:func:`uniform_pairs`) are run whole on the calibration chunks of :func:`measure` (same
    text, n_ctx, chunks), and the one that measures the lowest mean KLD is kept (a tie
    keeps a uniform pair, which runs with plain -ctk/-ctv anywhere, and then the fewer bits).

    A configuration shared by several budgets, or an optimised plan that is itself uniform,
    is run once. Costs 1 + (distinct configurations) runs. Returns one :class:`Choice` per
    budget, in order. Raises MixError (budget, text), EngineError.
    """
    per_budget: list[list[Candidate]] = []
    for b in budgets:
        types, predicted, achieved = choose(sens, b, head_k=head_k, head_v=head_v)
        cands = [Candidate("optimised plan", types, achieved, predicted)]
        if cands[0].uniform:
            cands[0].label = f"optimised plan (= uniform {'/'.join(cands[0].uniform)})"
        for k, v in uniform_pairs(sens.types, b, head_k, head_v):
            if (k, v) != cands[0].uniform:
                pair = [(k, v)] * sens.n_layer
                cands.append(Candidate(f"uniform {k}/{v}", pair, pair_bits(k, v, head_k, head_v), predict(sens, pair)))
        per_budget.append(cands)
    maps = list(dict.fromkeys(c.plan for cands in per_budget for c in cands))
    measured = dict(zip(maps, measure_plans(model_path, text, maps, n_ctx=n_ctx, chunks=chunks, n_threads=n_threads,
                                            progress=progress, offload=offload)))
    out = []
    for b, cands in zip(budgets, per_budget):
        for c in cands:
            c.measured = measured[c.plan]
        kept = min(cands, key=lambda c: (c.measured, c.uniform is None, c.bits))
        out.append(Choice(b, kept, cands))
    return out


def floors(sens: Sensitivity) -> dict[str, float]:
    """The KLD floor of each side ("k", "v"): its smallest single-layer sensitivity (>= 0),
    what switching the side's rotation on costs before any quantization error (module doc)."""
    return {side: max(0.0, min((v for (_, s, _), v in sens.kld.items() if s == side), default=0.0))
            for side in ("k", "v")}


def predict(sens: Sensitivity, types: list[tuple[str, str]]) -> float:
    """Predicted mean KLD of per-layer (K, V) ``types``: the sum of each lowered cache's
    sensitivity above its side's floor, plus the floor once per side with a lowered cache."""
    fl = floors(sens)
    total = 0.0
    for side, col in (("k", 0), ("v", 1)):
        lowered = [(il, pair[col]) for il, pair in enumerate(types) if pair[col] != "f16"]
        total += sum(sens.kld[(il, side, t)] - fl[side] for il, t in lowered) + (fl[side] if lowered else 0.0)
    return total


def choose(sens: Sensitivity, bits: float, *, head_k: int = 1, head_v: int = 1) -> tuple[list[tuple[str, str]], float, float]:
    """Per-layer (K, V) types minimising the summed sensitivity above each side's floor with
    average bits ≤ ``bits`` (the floor itself, paid once per lowered side, is added to the
    prediction but not weighed by the choice: below 8 bits/value both sides are lowered).

    head_k / head_v weigh K and V by their values per token. Returns (types per layer,
    predicted KLD (:func:`predict`), achieved bits/value). Raises MixError when the budget
    is below the smallest type.
    """
    options = ("f16",) + sens.types
    check_budget(bits, sens.types)
    fl = floors(sens)
    g = math.gcd(head_k, head_v)
    wk, wv = head_k // g, head_v // g
    groups = [(il, side, wk if side == "k" else wv) for il in range(sens.n_layer) for side in ("k", "v")]
    total_w = sum(w for _, _, w in groups)
    cap = int(math.floor(bits * _STEP * total_w + 1e-9))
    cost = {t: int(math.ceil(bits_of(t) * _STEP - 1e-9)) for t in options}
    INF = float("inf")
    best = np.full(cap + 1, INF)
    best[0] = 0.0
    picks: list[np.ndarray] = []
    for il, side, w in groups:
        nxt = np.full(cap + 1, INF)
        pick = np.full(cap + 1, -1, dtype=np.int16)
        for j, t in enumerate(options):
            c = cost[t] * w
            if c > cap:
                continue
            val = 0.0 if t == "f16" else sens.kld[(il, side, t)] - fl[side]
            cand = np.full(cap + 1, INF)
            cand[c:] = best[:cap + 1 - c] + val
            better = cand < nxt
            nxt[better] = cand[better]
            pick[better] = j
        picks.append(pick)
        best = nxt
    end = int(np.argmin(best))
    if not math.isfinite(best[end]):
        raise MixError(f"no assignment fits {bits:g} bits/value")
    chosen: dict[tuple[int, str], str] = {}
    for (il, side, w), pick in zip(reversed(groups), reversed(picks)):
        t = options[int(pick[end])]
        chosen[(il, side)] = t
        end -= cost[t] * w
    types = [(chosen[(il, "k")], chosen[(il, "v")]) for il in range(sens.n_layer)]
    achieved = bits_per_value(types, head_k, head_v, bits_of)
    return types, predict(sens, types), achieved


def plan_map(types: list[tuple[str, str]]) -> str:
    """Per-layer (K, V) types -> an explicit map, one entry per pair ("0-1,5:q8_0/q8_0;2-4:...")."""
    by_pair: dict[tuple[str, str], list[int]] = {}
    for il, pair in enumerate(types):
        by_pair.setdefault(pair, []).append(il)
    entries = []
    for (k, v), ils in by_pair.items():
        runs, start = [], ils[0]
        for a, b in zip(ils, ils[1:] + [None]):
            if b != a + 1:
                runs.append(f"{start}" if start == a else f"{start}-{a}")
                start = b
        entries.append(f"{','.join(runs)}:{k}/{v}")
    return ";".join(entries)


def write_plan(path: str | os.PathLike, model_path: str | os.PathLike, types: list[tuple[str, str]], *,
               bits: float, predicted: float, achieved: float, sens: Sensitivity, text_label: str,
               measured: float | None = None, choice: Choice | None = None) -> dict:
    """Write the plan file (tqgguf.kvplan format) atomically; return its content. measured:
    the whole plan's KLD on the calibration chunks (:func:`measure_plans`), if known.
    choice: the :class:`Choice` it was kept from; recorded as ``kept`` (its label),
    ``kept_by`` (:meth:`Choice.summary`), ``margin_kld`` (runner-up's measured KLD minus
    the kept one's; None when alone) and ``candidates`` (each one's label, plan,
    bits/value, predicted and measured KLD). See :func:`write_choice`."""
    doc = {"format": PLAN_FILE_FORMAT, "model": Path(model_path).name, "model_sha256": sha256_file_cached(model_path),
           "n_layer": len(types), "plan": plan_map(types), "budget_bits_per_value": bits,
           "bits_per_value": achieved, "predicted_kld": predicted, "measured_calibration_kld": measured,
           "calibration_text": text_label,
           "calibration_tokens_scored": sens.tokens, "types": list(sens.types)}
    if choice is not None:
        r = choice.runner_up
        doc |= {"kept": choice.kept.label, "kept_by": choice.summary(),
                "margin_kld": None if r is None else r.measured - choice.kept.measured,
                "candidates": [{"label": c.label, "plan": c.plan, "bits_per_value": c.bits, "predicted_kld": c.predicted,
                                "measured_calibration_kld": c.measured} for c in choice.candidates]}
    doc["sensitivity"] = {f"{il}.{s}.{t}": v for (il, s, t), v in sorted(sens.kld.items())}
    with atomic_output(path) as tmp:
        Path(tmp).write_text(json.dumps(doc, indent=1))
    return doc


def write_choice(path: str | os.PathLike, model_path: str | os.PathLike, choice: Choice, *, sens: Sensitivity,
                 text_label: str) -> dict:
    """Write the plan file of ``choice.kept`` (:func:`write_plan` with the choice recorded)."""
    k = choice.kept
    return write_plan(path, model_path, k.types, bits=choice.budget, predicted=k.predicted, achieved=k.bits, sens=sens,
                      text_label=text_label, measured=k.measured, choice=choice)


def parse_types(value: str) -> tuple[str, ...]:
    """Comma list of candidate types (not f16, which is always a choice); MixError otherwise."""
    out = []
    for item in str(value).split(","):
        try:
            t = check_cache_type(item.strip(), "type in --types")
        except ValueError as e:
            raise MixError(str(e)) from None
        if t in ("f16", "f32", "bf16"):
            raise MixError(f"--types {value!r}: {t} is not a lowered type (f16 is always a choice)")
        out.append(t)
    return tuple(dict.fromkeys(out))

