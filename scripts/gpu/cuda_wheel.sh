#!/usr/bin/env bash
# GPU machine with no internet: install tqgguf from carried wheels, build and install the
# CUDA engine with `tqgguf build --backend cuda` from the carried sdist, and use it as a user
# would (info, ppl -ngl 99, serve -ngl 99 answering the OpenAI and Ollama routes).
# Carried pieces (see the closing note of the CUDA issue for the split):
#   .device/w*/wheels/*.whl   tqgguf's dependencies missing from the machine's image
#   .device/w*/*.partNN       the pinned sdist and SmolLM2 in pieces; wiki.test.raw
#   scripts/gpu/cuda_wheel.sh parts      copy pieces to /tmp/tqw (every call)
#   scripts/gpu/cuda_wheel.sh build      install tqgguf, assemble, tqgguf build --backend cuda
#   scripts/gpu/cuda_wheel.sh ops        test-backend-ops from the engine's build tree: turbo cases + FA timing
#   scripts/gpu/cuda_wheel.sh use        tqgguf info / ppl / serve on the GPU
set -euo pipefail
W=/tmp/tqw
OUT=${OUT:-$PWD/out}
mkdir -p "$W/parts" "$OUT"
export TQGGUF_CACHE=$W/cache
case "${1:-}" in
parts)
    for d in .device/w*/; do [ -d "$d" ] && cp -rn "$d"* "$W/parts/" 2>/dev/null || true; done
    ls "$W/parts" | tr '\n' ' '; echo
    ;;
build)
    "$0" parts
    cat "$W"/parts/sdist.tar.gz.part* > "$W/llama_cpp_python-0.3.36.tar.gz"
    cat "$W"/parts/smol.gguf.part* > "$W/SmolLM2-135M-Instruct.Q4_1.gguf"
    # only what the image lacks (its own numpy, click, rich, httpx, matplotlib, cmake, ninja,
    # scikit-build-core stay); --no-deps so nothing else is resolved against an index
    (cd "$W/parts/wheels" && python3 -m pip install -q --no-index --no-deps pydantic-*.whl pydantic_core-*.whl \
        annotated_types-*.whl typing_inspection-*.whl fastapi-*.whl starlette-*.whl uvicorn-*.whl gguf-*.whl \
        diskcache-*.whl opentelemetry_api-*.whl annotated_doc-*.whl 2>&1 | grep -v -i warning | tail -3) || true
    python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . 2>&1 | grep -v -i warning | tail -3 || true
    command -v patch >/dev/null || { echo "no patch(1) on this machine"; exit 1; }
    python3 -c "import tqgguf.cli, fastapi, uvicorn, gguf, pydantic" || exit 1
    S=$(date +%s)
    TQGGUF_SDIST=$W/llama_cpp_python-0.3.36.tar.gz tqgguf build --backend cuda --cuda-arch 90 2>&1 | tail -5
    echo "tqgguf build --backend cuda: $(( $(date +%s) - S )) s" | tee "$OUT/build-time.txt"
    ;;
use)
    M=$W/SmolLM2-135M-Instruct.Q4_1.gguf
    tqgguf info 2>&1 | tee "$OUT/info.txt" | head -40
    for kv in "q8_0 turbo4" "turbo4 turbo4"; do
        set -- $kv
        tqgguf ppl "$M" -f "$W/parts/wiki.test.raw" -c 512 --chunks 20 -ngl 99 --ctk "$1" --ctv "$2" \
            --json "$OUT/ppl-$1-$2.json" > "$OUT/ppl-$1-$2.txt" 2>&1 || echo "ppl $1/$2 FAILED"
        tail -3 "$OUT/ppl-$1-$2.txt"
    done
    tqgguf serve "$M" -ngl 99 --ctk q8_0 --ctv turbo4 -c 2048 --port 18080 > "$OUT/serve.log" 2>&1 &
    for i in $(seq 60); do curl -sf localhost:18080/api/version >/dev/null && break; sleep 1; done
    head -12 "$OUT/serve.log"
    curl -s localhost:18080/v1/chat/completions -H 'content-type: application/json' \
        -d '{"model":"m","messages":[{"role":"user","content":"Name three colours."}],"max_tokens":24,"temperature":0}' | tee "$OUT/openai.json"; echo
    curl -s localhost:18080/api/chat -d '{"model":"m","messages":[{"role":"user","content":"Say hi."}],"stream":false,"options":{"num_predict":16,"temperature":0}}' | tee "$OUT/ollama-chat.json"; echo
    curl -s localhost:18080/api/generate -d '{"model":"m","prompt":"The capital of France is","stream":false,"options":{"num_predict":8,"temperature":0}}' | tee "$OUT/ollama-generate.json"; echo
    curl -s localhost:18080/api/ps | tee "$OUT/ollama-ps.json"; echo
    kill %1 2>/dev/null || true
    # bad input on the GPU: a pair and a head dim the engine must refuse, -fa off with a quantized V
    tqgguf ppl "$M" -f "$W/parts/wiki.test.raw" --chunks 1 -ngl 99 --ctv turbo4 -fa off > "$OUT/bad-fa-off.txt" 2>&1; echo "-fa off + turbo4 V: exit $?"; tail -2 "$OUT/bad-fa-off.txt"
    ;;
ops)
    # test-backend-ops from the engine's own CMake tree (reuses its compiled ggml-cuda)
    B=$TQGGUF_CACHE/build/cuda; SRC=$(ls -d $TQGGUF_CACHE/src/llama_cpp_python-*)
    S=$(date +%s)
    cmake -S "$SRC" -B "$B" -DLLAMA_BUILD_TESTS=ON > "$OUT/ops-configure.log" 2>&1 && \
        cmake --build "$B" -j "$(nproc)" --target test-backend-ops > "$OUT/ops-build.log" 2>&1 || { tail -20 "$OUT/ops-build.log"; exit 1; }
    T=$(find "$B" -name test-backend-ops -type f -perm -u+x | head -1)
    echo "test-backend-ops built in $(( $(date +%s) - S )) s: $T"
    timeout 300 "$T" -b CUDA0 -o SET_ROWS,GET_ROWS,CPY,FLASH_ATTN_EXT -p turbo -j 8 > "$OUT/test-backend-ops.txt" 2>&1 || true
    bash scripts/gpu/tbo_summary.sh "$OUT/test-backend-ops.txt" | tee "$OUT/test-backend-ops-summary.txt"
    "$T" perf -b CUDA0 -o FLASH_ATTN_EXT -p 'kv=(7680|32768),nb=1,' 2>&1 | sed 's/\x1b\[[0-9;]*m//g' | grep -E "type_K=(f16|q8_0|q4_0|turbo[234])" > "$OUT/fa-perf.txt" || true
    sed -E 's/.*hsk=([0-9]+).*kv=([0-9]+).*type_K=([a-z0-9_]+),type_V=([a-z0-9_]+).* ([0-9.]+) us\/run.*/hd \1 kv \2 \3\/\4 \5 us/' "$OUT/fa-perf.txt"
    ;;
*)
    sed -n 2,13p "$0"; exit 2 ;;
esac
