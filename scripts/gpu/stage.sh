#!/usr/bin/env bash
# GPU machine, first call of a session: unpack the trimmed patched tree (.device/llama.tar.xz,
# from `tqgguf build --source-only`) into /tmp/tq and build llama-perplexity and llama-bench
# for its CPU in the background (log /tmp/tq/build.log, marker /tmp/tq/built), so model
# pieces can be sent by the next calls meanwhile. Then copies any carried .device/*/ files
# into /tmp/tq/parts.
#   scripts/gpu/stage.sh [--build]
set -euo pipefail
mkdir -p /tmp/tq/parts
if [ "${1:-}" = --build ]; then
    tar -xJf .device/llama.tar.xz -C /tmp/tq
    nohup bash -c 'cmake -S /tmp/tq/llama.cpp -B /tmp/tq/build -G Ninja -DGGML_NATIVE=ON -DGGML_CUDA=OFF \
        -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DCMAKE_BUILD_TYPE=Release \
        -DCMAKE_C_FLAGS="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16" -DCMAKE_CXX_FLAGS="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16" \
        && cmake --build /tmp/tq/build -j "$(nproc)" --target llama-perplexity llama-bench && touch /tmp/tq/built' \
        > /tmp/tq/build.log 2>&1 &
fi
for d in .device/*/; do cp -n "$d"* /tmp/tq/parts/ 2>/dev/null || true; done
ls -la /tmp/tq/parts
