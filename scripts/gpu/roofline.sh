#!/usr/bin/env bash
# GPU machine (one H200, no internet): issue 26 item 2, the turbo FA decode kernel against the
# HBM roofline. One build; the decode kernel's variants (GGML_CUDA_TURBO_FA_DEC=1..11, listed in
# native/ggml/src/ggml-cuda/turbo-fattn-dec.cuh; 0 = the old vector kernel) and the prefill's turbo -> f16
# conversion (GGML_CUDA_TURBO_CVT=0: upstream's generic kernel) are picked at run time, so every
# measurement below runs them all from the same binaries. Work dir /tmp/tqr; results under $OUT.
#
#   scripts/gpu/pack.sh                      (here) .device/cuda/tree.tar.xz from this checkout
#   scripts/gpu/roofline.sh build            unpack, configure, build test-backend-ops, llama-bench,
#                                            llama-batched-bench (+ copy-bandwidth), ~6 min on 16 cores;
#                                            OVERLAY_CUDA=1 copies native/ggml/src/ggml-cuda/ over the
#                                            packed tree first (a CUDA-only edit without re-packing)
#   scripts/gpu/roofline.sh relink           link the same objects again with LINK_FLAGS / LIBSTDCXX=shared
#                                            (the system's libstdc++.so.6 instead of a static copy per
#                                            library) and report what each library needs and exports
#   scripts/gpu/roofline.sh check            test-backend-ops -b CUDA0, turbo cases of FLASH_ATTN_EXT,
#                                            SET_ROWS, GET_ROWS; FLASH_ATTN_EXT once per value in DECS
#                                            (env, default "1 2 3 2:4 0": each variant; 2 with every GQA case
#                                            grouped, GGML_CUDA_TURBO_FA_GQA=4; old); OK / FAIL / not supported
#   scripts/gpu/roofline.sh kernel           FA decode alone, hd 128 / 8 KV heads / GQA 4 / KV 32768 /
#                                            1 query (and hd 64 / GQA 8 / KV 7680), f16, q8_0, turbo4,
#                                            turbo3, turbo2: µs, GB/s and share of the copy bandwidth
#                                            measured in the same run; turbo rows once per DEC in DECS
#                                            (default "0 1 2 3"; DEC:G entries are skipped)
#   scripts/gpu/roofline.sh table            only the table of "kernel", from the fa-perf-dec*.txt and
#                                            copy-bandwidth.txt already in $OUT (a dry run of the parsing)
#   scripts/gpu/roofline.sh bench MODEL      llama-bench -ngl 99 -fa 1 -p 512 -n 64 -d 0,16384,65536 -r 3
#                                            -o md per K/V pair (KVS), the turbo/turbo pairs once per
#                                            value in DECS (default "1 0"); ~8-10 min for the defaults:
#                                            split with KVS=... / DECS=... over several calls if needed;
#                                            BENCH_ARGS replaces the -p/-n/-d/-r flags; LLAMA_ATTN_ROT_DISABLE=1
#                                            (env) measures without the Hadamard rotation (labelled)
#   scripts/gpu/roofline.sh batched MODEL    llama-batched-bench S_TG: equal KV memory (f16 64 seqs vs
#                                            turbo4 240 seqs of 4096+128) and equal batch (128 x 2048+128)
#                                            RUNS="K/V:NPL:NPP[:DEC] ..." overrides; more than 256 sequences
#                                            need patch 0011 (LLAMA_MAX_SEQ 1024), e.g. turbo4/turbo4:480:2048:2;
#                                            PPS=1: one prompt decoded and copied to every sequence (-pps: the
#                                            same cache and decode steps, the prefill of npl prompts saved);
#                                            RTAG=x: a suffix for the output files of a repeated run
#   scripts/gpu/roofline.sh model PATH       write a random-weight GGUF of a real model's shape with
#                                            scripts/gpu/write_shape.py: SHAPE (env, default llama-3.1-8b;
#                                            tqgguf/shapes.py lists them), gguf from .device/whl if needed
# Several subcommands run in order in one call: roofline.sh build check kernel. The machine is
# handed back after ~30 s idle and a new one starts bare (no build), so keep the calls back to
# back; per call (10 min): "build check" (~6 + ~3 min), "kernel batched MODEL", "bench MODEL"
# (or bench split with KVS=... / DECS=...). A subcommand that finds no build on its machine builds
# first when the tree is carried (a fresh machine), else says so.
set -euo pipefail
cd "$(dirname "$0")/../.."
W=${TQR:-/tmp/tqr}  # work dir (build tree)
OUT=${OUT:-$PWD/out}
mkdir -p "$W" "$OUT"
BIN=$W/build/bin

# the linker flags of every library and program: LINK_FLAGS, and with LIBSTDCXX=shared a directory
# holding only a libstdc++.so link to the system's libstdc++.so.6, searched before the compiler's
# own (the GPU image's /opt/gcc has only the static archive, so each library carries and exports a
# private copy: docs/CUDA.md, load order)
link_flags() {
    local f=${LINK_FLAGS:-} so
    if [ "${LIBSTDCXX:-}" = shared ]; then
        so=$(ldconfig -p | awk '/libstdc\+\+\.so\.6 .*x86-64/ {print $NF; exit}')
        [ -n "$so" ] || { echo "LIBSTDCXX=shared: no libstdc++.so.6 in ldconfig -p" >&2; exit 1; }
        mkdir -p "$W/shim" && ln -sf "$so" "$W/shim/libstdc++.so"
        f="$f -L$W/shim"
    fi
    echo "$f"
}
# per library of the build: does it need libstdc++.so.6, and how many std:: definitions it exports
libstdcxx_report() {
    for so in "$BIN"/lib*.so; do
        echo "$(basename "$so"): NEEDED libstdc++ $(readelf -d "$so" | grep -c 'libstdc++'), exported std:: definitions" \
             "$(nm -D --defined-only -C "$so" 2>/dev/null | grep ' [TDBR] ' | grep -c 'std::')"
    done
}

# a fresh machine (the previous one was handed back) has no build: make it first when the tree came along
built() {
    [ -x "$BIN/test-backend-ops" ] && return 0
    if [ -e .device/cuda/tree.tar.xz ]; then echo "no build on this machine: building first (~6 min)"; sub build; return 0; fi
    echo "not built, and no .device/cuda/tree.tar.xz carried: run '$0 build' first" >&2; exit 1
}

# bits per value of a cache type (block bytes * 8 / block size)
bits() {
    case $1 in
        f16|bf16) echo 16 ;; q8_0) echo 8.5 ;; q4_0) echo 4.5 ;;
        turbo4) echo 4.25 ;; turbo3) echo 3.25 ;; turbo2) echo 2.25 ;; *) echo 0 ;;
    esac
}
is_turbo_pair() { case $1 in turbo*/turbo*) return 0 ;; *) return 1 ;; esac; }
# the DEC values of DECS for the kernel table (DEC:G entries are check's, skipped here)
kernel_decs() { for d in ${DECS:-0 1 2 3}; do case $d in *:*) ;; *) echo "$d" ;; esac; done; }

sub() {
case "$1" in
build)
    rm -rf "$W/llama.cpp"
    tar -xJf .device/cuda/tree.tar.xz -C "$W"
    if [ -n "${OVERLAY_CUDA:-}" ]; then  # this checkout's CUDA sources over the packed tree (a CUDA-only edit, no re-pack)
        cp native/ggml/src/ggml-cuda/* "$W/llama.cpp/ggml/src/ggml-cuda/" && echo "overlaid: $(ls native/ggml/src/ggml-cuda | tr '\n' ' ')"
    fi
    { nproc; nvidia-smi; nvcc --version; } > "$OUT/machine.txt" 2>&1 || true
    CC_LAUNCH=()
    if command -v ccache > /dev/null; then CC_LAUNCH=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache); fi
    GEN=(); if command -v ninja > /dev/null; then GEN=(-G Ninja); fi
    start=$(date +%s)
    LF=$(link_flags)
    cmake -S "$W/llama.cpp" -B "$W/build" "${GEN[@]}" "${CC_LAUNCH[@]}" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
        -DGGML_CUDA=ON -DGGML_RPC=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_CUDA_NCCL=OFF -DLLAMA_BUILD_TESTS=ON \
        -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=${SERVER:-OFF} "-DCMAKE_SHARED_LINKER_FLAGS=$LF" "-DCMAKE_MODULE_LINKER_FLAGS=$LF" \
        "-DCMAKE_EXE_LINKER_FLAGS=$LF" -DLLAMA_BUILD_UI=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
        -DCMAKE_C_FLAGS='-mno-amx-tile -mno-amx-int8 -mno-amx-bf16' -DCMAKE_CXX_FLAGS='-mno-amx-tile -mno-amx-int8 -mno-amx-bf16' \
        > "$OUT/configure.log" 2>&1 || { tail -30 "$OUT/configure.log"; exit 1; }
    grep -E "tqgguf|CUDA Toolkit|ccache" "$OUT/configure.log" || true
    cmake --build "$W/build" -j "$(nproc)" --target test-backend-ops llama-bench llama-batched-bench ${EXTRA_TARGETS:-} > "$OUT/build.log" 2>&1 \
        || { grep -E "error|Error" "$OUT/build.log" | head -40; tail -20 "$OUT/build.log"; exit 1; }
    nvcc -O2 -o "$BIN/copy-bandwidth" scripts/gpu/copy_bandwidth.cu >> "$OUT/build.log" 2>&1 || echo "copy-bandwidth not built"
    echo "built in $(( $(date +%s) - start )) s"; ls -la "$BIN" | grep -E "test-backend-ops|llama-bench|llama-batched-bench|copy-bandwidth"
    ;;
relink)
    # the same objects linked again with this call's LINK_FLAGS / LIBSTDCXX (a link-flag change
    # recompiles nothing), then what each library needs and exports
    built
    LF=$(link_flags)
    cmake -B "$W/build" "-DCMAKE_SHARED_LINKER_FLAGS=$LF" "-DCMAKE_MODULE_LINKER_FLAGS=$LF" "-DCMAKE_EXE_LINKER_FLAGS=$LF" \
        > "$OUT/relink-configure.log" 2>&1 || { tail -20 "$OUT/relink-configure.log"; exit 1; }
    start=$(date +%s)
    cmake --build "$W/build" -j "$(nproc)" --target test-backend-ops llama-bench llama-batched-bench ${EXTRA_TARGETS:-} \
        > "$OUT/relink.log" 2>&1 || { grep -E "error|undefined" "$OUT/relink.log" | head -20; exit 1; }
    echo "relinked with [$LF] in $(( $(date +%s) - start )) s"
    libstdcxx_report | tee "$OUT/relink-libstdcxx.txt"
    ;;
check)
    built
    DECS=${DECS:-1 2 3 2:4 0}
    timeout 300 "$BIN/test-backend-ops" -b CUDA0 -o SET_ROWS,GET_ROWS -p turbo -j 8 > "$OUT/tbo-rows.txt" 2>&1 || echo "SET_ROWS/GET_ROWS run: rc $?"
    bash scripts/gpu/tbo_summary.sh "$OUT/tbo-rows.txt" | grep -E "SET_ROWS|GET_ROWS" | tee "$OUT/check-summary.txt"
    for run in $DECS; do  # DEC or DEC:G (G: GGML_CUDA_TURBO_FA_GQA, forces the heads per block on small cases)
        dec=${run%%:*}; g=; [ "$run" != "$dec" ] && g=${run#*:}
        f="$OUT/tbo-fa-dec$dec${g:+-g$g}.txt"
        env GGML_CUDA_TURBO_FA_DEC=$dec ${g:+GGML_CUDA_TURBO_FA_GQA=$g} timeout 400 "$BIN/test-backend-ops" -b CUDA0 -o FLASH_ATTN_EXT -p turbo -j 8 \
            > "$f" 2>&1 || echo "FA run DEC=$dec${g:+ GQA=$g}: rc $?"
        printf 'DEC=%s%s ' "$dec" "${g:+ GQA=$g}"; bash scripts/gpu/tbo_summary.sh "$f" | grep FLASH_ATTN_EXT
        grep -E "FAIL" "$f" | head -20 || true
        tail -2 "$f"
    done | tee -a "$OUT/check-summary.txt"
    ;;
kernel)
    built
    { [ -x "$BIN/copy-bandwidth" ] && "$BIN/copy-bandwidth"; } | tee "$OUT/copy-bandwidth.txt" || true
    copy=$(grep -oE "[0-9]+(\.[0-9]+)? GB/s" "$OUT/copy-bandwidth.txt" | tail -1 | awk '{print $1}' || true)
    filt='hsk=(64|128),hsv=(64|128),nh=8,nr23=\[(4|8),1\],kv=(7680|32768),nb=1,.*type_K=(f16|q8_0|turbo4|turbo3|turbo2),type_V=(f16|q8_0|turbo4|turbo3|turbo2),'
    filt_turbo='hsk=(64|128),hsv=(64|128),nh=8,nr23=\[(4|8),1\],kv=(7680|32768),nb=1,.*type_K=(turbo4|turbo3|turbo2),type_V=(turbo4|turbo3|turbo2),'
    for dec in $(kernel_decs); do  # DEC != 0 changes only turbo/turbo pairs: only those are run again
        f=$filt; [ "$dec" != 0 ] && f=$filt_turbo
        GGML_CUDA_TURBO_FA_DEC=$dec "$BIN/test-backend-ops" perf -b CUDA0 -o FLASH_ATTN_EXT -p "$f" > "$OUT/fa-perf-dec$dec.txt" 2>&1 || echo "perf DEC=$dec failed"
    done
    sub table
    ;;
table)
    copy=$(grep -oE "[0-9]+(\.[0-9]+)? GB/s" "$OUT/copy-bandwidth.txt" 2> /dev/null | tail -1 | awk '{print $1}' || true)
    {
        echo "copy bandwidth (read + write): ${copy:-?} GB/s"
        echo
        echo "| hd | KV heads | GQA | KV | K / V | DEC | us/call | KV MB | GB/s | of copy |"
        echo "|---|---|---|---|---|---|---|---|---|---|"
        for dec in $(kernel_decs); do
            [ -e "$OUT/fa-perf-dec$dec.txt" ] || continue
            { grep -E "FLASH_ATTN_EXT\(.*us/run" "$OUT/fa-perf-dec$dec.txt" || true; } | sed -E 's/\x1b\[[0-9;]*m//g' | while read -r line; do
                hd=$(sed -E 's/.*hsk=([0-9]+).*/\1/' <<< "$line"); nh=$(sed -E 's/.*,nh=([0-9]+).*/\1/' <<< "$line")
                gqa=$(sed -E 's/.*nr23=\[([0-9]+),.*/\1/' <<< "$line"); kv=$(sed -E 's/.*,kv=([0-9]+).*/\1/' <<< "$line")
                tk=$(sed -E 's/.*type_K=([a-z0-9_]+).*/\1/' <<< "$line"); tv=$(sed -E 's/.*type_V=([a-z0-9_]+).*/\1/' <<< "$line")
                us=$(sed -E 's/.* ([0-9.]+) us\/run.*/\1/' <<< "$line")
                if [ "$dec" != 0 ] && ! is_turbo_pair "$tk/$tv"; then continue; fi  # DEC only changes turbo/turbo
                awk -v hd="$hd" -v nh="$nh" -v gqa="$gqa" -v kv="$kv" -v tk="$tk" -v tv="$tv" -v dec="$dec" -v us="$us" \
                    -v bk="$(bits "$tk")" -v bv="$(bits "$tv")" -v copy="${copy:-0}" 'BEGIN {
                    mb = kv * nh * hd * (bk + bv) / 8 / 1e6; gbs = mb * 1e6 / (us * 1e-6) / 1e9;
                    printf "| %s | %s | %s | %s | %s / %s | %s | %.2f | %.1f | %.0f | %s |\n", hd, nh, gqa, kv, tk, tv, dec, us, mb, gbs,
                        (copy > 0 ? sprintf("%.0f%%", 100 * gbs / copy) : "?") }'
            done
        done
    } | tee "$OUT/fa-roofline.md"
    ;;
bench)
    built
    M=${2:?model path}; tag=$(basename "$M" .gguf)
    DECS=${DECS:-1 0}
    for kv in ${KVS:-f16/f16 q8_0/q8_0 q8_0/turbo4 turbo4/turbo4 turbo3/turbo3}; do
        if is_turbo_pair "$kv"; then decs=$DECS; else decs=-; fi
        for dec in $decs; do
            label="$kv"; envs=()
            if [ "$dec" != - ]; then label="$kv DEC=$dec"; envs=(GGML_CUDA_TURBO_FA_DEC=$dec); fi
            [ -n "${LLAMA_ATTN_ROT_DISABLE:-}" ] && label="$label rotation off (LLAMA_ATTN_ROT_DISABLE)"
            echo "== $label"
            env "${envs[@]}" "$BIN/llama-bench" -m "$M" -ngl 99 -fa 1 -ctk "${kv%/*}" -ctv "${kv#*/}" ${BENCH_ARGS:--p 512 -n 64 -d 0,16384,65536 -r 3} \
                -o md 2>> "$OUT/bench-$tag.err" | grep -E "^\| " | grep -v -E "^\| (model|---)" || echo "FAILED $label"
        done
    done | tee -a "$OUT/bench-$tag.md"
    ;;
batched)
    built
    M=${2:?model path}; tag=$(basename "$M" .gguf)
    for run in ${RUNS:-f16/f16:64:4096 turbo4/turbo4:240:4096:1 f16/f16:128:2048 q8_0/q8_0:128:2048 \
               turbo4/turbo4:128:2048:1 turbo4/turbo4:128:2048:0 turbo3/turbo3:128:2048:1 turbo4/turbo4:480:2048:1}; do
        IFS=: read -r kv npl npp dec <<< "$run"
        envs=(); [ -n "${dec:-}" ] && envs=(GGML_CUDA_TURBO_FA_DEC=$dec)
        f="$OUT/batched-$tag-${kv/\//-}-$npl-$npp${dec:+-dec$dec}${PPS:+-pps}${RTAG:+-$RTAG}.txt"
        env "${envs[@]}" "$BIN/llama-batched-bench" -m "$M" -ngl 99 -fa on -ctk "${kv%/*}" -ctv "${kv#*/}" \
            -c $((npl*(npp+128))) -b 2048 -ub 512 -npp "$npp" -ntg 128 -npl "$npl" ${PPS:+-pps} > "$f" 2>&1 || echo "FAILED $run"
        printf '%-14s %-6s npl %3s npp %4s  %s\n' "$kv" "${dec:+DEC=$dec}" "$npl" "$npp" "$(grep -E "^\| +$npp \|" "$f" | tail -1)"
    done | tee -a "$OUT/batched-$tag.txt"
    echo "columns: | PP | TG | B | N_KV | T_PP s | S_PP t/s | T_TG s | S_TG t/s | T s | S t/s |"
    ;;
model)
    P=${2:?path}
    # the gguf package: from the wheel carried in .device/whl when this machine has none
    if ! python3 -c "import gguf" 2> /dev/null && ls .device/whl/gguf-*.whl > /dev/null 2>&1; then
        python3 -m pip install -q --no-index --no-deps --target /tmp/tq-site .device/whl/gguf-*.whl
    fi
    PYTHONPATH=/tmp/tq-site:$PWD${PYTHONPATH:+:$PYTHONPATH} python3 scripts/gpu/write_shape.py "${SHAPE:-llama-3.1-8b}" "$P"; ls -la "$P"
    ;;
*)
    sed -n "2,/^set -euo/p" "$0" | sed "$ d"; exit 2 ;;
esac
}

[ $# -gt 0 ] || { sub help; }
while [ $# -gt 0 ]; do
    case "$1" in
        bench|batched|model) [ $# -ge 2 ] || { echo "$1 needs a path" >&2; exit 2; }; sub "$1" "$2"; shift 2 ;;
        *) sub "$1"; shift ;;
    esac
done
