#!/usr/bin/env bash
# GPU machine (one H200): issue 23's single-GPU checks of ggml RPC with turbo caches, through
# tqgguf itself (ppl, serve) and llama.cpp's own llama-bench / llama-batched-bench, all in one run.
#
#   scripts/gpu/rpc.sh BIN SMOL.gguf [SHAPE.gguf]
#
# BIN: the stage build of the patched tree (scripts/gpu/cuda.sh stage, with GGML_RPC=ON and the
# targets ggml-rpc-server llama-server llama-bench llama-batched-bench), SMOL: SmolLM2-135M (real
# text, for PPL), SHAPE: a real-size random-weight GGUF for speed (scripts/gpu/write_shape.py).
# KIT=.device/serve (scripts/gpu/serve_pack.sh: the Python deps and the llama_cpp package),
# TEXT=wiki.test.raw path. Writes $OUT/rpc-*.txt.
#
# 1. PPL, c=512, 4 chunks, per K/V pair: local GPU (-ngl all); worker on CUDA0 and a client that
#    sees no GPU (CUDA_VISIBLE_DEVICES= , --rpc); CUDA0 + RPC0 (a worker on the same GPU) split.
# 2. tg128 at depth 0 and 8192, pp512, local vs through the worker (llama-bench, same run).
# 3. S_TG (llama-batched-bench -npp 512 -ntg 128 -npl 32) local vs through the worker.
# 4. `tqgguf serve SMOL --ctv turbo4` with no -ngl on the CUDA build: its placement lines.
set -euo pipefail
BIN=$(cd "$1" && pwd) SMOL=$2 SHAPE=${3:-}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
KIT=$(cd "${KIT:-$ROOT/.device/serve}" && pwd)
PY=${PY:-python3} W=${W:-/tmp/tqrpc} OUT=${OUT:-$PWD/out} TEXT=${TEXT:-}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
mkdir -p "$OUT"
source "$ROOT/scripts/gpu/stage_site.sh"
mkdir -p "$W/cache/build/tools-cuda/bin" && ln -s "$BIN"/* "$W/cache/build/tools-cuda/bin/"
export TQGGUF_CACHE=$W/cache TQGGUF_LLAMA_SERVER=$BIN/llama-server
TQ="$PY -m tqgguf"
[[ -n $TEXT ]] && export TQGGUF_TEXT=$TEXT
{ $TQ info 2>&1 || true; } | sed -n 1,12p > "$OUT/rpc-info.txt"

worker() {  # worker PORT [DEV]: a turbo-capable worker of the stage build on loopback
    CUDA_VISIBLE_DEVICES=0 $TQ rpc-server -p "$1" -d "${2:-CUDA0}" > "$W/worker-$1.log" 2>&1 &
    for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/$1) 2>/dev/null && { sleep 0.3; return 0; }; sleep 0.1; done
    echo "worker $1 did not start"; cat "$W/worker-$1.log"; return 1
}

{
    echo "== $(date -u +%FT%TZ) PPL SmolLM2 c=512 4 chunks: local GPU | client without GPU + worker on CUDA0 | CUDA0 + RPC0"
    worker 50052
    for kv in ${KVS:-f16/f16 q8_0/turbo4 turbo4/turbo4 turbo3/turbo3}; do
        common=(ppl "$SMOL" -c 512 --chunks 4 -ctk "${kv%/*}" -ctv "${kv#*/}")
        a=$($TQ "${common[@]}" -ngl all 2>&1 | tee "$W/ppl-local.log" | grep -o 'PPL = [0-9.]*' || tail -3 "$W/ppl-local.log")
        b=$(CUDA_VISIBLE_DEVICES= $TQ "${common[@]}" --rpc 127.0.0.1:50052 -ngl all 2> "$W/ppl-rpc.err" | grep -o 'PPL = [0-9.]*' || tail -3 "$W/ppl-rpc.err")
        c=$($TQ "${common[@]}" --rpc 127.0.0.1:50052 -ngl all 2> "$W/ppl-split.err" | grep -o 'PPL = [0-9.]*' || tail -3 "$W/ppl-split.err")
        echo "$kv  local: $a  rpc-only: $b  CUDA0+RPC0: $c"
        grep '^placement' "$W/ppl-rpc.err" "$W/ppl-split.err" | sed 's/^/    /'
    done
} 2>&1 | tee "$OUT/rpc-ppl.txt"

if [[ -n $SHAPE ]]; then
    {
        echo "== $(date -u +%FT%TZ) llama-bench $(basename "$SHAPE"): local vs through the worker (client sees no GPU)"
        for kv in ${BKVS:-f16/f16 turbo4/turbo4}; do
            args=(-m "$SHAPE" -ngl 99 -fa 1 -ctk "${kv%/*}" -ctv "${kv#*/}" -p 512 -n 128 -d 0,8192 -r 3 -o md)
            echo "-- $kv local";  $BIN/llama-bench "${args[@]}" 2>/dev/null | grep -E '^\| ' | grep -v -E '^\| (model|---)'
            echo "-- $kv rpc";    CUDA_VISIBLE_DEVICES= $BIN/llama-bench "${args[@]}" --rpc 127.0.0.1:50052 2>/dev/null | grep -E '^\| ' | grep -v -E '^\| (model|---)'
        done
        echo "== S_TG llama-batched-bench -npp 512 -ntg 128 -npl 32"
        for kv in ${BKVS:-f16/f16 turbo4/turbo4}; do
            bargs=(-m "$SHAPE" -ngl 99 -fa on -ctk "${kv%/*}" -ctv "${kv#*/}" -c 21504 -b 2048 -ub 512 -npp 512 -ntg 128 -npl 32)
            echo "-- $kv local"; $BIN/llama-batched-bench "${bargs[@]}" 2>/dev/null | grep -E '^\|' | tail -1
            echo "-- $kv rpc";   CUDA_VISIBLE_DEVICES= $BIN/llama-batched-bench "${bargs[@]}" --rpc 127.0.0.1:50052 2>/dev/null | grep -E '^\|' | tail -1
        done
    } 2>&1 | tee "$OUT/rpc-bench.txt"
fi
pkill -f "rpc-server -p 50052" || true; pkill -f ggml-rpc-server || true

{
    echo "== $(date -u +%FT%TZ) tqgguf serve SMOL --ctv turbo4, no -ngl, CUDA llama-server"
    $TQ serve "$SMOL" --ctv turbo4 --port 18434 > "$W/serve.log" 2>&1 &
    for _ in $(seq 240); do grep -q "listening on" "$W/serve.log" && break; sleep 0.5; done
    grep -E "^(placement|threads|KV cache|llama-server|listening)" "$W/serve.log" || tail -20 "$W/serve.log"
    curl -s -m 60 http://127.0.0.1:18434/v1/chat/completions -H 'content-type: application/json' \
        -d '{"model":"'"$(basename "$SMOL" .gguf)"'","messages":[{"role":"user","content":"Say hello."}],"max_tokens":8}' | head -c 400; echo
    pkill -f "tqgguf serve" || true; sleep 2
} 2>&1 | tee "$OUT/rpc-serve.txt"
