#!/bin/bash
# The issue-14 measurements, run one after another on the 2-core machine (WikiText-2 test,
# n_ctx 512, 20 chunks, the default text /work/shared/data/wiki.test.raw). Each sweep
# resumes from its results.jsonl, so a rerun only does what is missing.
#   TQGGUF_CACHE=... bash results/kv-plan/run.sh
set -u
T=${TQGGUF:-tqgguf}
D=results/kv-plan
# Qwen2.5-Coder-0.5B: no --k-center flag (default auto -> full: the model has attn_k.bias)
$T sweep qwen2.5-coder-0.5b --ctk turbo4 --ctv turbo4 -o $D/qwen -t 2
$T sweep qwen2.5-coder-0.5b --ctk turbo3 --ctv turbo3 --kv-boundary 0,2 -o $D/qwen -t 2
# SmolLM2-135M: auto -> off (no K bias)
$T sweep smollm2-135m --ctk turbo3 --ctv turbo3 --kv-boundary 0,2 -o $D/smollm2 -t 2
$T sweep smollm2-135m --ctk turbo4 --ctv turbo4 -o $D/smollm2 -t 2
# Gemma-3-270M: sliding-window layers at f16, global layers turbo3 / turbo4
$T sweep gemma3-270m --ctk turbo3 --ctv turbo3 --kv-swa none,f16 -o $D/gemma3 -t 2
python - <<'PY' > $D/gemma3-kv-mib-32768.txt
from tqgguf.models import resolve_model
from tqgguf.runtime import open_model
p = resolve_model("gemma3-270m")
for ctk, swa in (("f16", None), ("turbo3", None), ("turbo3", "f16"), ("turbo4", None), ("turbo4", "f16")):
    e = open_model(p, ctk=ctk, ctv=ctk, kv_swa=swa, n_ctx=32768, n_threads=2)
    r = e.report
    print(f"K/V {ctk}/{ctk} --kv-swa {swa or 'none'}: n_ctx {r.n_ctx}: KV {r.k_mib + r.v_mib:.2f} MiB "
          f"(K {r.k_mib:.2f} + V {r.v_mib:.2f}); plan layers: {r.kv_plan_layers or '-'}")
    e.close()
PY
$T sweep gemma3-270m --ctk turbo4 --ctv turbo4 --kv-swa none,f16 -o $D/gemma3 -t 2
echo ALL DONE
