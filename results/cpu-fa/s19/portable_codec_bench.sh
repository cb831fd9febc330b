#!/usr/bin/env bash
# Build and run portable_codec_bench.c against ggml-turbo.c as it is at a git revision (default: the
# work tree), with the flags ggml-base compiles it with (-O3 -ffp-contract=off, no -march: the target's
# baseline SIMD). Needs `tqgguf build` done (the patched tree's headers and libggml-base.so).
#   bash results/cpu-fa/s19/portable_codec_bench.sh [REV]
set -euo pipefail
cd "$(dirname "$0")"
ROOT=$(git rev-parse --show-toplevel)
TREE=$(ls -d ${TQGGUF_CACHE:-$HOME/.cache/tqgguf}/src/*/vendor/llama.cpp | head -1)
LIB=${TQGGUF_CACHE:-$HOME/.cache/tqgguf}/build/tools-cpu/bin
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
if [ $# -gt 0 ]; then git -C "$ROOT" show "$1:native/ggml/src/ggml-turbo.c" > "$W/ggml-turbo.c"; else cp "$ROOT/native/ggml/src/ggml-turbo.c" "$W/"; fi
cc -O3 -std=gnu11 -ffp-contract=off -D_GNU_SOURCE -I"$W" -I"$TREE/ggml/src" -I"$TREE/ggml/include" portable_codec_bench.c \
   -o "$W/bench" -L"$LIB" -lggml-base -lm -Wl,-rpath,"$LIB"
echo "ggml-turbo.c of ${1:-the work tree}; $(nproc) cores;$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
"$W/bench"
