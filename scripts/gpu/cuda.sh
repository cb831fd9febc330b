#!/usr/bin/env bash
# GPU machine (one H200, no internet): the CUDA checks of the turbo KV caches, in steps that
# fit the device tool's calls. Everything lives in /tmp/tqc there; logs go to $OUT (or ./out).
#
#   scripts/gpu/cuda_pack.sh            (here) .device/cuda/tree.tar.xz + model pieces
#   scripts/gpu/cuda.sh stage           unpack and build (about 6 minutes on 16 cores; TARGETS="..." picks
#                                          the tools, SERVER=0 leaves llama-server out)
#   scripts/gpu/cuda.sh parts           copy carried model pieces (.device/cuda/parts/*)
#   scripts/gpu/cuda.sh check           wait for the build; test-backend-ops (turbo cases of
#                                          SET_ROWS, GET_ROWS, CPY, FLASH_ATTN_EXT) and the
#                                          codec check (CUDA bytes == CPU bytes on 1M blocks)
#   scripts/gpu/cuda.sh ppl MODEL.gguf  PPL + KLD, CUDA (-ngl 99) and the same binary's CPU
#   scripts/gpu/cuda.sh gen MODEL.gguf  greedy 64 tokens, 8 prompts, CUDA vs CPU per K/V pair
#   scripts/gpu/cuda.sh kshift MODEL.gguf  context shift with turbo4/q8_0/turbo3 K, CUDA vs CPU (KLD to f16)
#   scripts/gpu/cuda.sh fa              FA decode micro-benchmark: µs and GB/s per K/V pair,
#                                          beside the card's copy bandwidth (same run)
#   scripts/gpu/cuda.sh bench MODEL.gguf  llama-bench pp512/tg128 at depths 0, 8192, 32768 per K/V pair (KVS)
#   scripts/gpu/cuda.sh tg MODEL.gguf   tg128 A/B: RUNS="K/V[,VAR=VALUE...] ..." (environment per run), -r ${R:-5},
#                                          depths ${DEPTHS:-0,8192,32768}: one build measured with and without a knob
#   scripts/gpu/cuda.sh batched MODEL.gguf  llama-batched-bench S_TG, 4096-token prompts, 64 and 240 sequences (RUNS: kv:npl ...)
#   scripts/gpu/cuda.sh profile MODEL.gguf  Nsight Compute: the FA decode kernel per K/V pair (speed of light,
#                                          occupancy, warp stalls) and the cache write (SET_ROWS) at batch 1
#   scripts/gpu/cuda.sh step MODEL.gguf  Nsight Compute: every kernel of a few decode steps per K/V type (KVS),
#                                          summed per kernel; the turbo SET_ROWS at batch 1 with its warp stalls
#   scripts/gpu/cuda.sh serve [MODEL.gguf]  after stage+parts, with .device/serve carried (scripts/gpu/serve_pack.sh):
#                                          issue 13's throughput (llama-server vs tqgguf serve vs the old server,
#                                          -np 32, 32 clients x 128 tokens, turbo4/turbo4, -ngl 99) and issue 12's
#                                          tqgguf bench vs llama-bench (scripts/gpu/serve.sh); default SmolLM2
# ppl/gen/bench take LLAMA_K_CENTER from the environment (e.g. full for Qwen2.5-Coder); ppl runs
# -ngl 99 and 0 (CPU) unless NGLS says otherwise, for the K/V pairs in KVS (default: 8 pairs).
set -euo pipefail
W=/tmp/tqc
OUT=${OUT:-$PWD/out}
mkdir -p "$W/parts" "$OUT"
BIN=$W/build/bin

case "${1:-}" in
stage)
    tar -xJf .device/cuda/tree.tar.xz -C "$W"
    nproc > "$OUT/nproc.txt"; nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1 || true; nvcc --version > "$OUT/nvcc.txt" 2>&1 || true
    # in the foreground: the device tool ends a call's background processes with the call
    bash -c "cmake -S $W/llama.cpp -B $W/build -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
        -DGGML_CUDA=ON -DGGML_RPC=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_CUDA_NCCL=OFF -DLLAMA_BUILD_TESTS=ON \
        -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_UI=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
        -DCMAKE_C_FLAGS='-mno-amx-tile -mno-amx-int8 -mno-amx-bf16' -DCMAKE_CXX_FLAGS='-mno-amx-tile -mno-amx-int8 -mno-amx-bf16' \
        && cmake --build $W/build -j \$(nproc) --target ${TARGETS:-test-backend-ops llama-perplexity llama-bench llama-batched-bench llama-completion} \
        && g++ -O2 -std=c++17 scripts/gpu/turbo_codec_check.cpp -I$W/llama.cpp/ggml/include -L$BIN -Wl,-rpath,$BIN \
               -lggml -lggml-base -lggml-cpu -lggml-cuda -o $BIN/turbo-codec-check \
        && nvcc -O2 -o $BIN/copy-bandwidth scripts/gpu/copy_bandwidth.cu \
        && touch $W/built || touch $W/failed" > "$W/build.log" 2>&1
    tail -3 "$W/build.log"
    # llama-server apart: the checks do not wait for it, and its failure does not stop them (SERVER=0: not built)
    if [ "${SERVER:-1}" != 0 ]; then
        cmake --build $W/build -j "$(nproc)" --target llama-server > "$W/server-build.log" 2>&1 || echo "llama-server build failed"
        tail -2 "$W/server-build.log"
    fi
    ;&
parts)
    for d in .device/cuda/parts .device/cuda/g*; do  # carried piece folders
        if [ -d "$d" ]; then cp -n "$d"/* "$W/parts/" 2>/dev/null || true; fi
    done
    ls -la "$W/parts"
    # reassemble split files NAME.partNN -> NAME once every piece is there (NAME.nparts says how many)
    for n in "$W"/parts/*.nparts; do
        [ -e "$n" ] || continue
        base=${n%.nparts}; want=$(cat "$n"); have=$(ls "$base".part* 2>/dev/null | wc -l)
        if [ "$have" = "$want" ] && [ ! -e "$base" ]; then cat "$base".part* > "$base" && rm "$base".part* && echo "assembled $base"; fi
    done
    ;;
check)
    while [ ! -e $W/built ] && [ ! -e $W/failed ]; do sleep 5; done
    tail -5 $W/build.log
    [ -e $W/failed ] && { tail -60 $W/build.log > "$OUT/build-fail.log"; exit 1; }
    grep -c "Building CUDA" $W/build.log > "$OUT/n_cuda_units.txt" || true
    g++ -O2 -std=c++17 scripts/gpu/turbo_codec_check.cpp -I$W/llama.cpp/ggml/include -L$BIN -Wl,-rpath,$BIN -lggml -lggml-base -lggml-cpu -lggml-cuda -o $BIN/turbo-codec-check
    $BIN/turbo-codec-check > "$OUT/codec-check.txt" 2>&1 || true; cat "$OUT/codec-check.txt"
    timeout 500 $BIN/test-backend-ops -b CUDA0 -o SET_ROWS,GET_ROWS,CPY,FLASH_ATTN_EXT -p 'turbo' -j 8 > "$OUT/test-backend-ops.txt" 2>&1 || true
    bash scripts/gpu/tbo_summary.sh "$OUT/test-backend-ops.txt" | tee "$OUT/test-backend-ops-summary.txt"
    tail -3 "$OUT/test-backend-ops.txt"
    ;;
ppl)
    M=$2; TXT=$W/parts/wiki.test.raw; tag=$(basename "$M" .gguf)
    run() { # name ngl ctk ctv [extra...]
        local name=$1 ngl=$2 ctk=$3 ctv=$4; shift 4
        $BIN/llama-perplexity -m "$M" -f "$TXT" -c 512 --chunks 20 -b 512 -ngl "$ngl" -fa on -ctk "$ctk" -ctv "$ctv" \
            --kl-divergence-base "$W/$tag-ngl$ngl.kld" --kl-divergence "$@" > "$OUT/$tag-$name.log" 2>&1 || echo "FAILED $name"
        printf '%-28s %s | %s | %s\n' "$name" "$(grep -o 'Mean PPL(Q)[^\n]*' "$OUT/$tag-$name.log" | head -1)" \
            "$(grep -o 'Mean    KLD:[^\n]*' "$OUT/$tag-$name.log" | head -1)" "$(grep -o 'Same top p:[^\n]*' "$OUT/$tag-$name.log" | head -1)"
    }
    for ngl in ${NGLS:-99 0}; do
        # the CPU figures come from the same binary with no GPU visible (no op offload either)
        if [ $ngl = 0 ]; then export CUDA_VISIBLE_DEVICES=; fi
        $BIN/llama-perplexity -m "$M" -f "$TXT" -c 512 --chunks 20 -b 512 -ngl $ngl -fa on \
            --kl-divergence-base "$W/$tag-ngl$ngl.kld" > "$OUT/$tag-f16-ngl$ngl.log" 2>&1 || echo "FAILED base $ngl"
        printf '%-28s %s\n' "f16/f16 ngl$ngl" "$(grep -o 'Final estimate: PPL = [^\n]*' "$OUT/$tag-f16-ngl$ngl.log")"
        for kv in ${KVS:-q8_0/q8_0 q8_0/turbo4 turbo4/turbo4 turbo3/turbo3 turbo4/f16 f16/turbo4 q8_0/turbo2 q4_0/q4_0}; do
            run "${kv/\//-}-ngl$ngl" $ngl "${kv%/*}" "${kv#*/}"
        done
        # the GPU-only KLD offset of rotated caches: the same q8_0 cache without the Hadamard rotation
        [ -n "${KVS:-}" ] || LLAMA_ATTN_ROT_DISABLE=1 run "q8_0-q8_0-norot-ngl$ngl" $ngl q8_0 q8_0
    done | tee "$OUT/$tag-ppl-summary.txt"
    ;;
gen)
    # greedy 64 tokens from 8 prompts, CUDA vs the same binary's CPU, per K/V pair; the
    # texts are compared token by token here (scripts/gpu/compare_gen.py)
    M=$2; tag=$(basename "$M" .gguf); mkdir -p "$OUT/gen-$tag"
    prompts=("The capital of France is" "Once upon a time, in a small village," "def fibonacci(n):"
             "The three laws of thermodynamics are" "Water boils at" "In 1969, the first person to walk on the Moon"
             "A good recipe for pancakes needs" "The quick brown fox")
    for kv in f16/f16 f16/turbo4 turbo4/f16 turbo4/turbo4 q8_0/turbo4; do
        for ngl in 99 0; do
            for i in "${!prompts[@]}"; do
                f="$OUT/gen-$tag/${kv/\//-}-ngl$ngl-p$i.txt"
                if [ $ngl = 0 ]; then vis=""; else vis=0; fi
                CUDA_VISIBLE_DEVICES=$vis $BIN/llama-completion -m "$M" -p "${prompts[$i]}" -n 64 --temp 0 -s 1 -ngl $ngl -fa on \
                    -ctk "${kv%/*}" -ctv "${kv#*/}" -no-cnv --no-display-prompt -c 256 > "$f" 2> /dev/null < /dev/null || echo "FAILED $kv $ngl $i"
            done
        done
    done
    # context shift (llama.cpp's K-shift: dequantize, RoPE, requantize) with a turbo4 K cache:
    # 200 tokens through a 128-token context, CUDA vs CPU, f16 K as the yardstick
    for kv in f16/f16 turbo4/turbo4 turbo4/f16; do
        for ngl in 99 0; do
            if [ $ngl = 0 ]; then vis=""; else vis=0; fi
            CUDA_VISIBLE_DEVICES=$vis $BIN/llama-completion -m "$M" -p "${prompts[1]}" -n 200 --temp 0 -s 1 -ngl $ngl -fa on \
                -ctk "${kv%/*}" -ctv "${kv#*/}" -no-cnv --no-display-prompt -c 128 --context-shift \
                > "$OUT/gen-$tag/shift-${kv/\//-}-ngl$ngl.txt" 2> "$OUT/gen-$tag/shift-${kv/\//-}-ngl$ngl.err" < /dev/null || echo "FAILED shift $kv $ngl"
        done
    done
    ls "$OUT/gen-$tag" | wc -l
    ;;
kshift)
    # context shift with quantized K caches, CUDA and the same binary's CPU (scripts/gpu/kshift_check.cpp)
    M=$2; tag=$(basename "$M" .gguf)
    g++ -O2 -std=c++17 scripts/gpu/kshift_check.cpp -I$W/llama.cpp/include -I$W/llama.cpp/ggml/include -L$BIN -Wl,-rpath,$BIN \
        -lllama -lggml -lggml-base -o $BIN/kshift-check
    { $BIN/kshift-check "$M" $W/parts/wiki.test.raw 99 turbo4 q8_0 turbo3
      CUDA_VISIBLE_DEVICES= $BIN/kshift-check "$M" $W/parts/wiki.test.raw 0 turbo4 q8_0 turbo3; } 2>&1 | tee "$OUT/kshift-$tag.txt"
    ;;
fa)
    $BIN/copy-bandwidth | tee "$OUT/copy-bandwidth.txt"
    $BIN/test-backend-ops perf -b CUDA0 -o FLASH_ATTN_EXT \
        -p 'hsk=(64|128|256),hsv=(64|128|256),nh=(1|8),nr23=\[(4|8),1\],kv=(7680|32768|8192),nb=(1|512),' \
        > "$OUT/fa-perf.txt" 2>&1 || true
    grep -E "FLASH_ATTN_EXT.*us/run" "$OUT/fa-perf.txt" | sed -E "s/^ +//" | cut -c1-60,200- | head -60
    # the table (µs, KV bytes, GB/s, share of the copy bandwidth) is made here afterwards:
    #   python3 scripts/gpu/fa_bandwidth.py fa-perf.txt copy-bandwidth.txt
    ;;
bench)
    M=$2; tag=$(basename "$M" .gguf)
    # one llama-bench per K/V pair (comma lists would expand to every K x V combination)
    for kv in ${KVS:-f16/f16 q8_0/q8_0 q4_0/q4_0 q8_0/turbo4 turbo4/f16 turbo4/turbo4 turbo3/turbo3}; do
        $BIN/llama-bench -m "$M" -ngl 99 -fa 1 -ctk "${kv%/*}" -ctv "${kv#*/}" -p 512 -n 128 -d 0,8192,32768 -r 3 -o md \
            2>> "$OUT/bench-$tag.err" | grep -E "^\| " | grep -v -E "^\| (model|---)" || echo "FAILED $kv"
    done | tee "$OUT/bench-$tag.md"
    ;;
profile)
    M=$2; tag=$(basename "$M" .gguf)
    # ncu reads the hardware counters on this machine's runtime with the clocks left alone
    NCU="ncu --clock-control none"
    for kv in ${KVS:-f16/f16 q8_0/q8_0 turbo4/turbo4 q8_0/turbo4 turbo4/f16 turbo3/turbo3}; do
        f="$OUT/ncu-fa-${kv/\//-}.txt"
        $NCU -k regex:flash_attn_ext_vec --launch-skip 3 --launch-count 1 --section SpeedOfLight --section Occupancy \
            --section LaunchStats --section WarpStateStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
            $BIN/test-backend-ops perf -b CUDA0 -o FLASH_ATTN_EXT \
            -p "hsk=128,hsv=128,nh=8,nr23=\[4,1\],kv=32768,nb=1,.*type_K=${kv%/*},type_V=${kv#*/}," > "$f" 2>&1 || echo "FAILED ncu $kv"
        echo "== $kv"
        grep -E "^ +(Duration|Memory Throughput|DRAM Throughput|Compute \(SM\) Throughput|Registers Per Thread|Achieved Occupancy|Theoretical Occupancy|Issue Slots Busy|Executed Ipc Active|Stall [A-Za-z ]+)" "$f" | sed -E 's/ +/ /g' | head -14
    done | tee "$OUT/ncu-fa-summary.txt"
    # the cache write inside decoding (llama-bench tg, batch 1): every SET_ROWS kernel's duration
    for kv in q8_0 turbo4 turbo3; do
        $NCU -k regex:set_rows --launch-skip 120 --launch-count 40 --metrics gpu__time_duration.sum \
            $BIN/llama-bench -m "$M" -ngl 99 -fa 1 -ctk $kv -ctv $kv -p 0 -n 8 -r 1 > "$OUT/ncu-setrows-$kv-$tag.txt" 2>&1 || echo "FAILED ncu set_rows $kv"
        printf '%-8s SET_ROWS at batch 1 (ncu, caches flushed per kernel): mean %s over %s kernels\n' $kv \
            "$(grep -E 'gpu__time_duration.sum' "$OUT/ncu-setrows-$kv-$tag.txt" | awk '{s += $NF; u = $(NF-1); n++} END {if (n) printf "%.2f %s", s/n, u}')" \
            "$(grep -c 'gpu__time_duration.sum' "$OUT/ncu-setrows-$kv-$tag.txt")"
    done | tee "$OUT/ncu-setrows-$tag.txt.summary"
    ;;
step)
    # every kernel of a few decode steps (llama-bench tg, batch 1), no cache flush, per K/V type:
    # where a token's time goes (scripts/gpu/ncu_step_summary.py sums it per kernel)
    M=$2; tag=$(basename "$M" .gguf)
    for kv in ${KVS:-q8_0/q8_0 turbo4/turbo4}; do
        ncu --clock-control none --cache-control none --launch-skip 600 --launch-count 400 --metrics gpu__time_duration.sum \
            $BIN/llama-bench -m "$M" -ngl 99 -fa 1 -ctk "${kv%/*}" -ctv "${kv#*/}" -p 0 -n 16 -r 1 \
            > "$OUT/ncu-step-${kv/\//-}-$tag.txt" 2>&1 || echo "FAILED ncu step $kv"
    done
    python3 scripts/gpu/ncu_step_summary.py "$OUT"/ncu-step-*-"$tag".txt | tee "$OUT/ncu-step-$tag-summary.txt"
    # the turbo cache write at batch 1 in detail: where its warps stall (sampled per SASS line)
    ncu --clock-control none --cache-control none -k regex:set_rows_turbo --launch-skip 60 --launch-count 1 \
        --section WarpStateStats --section SourceCounters --section LaunchStats --section Occupancy \
        $BIN/llama-bench -m "$M" -ngl 99 -fa 1 -ctk turbo4 -ctv turbo4 -p 0 -n 8 -r 1 > "$OUT/ncu-setrows-detail-$tag.txt" 2>&1 \
        || echo "FAILED ncu set_rows detail"
    grep -E "Stall|Warp Cycles|Duration|Registers|Block Size|Grid Size" "$OUT/ncu-setrows-detail-$tag.txt" | sed -E 's/ +/ /g' | head -30
    ;;
tg)
    M=$2; tag=$(basename "$M" .gguf)
    for run in ${RUNS:-q8_0/q8_0 turbo4/turbo4}; do
        kv=${run%%,*}; vars=${run#"$kv"}; vars=${vars//,/ }
        echo "== $kv$vars"
        env $vars $BIN/llama-bench -m "$M" -ngl 99 -fa 1 -ctk "${kv%/*}" -ctv "${kv#*/}" -p 0 -n 128 -d "${DEPTHS:-0,8192,32768}" \
            -r "${R:-5}" -o md 2>/dev/null | grep -E "^\| " | grep -v -E "^\| (model|---)" || echo "FAILED $run"
    done | tee -a "$OUT/tg-$tag.txt"
    ;;
batched)
    M=$2; tag=$(basename "$M" .gguf)
    # 64 or 240 sequences of 4096 + 128 tokens, each in its own KV stream (batched-bench default)
    for run in ${RUNS:-f16/f16:64 q8_0/q8_0:64 turbo4/turbo4:64 q8_0/turbo4:64 turbo3/turbo3:64 \
               f16/f16:240 q8_0/q8_0:240 turbo4/turbo4:240}; do
        kv=${run%:*}; npl=${run#*:}
        {
            f="$OUT/batched-$tag-${kv/\//-}-$npl.txt"
            $BIN/llama-batched-bench -m "$M" -ngl 99 -fa on -ctk "${kv%/*}" -ctv "${kv#*/}" -c $((npl*4224)) -b 2048 -ub 512 \
                -npp 4096 -ntg 128 -npl $npl > "$f" 2>&1 || echo "FAILED $kv $npl"
            printf '%-14s npl %3s  %s\n' "$kv" $npl "$(grep -E '^\| +4096 \|' "$f" | tail -1)"
        }
    done | tee "$OUT/batched-$tag.txt"
    ;;
serve)
    M=${2:-$W/parts/SmolLM2-135M-Instruct.Q4_1.gguf}
    OUT=$OUT bash scripts/gpu/serve.sh "$BIN" "$M"
    ;;
*)
    sed -n "2,/^set -euo/p" "$0" | sed "$ d"; exit 2 ;;
esac
