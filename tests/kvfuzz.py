"""Fuzz worker: open contexts on synthetic models with many K/V cache settings, in a child
process, so that a signal (SIGABRT from an assert, SIGSEGV, SIGFPE) is seen by the parent
as a finding instead of killing pytest.

Run as ``python -m tests.kvfuzz MODE JOBS.json START``; MODE is ``ctx`` (raw C API:
llama_init_from_model + decode) or ``llama`` (``llama_cpp.Llama(type_k=..., type_v=...)``).
Before each job the worker prints ``{"start": i}``, after it ``{"i": i, "status": ...,
"msg": ...}`` with status ``ok`` (finite logits), ``refused`` (the engine or the Python
binding said no, with a message) or ``nan`` (non-finite logits). :func:`run_jobs` runs the
jobs, restarting the worker after a signal and recording ``signal`` for the job that died.
"""
from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_jobs(mode: str, jobs: list[dict], *, timeout: float = 600.0) -> list[dict]:
    """Run ``jobs`` in worker processes; returns one result dict per job, in order
    (status ok / refused / nan / signal / error, msg)."""
    import tempfile

    results: dict[int, dict] = {}
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(jobs, f)
        jobs_file = f.name
    try:
        start = 0
        while start < len(jobs):
            proc = subprocess.Popen([sys.executable, "-m", "tests.kvfuzz", mode, jobs_file, str(start)],
                                    cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            current = None
            assert proc.stdout is not None
            for line in proc.stdout:
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue  # engine chatter on stdout
                if "start" in rec:
                    current = rec["start"]
                elif "i" in rec:
                    results[rec["i"]] = rec
                    current = None
            rc = proc.wait(timeout=timeout)
            if current is None:
                if rc != 0 and len(results) < len(jobs):
                    raise RuntimeError(f"fuzz worker exited with {rc} between jobs")
                break
            sig = -rc if rc < 0 else None
            results[current] = {"i": current, "status": "signal" if sig else "error",
                                "msg": f"worker died: {signal.Signals(sig).name}" if sig else f"worker exit {rc}"}
            start = current + 1
    finally:
        os.unlink(jobs_file)
    return [results.get(i, {"i": i, "status": "error", "msg": "no result"}) for i in range(len(jobs))]


# ----------------------------------------------------------------------------------------
# worker side

_FA = {"on": "LLAMA_FLASH_ATTN_TYPE_ENABLED", "off": "LLAMA_FLASH_ATTN_TYPE_DISABLED",
       "auto": "LLAMA_FLASH_ATTN_TYPE_AUTO"}


def _emit(rec: dict) -> None:
    sys.stdout.write(json.dumps(rec) + "\n")
    sys.stdout.flush()


def _quiet(L):
    @L.llama_log_callback
    def cb(level, text, user_data):  # noqa: ARG001
        pass

    L.llama_log_set(cb, ctypes.c_void_p(0))
    return cb


def _logits_ok(L, ctx, n_vocab: int) -> bool:
    import numpy as np

    p = L.llama_get_logits_ith(ctx, -1)
    return bool(np.isfinite(np.ctypeslib.as_array(p, shape=(n_vocab,))).all())


def _run_ctx_job(L, model, n_vocab: int, job: dict) -> dict:
    """Create a context with the job's settings, decode 6 tokens then 2 more one by one;
    ok when the last-position logits of every decode are finite."""
    os.environ["LLAMA_ATTN_ROT_DISABLE"] = "0" if job["rot"] else "1"
    cp = L.llama_context_default_params()
    cp.n_ctx = cp.n_batch = cp.n_ubatch = 64
    cp.n_threads = cp.n_threads_batch = 1
    cp.type_k, cp.type_v = job["type_k"], job["type_v"]
    cp.flash_attn_type = getattr(L, _FA[job["fa"]])
    L.llama_tq_clear_errors()
    ctx = L.llama_init_from_model(model, cp)
    if not ctx:
        return {"status": "refused", "msg": L.tq_engine_errors()}
    try:
        toks = [1, 5, 9, 13, 17, 21, 25, 29]
        arr = (L.llama_token * 6)(*toks[:6])
        if L.llama_decode(ctx, L.llama_batch_get_one(arr, 6)) != 0:
            return {"status": "refused", "msg": "decode failed: " + L.tq_engine_errors()}
        finite = _logits_ok(L, ctx, n_vocab)
        for t in toks[6:]:
            one = (L.llama_token * 1)(t)
            if L.llama_decode(ctx, L.llama_batch_get_one(one, 1)) != 0:
                return {"status": "refused", "msg": "decode failed: " + L.tq_engine_errors()}
            finite = finite and _logits_ok(L, ctx, n_vocab)
        return {"status": "ok" if finite else "nan", "msg": ""}
    finally:
        L.llama_free(ctx)


def _run_llama_job(L, job: dict) -> dict:
    """``llama_cpp.Llama(model, type_k=..., type_v=...)`` + a 4-token eval; ok when the logits
    of all 4 positions are finite (logits_all: without it ``scores`` is never written)."""
    import numpy as np

    kw = {k: (bool(v["bool"]) if isinstance(v, dict) else v) for k, v in job["kwargs"].items()}
    try:
        llm = L.Llama(model_path=job["model"], n_ctx=32, n_batch=32, n_threads=1, verbose=False, logits_all=True,
                      flash_attn=job.get("flash_attn", True), **kw)
    except (TypeError, ValueError, RuntimeError) as e:
        return {"status": "refused", "msg": f"{type(e).__name__}: {e}", "used": None}
    try:
        llm.eval([1, 2, 3, 4])
        finite = bool(np.isfinite(llm.scores[:llm.n_tokens]).all())
        used = [int(llm.context_params.type_k), int(llm.context_params.type_v)]
        return {"status": "ok" if finite else "nan", "msg": "", "used": used}
    finally:
        llm.close()


def _worker(mode: str, jobs_file: str, start: int) -> int:
    import llama_cpp as L

    jobs = json.loads(Path(jobs_file).read_text())
    keep = _quiet(L)  # noqa: F841 - the callback must stay alive
    L.llama_backend_init()
    model, model_path, n_vocab = None, None, 0
    for i in range(start, len(jobs)):
        job = jobs[i]
        _emit({"start": i})
        if mode == "ctx":
            if job["model"] != model_path:
                if model:
                    L.llama_model_free(model)
                mp = L.llama_model_default_params()
                model = L.llama_model_load_from_file(job["model"].encode(), mp)
                model_path = job["model"]
                n_vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(model))
            res = _run_ctx_job(L, model, n_vocab, job)
        else:
            res = _run_llama_job(L, job)
        _emit({"i": i, **res})
    return 0


if __name__ == "__main__":
    raise SystemExit(_worker(sys.argv[1], sys.argv[2], int(sys.argv[3])))
