#!/usr/bin/env bash
# GPU machine's CPU, after the Qwen pieces are in /tmp/tq/parts (scripts/gpu/stage.sh)
# and the tree is unpacked: the K-center grid for Qwen2.5-Coder-0.5B in three calls of
# under 10 minutes each (files under /tmp survive while the machine stays warm).
#   scripts/gpu/qwen_k_center.sh 1 OUT_DIR  # build, join, `tqgguf center` copy, f16 base, off rows
#   scripts/gpu/qwen_k_center.sh 2 OUT_DIR  # LLAMA_K_CENTER=bias rows
#   scripts/gpu/qwen_k_center.sh 3 OUT_DIR  # calib rows, and the centered file (KLD vs the original's base)
#   scripts/gpu/qwen_k_center.sh full OUT_DIR  # build, join, f16 base, LLAMA_K_CENTER=full rows
set -uo pipefail
part=$1; out=$2
P=/tmp/tq/parts; B=/tmp/tq/build/bin; M=/tmp/tq/qwen.gguf; C=/tmp/tq/qwen.centered.gguf
PAIRS="q4_0:q4_0 q8_0:q4_0 turbo4:turbo4 turbo3:turbo3 q8_0:turbo3 turbo4:q8_0"
export BASE_KLD=/tmp/qwen.gguf.kld
build() {
    [ -f $B/llama-perplexity ] || {
        cmake -S /tmp/tq/llama.cpp -B /tmp/tq/build -G Ninja -DGGML_NATIVE=ON -DGGML_CUDA=OFF -DLLAMA_CURL=OFF \
            -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DCMAKE_BUILD_TYPE=Release \
            -DCMAKE_C_FLAGS="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16" \
            -DCMAKE_CXX_FLAGS="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16" > "$out/build.log" 2>&1 &&
        cmake --build /tmp/tq/build -j "$(nproc)" --target llama-perplexity >> "$out/build.log" 2>&1; } || exit 1
    cat $P/qwen.part.* > $M
}
case $part in
1)  build
    PYTHONPATH=.device/pylib:. python3 -c "
from tqgguf.center import plan_center, write_centered
write_centered(plan_center('$M'), '$C')" > "$out/center.log" 2>&1 || { cat "$out/center.log"; exit 1; }
    sha256sum $M $C | cut -c1-16 > "$out/sha.txt"
    unset BASE_KLD  # computes /tmp/qwen.gguf.kld
    scripts/gpu/k_center_grid.sh $B $M $P/wiki.test.raw "$out/qwen_off.tsv" 20 "$PAIRS" off ;;
2)  scripts/gpu/k_center_grid.sh $B $M $P/wiki.test.raw "$out/qwen_bias.tsv" 20 "f16:f16 $PAIRS" bias ;;
3)  scripts/gpu/k_center_grid.sh $B $M $P/wiki.test.raw "$out/qwen_calib.tsv" 20 \
        "q4_0:q4_0 turbo4:turbo4 turbo3:turbo3" "file:$P/qwen2.5-coder-0.5b-instruct-q4_k_m.k_center.gguf"
    scripts/gpu/k_center_grid.sh $B $C $P/wiki.test.raw "$out/qwen_file.tsv" 20 \
        "f16:f16 q4_0:q4_0 turbo4:turbo4 turbo3:turbo3" off ;;
full) build
    unset BASE_KLD
    scripts/gpu/k_center_grid.sh $B $M $P/wiki.test.raw "$out/qwen_full.tsv" 20 "f16:f16 $PAIRS" full ;;
esac
