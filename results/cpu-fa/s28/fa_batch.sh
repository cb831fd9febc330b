#!/usr/bin/env bash
# FA alone with 8 queries (SmolLM2's heads: hd 64, 9 Q / 3 K/V; turbo4/turbo4; 1,152 cells, 2 threads): the batch that
# 8 sequences' decode step (or a draft model's verification) hands ggml's CPU flash attention, in alternating
# processes of GGML_TURBO_FA_GROUPED=0 (ggml's per-query loop) and 1 (ggml_turbo_fa_decode_rows), each query seeing
# every cell ("flat") or only its own sequence's cells (every 8th: "interleaved", a unified cache); µs per call,
# tests/cpu_host/fa_decode_check.cpp with FA_CHECK_REPS. LIB: the libggml* directory (default the installed engine's).
#   R=4 bash results/cpu-fa/s28/fa_batch.sh > results/cpu-fa/s28/fa-batch8.txt
cd "$(dirname "$0")/../../.."
LIB=${LIB:-$(python3 -c "from tqgguf.cachetypes import _lib_dir; print(_lib_dir())")}
INC=$(python3 -c "from tqgguf.builder.source import source_tree; print(source_tree() / 'vendor/llama.cpp/ggml/include')")
EXE=$(mktemp -d)/fa_decode_check
g++ -std=c++17 -O2 -I"$INC" tests/cpu_host/fa_decode_check.cpp -L"$LIB" -lggml -lggml-cpu -lggml-base -Wl,-rpath,"$LIB" -o "$EXE"
for r in $(seq 1 ${R:-4}); do for il in 0 1; do for mode in 0 1; do
  echo "r$r $([ $il = 1 ] && echo interleaved || echo flat) GROUPED=$mode $(FA_CHECK_REPS=200 FA_CHECK_INTERLEAVE=$il \
    GGML_TURBO_FA_GROUPED=$mode "$EXE" /dev/null 43 43 64 3 3 1152 1152 8 | grep us_per_call)"
done; done; done
