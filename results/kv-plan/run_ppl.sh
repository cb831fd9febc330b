#!/bin/bash
# The issue-14 numbers that fit the session's CPU time: tqgguf ppl (WikiText-2 test, n_ctx 512,
# 20 chunks, default text /work/shared/data/wiki.test.raw), one run after another, each
# writing its JSON to results/kv-plan/. KLD needs the f16 baselines of `tqgguf sweep`
# (results/kv-plan/run.sh does the full set with KLD).
set -u
T=${TQGGUF:-tqgguf}
D=results/kv-plan
run() { local out=$1; shift; [ -s $D/$out.json ] || $T ppl "$@" -c 512 --chunks 20 -t 2 --json $D/$out.json 2> $D/$out.log; }
run qwen-turbo4-auto      qwen2.5-coder-0.5b --ctk turbo4 --ctv turbo4                    # no --k-center flag
run smollm2-turbo3-b2     smollm2-135m --ctk turbo3 --ctv turbo3 --kv-boundary 2
run qwen-turbo3-b2-auto   qwen2.5-coder-0.5b --ctk turbo3 --ctv turbo3 --kv-boundary 2
run gemma3-turbo3-swaf16  gemma3-270m --ctk turbo3 --ctv turbo3 --kv-swa f16
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
run gemma3-turbo4-swaf16  gemma3-270m --ctk turbo4 --ctv turbo4 --kv-swa f16
echo ALL DONE
