# Sourced by the call scripts of scripts/gpu/calls/ (session 18 on), which run on the GPU machine from the
# repository root: `. scripts/gpu/calls/common.sh; call_start N`. The call's files go to /tmp/oN and come
# back as $OUT/dN.tgz (the device tool fetches what is under $OUT); NVLink multicast stays off; left()
# is the seconds left of the 575 a call script plans for (the device tool's limit is 600; CALL_LIMIT=N plans
# for N when less device time is left).
call_start() {
    R=$OUT; export OUT=/tmp/o$1; mkdir -p "$OUT"
    trap "tar -C $OUT -czf $R/d$1.tgz . 2>/dev/null" EXIT
    export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
    T0=$(date +%s)
    B=/tmp/tqr/build/bin
}
left() { echo $(( ${CALL_LIMIT:-575} - ($(date +%s) - T0) )); }
# roofline.sh's build with the system compiler (one libstdc++: docs/DESIGN.md change 20)
build() { env CC=/usr/bin/gcc CXX=/usr/bin/g++ CUDAHOSTCXX=/usr/bin/g++ bash scripts/gpu/roofline.sh build 2>&1 | tail -3; echo "built at $(( $(date +%s) - T0 )) s"; }
# a machine handed back between calls comes back bare: build again, write the 8B shape again
ensure_build() { [ -x "$B/llama-bench" ] || { echo "machine lost its build: building again"; build; }; }
ensure_m8b() { [ -e /tmp/m8b.gguf ] || bash scripts/gpu/roofline.sh model /tmp/m8b.gguf 2>&1 | tail -1; }
# The one-query FA call in interleaved rounds: fa_rounds NAME ROUNDS "DECS" PATTERN [FIRST]: for each round and each
# GGML_CUDA_TURBO_FA_DEC value, test-backend-ops perf on the cases PATTERN matches (FIRST instead in the first
# round's first DEC, e.g. with f16 added), into $OUT/NAME-rR-decD.txt, and one summary line per run (KV, K/V types,
# the permutation where the case has one, µs per call) into $OUT/NAME-summary.txt
fa_rounds() {
  local name=$1 rounds=$2 decs=$3 pat=$4 first=${5:-$4} r dec f o
  for r in $(seq 1 $rounds); do for dec in $decs; do
    [ $(left) -lt 25 ] && { echo "stopping: $(left) s left"; break 2; }
    f=$pat; [ $r$dec = 1${decs%% *} ] && f=$first
    o=$OUT/$name-r$r-dec$dec.txt
    GGML_CUDA_TURBO_FA_DEC=$dec timeout $(( $(left) - 5 )) $B/test-backend-ops perf -b CUDA0 -o FLASH_ATTN_EXT -p "$f" > $o 2>&1 || echo "$name r$r DEC=$dec rc $?"
    echo "r$r DEC=$dec: $(sed 's/\x1b\[[0-9;]*m//g' $o | grep -E 'us/run' | sed -E 's/.*kv=([0-9]+).*type_K=([a-z0-9_]+),type_V=([a-z0-9_]+),(.*permute=\[([0-9,]+)\])?.* ([0-9.]+) us\/run.*/\1 \2\/\3 \5 \6;/' | tr '\n' ' ')"
  done; done | tee $OUT/$name-summary.txt
}
# test-backend-ops patterns of the one-query FA call (hd 128 / 8 K/V heads / GQA 4, contiguous) at the cache lengths
# KVS (e.g. "256|512"): fa_dec_patterns KVS sets P (turbo4/turbo4) and F (f16/f16 and turbo4/turbo4), for fa_rounds
fa_dec_patterns() {
  P="hsk=128,hsv=128,nh=8,nr23=\[4,1\],kv=($1),nb=1,.*type_K=turbo4,type_V=turbo4,.*permute=\[0,1,2,3\]"
  F="hsk=128,hsv=128,nh=8,nr23=\[4,1\],kv=($1),nb=1,.*type_K=(f16|turbo4),type_V=(f16|turbo4),.*permute=\[0,1,2,3\]"
}
# a decode kernel A/B at short caches: the one-query FA call in three interleaved rounds of the GGML_CUDA_TURBO_FA_DEC
# values DECS at the lengths KVS (f16 in the first round; NAME-summary.txt), then tg64 @ d0 of the 8B shape in three
# interleaved rounds (-r 2) of RUNS into FILE (stopping when fewer than MIN_LEFT seconds are left):
# short_cache_ab NAME KVS "DECS" FILE MIN_LEFT "RUNS"
short_cache_ab() {
  fa_dec_patterns "$2"
  fa_rounds "$1" 3 "$3" "$P" "$F"
  echo "FA rounds done at $(( $(date +%s) - T0 )) s"
  tg_env_rounds "$4" 3 0 2 "$5" "$6"
  echo "d0 rounds done at $(( $(date +%s) - T0 )) s"
}
# tg64 of the 8B shape in interleaved rounds: tg_rounds FILE ROUNDS DEPTHS "K/V:DEC ..." (DEC - : the type's default);
# llama-bench -r 1 per run, every run labelled "rR == K/V[ DEC=D]" for scripts/gpu/tg_rounds.py
tg_rounds() {
  local file=$1 rounds=$2 depths=$3 runs=$4 r run kv dec label envs
  for r in $(seq 1 $rounds); do
    for run in $runs; do kv=${run%:*} dec=${run#*:}
      [ $(left) -lt 40 ] && { echo "stopping: $(left) s left"; break 2; }
      label=$kv envs=(); [ "$dec" != - ] && label="$kv DEC=$dec" envs=(GGML_CUDA_TURBO_FA_DEC=$dec)
      echo "r$r == $label"
      env "${envs[@]}" $B/llama-bench -m /tmp/m8b.gguf -ngl 99 -fa 1 -ctk ${kv%/*} -ctv ${kv#*/} -p 0 -n 64 -d $depths -r 1 -o md 2>>$OUT/bench.err | grep -E '^\| ' | grep -v -E '^\| (model|---)'
    done
  done | tee $OUT/$file
  python3 scripts/gpu/tg_rounds.py $OUT/$file 2>&1 | tail -14
}
# every kernel of about one d0 decode token of the 8B shape under Nsight Compute (gpu__time_duration, no cache flush,
# no warm-up, the first 1500 launches skipped), for turbo4 and f16, each stopped after TIMEOUT seconds and skipped when
# fewer than MIN_LEFT are left: ncu_d0_token MIN_LEFT TIMEOUT; then summed per kernel by scripts/gpu/ncu_step_summary.py
# into $OUT/ncu-step0-summary.txt
ncu_d0_token() {
  local min_left=$1 tmo=$2 kv
  for kv in turbo4/turbo4 f16/f16; do
    [ $(left) -lt $min_left ] && { echo "stopping before d0 ncu $kv: $(left) s left"; break; }
    timeout $tmo ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --launch-skip 1500 --launch-count 700 \
      $B/llama-bench -m /tmp/m8b.gguf -ngl 99 -fa 1 -ctk ${kv%/*} -ctv ${kv#*/} -p 0 -n 8 -d 0 -r 1 --no-warmup \
      > $OUT/ncu-step0-${kv/\//-}.txt 2>&1 || echo "ncu d0 $kv rc $?"
    echo "d0 ncu $kv at $(( $(date +%s) - T0 )) s"
  done
  ls $OUT/ncu-step0-*.txt > /dev/null 2>&1 && python3 scripts/gpu/ncu_step_summary.py $OUT/ncu-step0-*.txt | tee $OUT/ncu-step0-summary.txt | head -70
}
# tg64 of the 8B shape (or of the model file M) in interleaved rounds, a run being K/V and optional VAR=VALUE
# settings, with ppPP at each depth too when PP is set (default 0: tg alone):
# tg_env_rounds FILE ROUNDS DEPTHS REPS MIN_LEFT "K/V:[VAR=VALUE[,VAR=VALUE]] ..." (llama-bench -r REPS per run, each labelled
# "rR == K/V[ VAR=VALUE]" for scripts/gpu/tg_rounds.py; stops when fewer than MIN_LEFT seconds are left)
tg_env_rounds() {
  local file=$1 rounds=$2 depths=$3 reps=$4 min_left=$5 runs=$6 r run kv e
  for r in $(seq 1 $rounds); do
    for run in $runs; do kv=${run%%:*} e=${run#*:}
      [ $(left) -lt $min_left ] && { echo "stopping rounds: $(left) s left"; break 2; }
      echo "r$r == $kv${e:+ ${e//,/ }}"
      env ${e//,/ } $B/llama-bench -m ${M:-/tmp/m8b.gguf} -ngl 99 -fa 1 -ctk ${kv%/*} -ctv ${kv#*/} -p ${PP:-0} -n 64 -d $depths -r $reps -o md 2>>$OUT/bench.err | grep -E '^\| ' | grep -v -E '^\| (model|---)'
    done
  done | tee $OUT/$file
  python3 scripts/gpu/tg_rounds.py $OUT/$file 2>&1 | tail -10
}
# a call that may find the machine cold: the 8B shape written while the build (if needed) runs, then the card named
cold_start() {
  bash scripts/gpu/roofline.sh model /tmp/m8b.gguf > $OUT/model.log 2>&1 &
  ensure_build
  wait; tail -1 $OUT/model.log
  nvidia-smi --query-gpu=name,memory.total --format=csv > $OUT/gpu.txt 2>&1; cat $OUT/gpu.txt
}
# serving's largest batch of the 8B shape for K/V at NPP + 128 cells per sequence (llama-batched-bench with -pps: one
# prompt decoded and copied to every sequence's stream, the same decode steps): the sequences that the card's free
# memory holds at BPC bytes per cell (all layers, K and V; llama.cpp pads each sequence's stream to a multiple of 256
# cells) after the model file and a 3 GiB margin, at most 1024 (patch 0011); on a failed start 6 % fewer, three tries
# at most: largest_batch K/V BPC NPP
largest_batch() {
  local kv=$1 bpc=$2 npp=$3 free n t
  free=$(nvidia-smi --query-gpu=memory.free --format=csv,noheader,nounits | head -1)
  n=$(( (free*1048576 - $(stat -c %s /tmp/m8b.gguf) - 3*1073741824) / ((npp + 128 + 255)/256*256*bpc) ))
  [ $n -gt 1024 ] && n=1024
  echo "$kv: $free MiB free, $bpc B per cell: $n sequences of $npp + 128"
  for t in 1 2 3; do
    [ $(left) -lt 90 ] && { echo "stopping before $kv x $n: $(left) s left"; return 0; }
    PPS=1 RUNS=$kv:$n:$npp timeout $(( $(left) - 5 )) bash scripts/gpu/roofline.sh batched /tmp/m8b.gguf | grep -v '^columns' > /tmp/lb.txt
    cat /tmp/lb.txt
    grep -q FAILED /tmp/lb.txt || return 0
    n=$(( n*94/100 ))
  done
}
# test-backend-ops on the FLASH_ATTN_EXT cases PATTERN matches with GGML_CUDA_TURBO_FA_DEC=DEC (- : the default, no
# variable), into $OUT/NAME.txt, its OK / FAIL / not supported counts into $OUT/NAME-summary.txt, the first FAIL lines
# and the verdict printed: tbo_dec NAME DEC TIMEOUT PATTERN
tbo_dec() {
  local name=$1 dec=$2 limit=$3 pat=$4 envs=()
  [ "$dec" != - ] && envs=(GGML_CUDA_TURBO_FA_DEC=$dec)
  env "${envs[@]}" timeout $limit $B/test-backend-ops -b CUDA0 -o FLASH_ATTN_EXT -p "$pat" > $OUT/$name.txt 2>&1; echo "$name (DEC=$dec) rc $?"
  bash scripts/gpu/tbo_summary.sh $OUT/$name.txt | grep FLASH | tee $OUT/$name-summary.txt
  grep -E "FAIL" $OUT/$name.txt | head -10; tail -2 $OUT/$name.txt
}
# this run's copy bandwidth into $OUT/copy-bandwidth.txt (scripts/gpu/copy_bandwidth.cu, built by roofline.sh build)
copy_bw() { { [ -x $B/copy-bandwidth ] && $B/copy-bandwidth; } > $OUT/copy-bandwidth.txt 2>&1; tail -1 $OUT/copy-bandwidth.txt; }
# the decode path's KLD in llama-perplexity (-ub 1: every token a one-query FA call; 2 chunks of 512 of /tmp/gen.txt,
# which gen_text writes): the logits with GGML_CUDA_TURBO_FA_DEC=BASE_DEC as the base, then the KLD of a second base run
# (the floor) and of DEC, one summary line each: kld_ab NAME MODEL K/V BASE_DEC DEC
gen_text() { python3 -c "import random; random.seed(30); print(' '.join('t%d' % random.randrange(1000) for _ in range(3000)))" > /tmp/gen.txt; }
kld_ab() {
  local name=$1 m=$2 kv=$3 d0=$4 d1=$5 e
  [ $(left) -lt 60 ] && { echo "stopping before kld $name: $(left) s left"; return 0; }
  local P="$B/llama-perplexity -m $m -f /tmp/gen.txt -ngl 99 -fa on -ctk ${kv%/*} -ctv ${kv#*/} -c 512 --chunks 2 -b 512 -ub 1"
  GGML_CUDA_TURBO_FA_DEC=$d0 timeout 120 $P --kl-divergence-base /tmp/base-$name.kld > $OUT/ppl-base-$name.txt 2>&1 || echo "ppl base $name rc $?"
  for e in $d0 $d1; do
    GGML_CUDA_TURBO_FA_DEC=$e timeout 120 $P --kl-divergence-base /tmp/base-$name.kld --kl-divergence > $OUT/kld-$name-dec$e.txt 2>&1 || echo "kld $name DEC=$e rc $?"
    echo "$name DEC=$e: $(grep -E 'Mean +KLD|Maximum KLD|Same top p' $OUT/kld-$name-dec$e.txt | tr -s ' ' | tr '\n' ';')"
  done
  rm -f /tmp/base-$name.kld
}
