#!/usr/bin/env bash
# GPU machine (one H200), issue 26 item 5: the engine's load order against other extension
# modules, on a stage build's libraries (scripts/gpu/roofline.sh build) run through tqgguf.
#
#   scripts/gpu/load_order.sh BIN MODEL VOCAB
#
# BIN: the stage build's bin/ (lib*.so and the tools); MODEL: a GGUF decoded on the GPU (a
# random-weight shape: scripts/gpu/write_shape.py); VOCAB: a BPE vocabulary-only GGUF (llama.cpp's
# models/ggml-vocab-gpt-2.gguf: its pre-tokenizer runs std::regex). KIT: scripts/gpu/serve_pack.sh's
# kit (default .device/serve). Writes $OUT/load-order.txt:
# 1. each engine library's exported libstdc++ symbols, then scripts/gpu/import_after_engine.sh's
#    checks (ENGINES, default "tqgguf global": the product's path and the old RTLD_GLOBAL load);
# 2. `tqgguf bench MODEL -ngl 99` end to end, bench.png included (where the crash was seen).
set -uo pipefail
BIN=$(cd "$1" && pwd) MODEL=$(readlink -f "$2") VOCAB=$(readlink -f "$3")
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
KIT=$(cd "${KIT:-$ROOT/.device/serve}" && pwd)
PY=${PY:-python3} W=${W:-/tmp/tq-load-order} OUT=${OUT:-$PWD/out}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
mkdir -p "$OUT"
source "$ROOT/scripts/gpu/stage_site.sh"
mkdir -p "$W/cache/build/tools-cuda/bin" && ln -s "$BIN"/* "$W/cache/build/tools-cuda/bin/"
export TQGGUF_CACHE=$W/cache
{
    echo "== $(date -u +%FT%TZ) load order; BIN $BIN; $(g++ --version | head -1); CXX=${CXX:-}"
    ENGINES=${ENGINES:-tqgguf global} timeout 400 bash "$ROOT/scripts/gpu/import_after_engine.sh" "$MODEL" "$VOCAB"
    echo "import_after_engine: rc $? (FAILs outside the global mode)"
    echo "== tqgguf bench -ngl 99, bench.png"
    timeout 240 "$PY" -m tqgguf bench "$MODEL" -ngl 99 -ctk f16,turbo4 -ctv turbo4 -p 64 -n 16 -r 2 \
        --dir "$W/bench" > "$W/bench.log" 2>&1
    rc=$?
    grep -E "^\|" "$W/bench.log" | head -8
    tail -3 "$W/bench.log"
    echo "tqgguf bench: rc $rc; bench.png $(stat -c %s "$W/bench/bench.png" 2>/dev/null || echo missing) bytes"
} 2>&1 | tee "$OUT/load-order.txt"
cp "$W/bench/bench.png" "$OUT/load-order-bench.png" 2>/dev/null || true
