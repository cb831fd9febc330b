#!/bin/bash
# Shared helpers for the issue-14 measurement scripts in results/kv-plan/ (source it).
# Every run is WikiText-2 test (the default text, /work/shared/data/wiki.test.raw) unless said,
# at low priority (nice -n 10) with one thread, so two queues can share a 2-core machine.
#   T   the tqgguf executable (default: tqgguf on PATH)
#   D   this directory (results/kv-plan)
#   TH  threads per run (default 1)
T=${TQGGUF:-tqgguf}
D=${D:-results/kv-plan}
TH=${TH:-1}

# ppl_json OUT ARGS...: `tqgguf ppl ARGS -c 512 --chunks 20` once into $D/OUT.json (+ .log); skipped when done.
ppl_json() { local out=$1; shift; [ -s $D/$out.json ] || nice -n 10 $T ppl "$@" -c 512 --chunks 20 -t $TH --json $D/$out.json 2> $D/$out.log; }

# sweep_into DIR ARGS...: `tqgguf sweep ARGS -o $D/DIR` (PPL + KLD against the cached f16 baseline);
# each sweep resumes from DIR/results.jsonl, so a rerun only does what is missing.
sweep_into() { local dir=$1; shift; echo "[$(date -u +%T)] sweep $dir: $*"; nice -n 10 $T sweep "$@" -t $TH -o $D/$dir >> $D/$dir.log 2>&1; }

# mix_plans NAME MODEL ARGS...: `tqgguf mix MODEL --bits 3.5 --bits 4.25` (one sensitivity measurement,
# both budgets) into $D/mix/NAME-{bits}.json, log $D/mix/NAME.log; skipped when both plans exist.
mix_plans() {
  local name=$1 model=$2; shift 2
  [ -s $D/mix/$name-3.5.json ] && [ -s $D/mix/$name-4.25.json ] && return 0
  echo "[$(date -u +%T)] mix $name"
  nice -n 10 $T mix $model --bits 3.5 --bits 4.25 -t $TH -o "$D/mix/$name-{bits}.json" "$@" > $D/mix/$name.log 2>&1
}

# wait_for FILE...: block until every FILE exists (a plan written by the mix queue).
wait_for() { local f; for f in "$@"; do while [ ! -s "$f" ]; do sleep 30; done; done; }

# gemma_kv_mib: Gemma-3-270M's KV MiB at n_ctx 32768 (llama.cpp's allocation), uniform vs --kv-swa f16.
gemma_kv_mib() {
python - <<'PY'
from tqgguf.models import resolve_model
from tqgguf.runtime import open_model
p = resolve_model("gemma3-270m")
for swa_full in (True, False):
    if not swa_full:
        print("-- swa_full=False (the sliding-window cache holds only its window, llama-server --swa-full off):")
    for ctk, swa in (("f16", None), ("turbo3", None), ("turbo3", "f16"), ("turbo4", None), ("turbo4", "f16")):
        e = open_model(p, ctk=ctk, ctv=ctk, kv_swa=swa, n_ctx=32768, n_threads=2, swa_full=swa_full)
        r = e.report
        print(f"K/V {ctk}/{ctk} --kv-swa {swa or 'none'}: n_ctx {r.n_ctx}: KV {r.k_mib + r.v_mib:.2f} MiB "
              f"(K {r.k_mib:.2f} + V {r.v_mib:.2f}); plan layers: {r.kv_plan_layers or '-'}")
        e.close()
PY
}
