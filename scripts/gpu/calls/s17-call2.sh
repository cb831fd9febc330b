# session 17 call 2 (warm): 8B shape tg64 at d0/16K/64K in three interleaved rounds (f16, turbo4 variant 8, turbo4
# variant X = the fastest of 9/10/11 in call 1's kernel table, or $1), q8_0 at 64K once; test-backend-ops for 11;
# Nsight Compute of X
R=$OUT; export OUT=/tmp/o2; mkdir -p $OUT; trap 'tar -C $OUT -czf $R/d2.tgz . 2>/dev/null' EXIT
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
T0=$(date +%s); left() { echo $(( 575 - ($(date +%s) - T0) )); }
B=/tmp/tqr/build/bin
[ -x $B/llama-bench ] || { echo "machine lost its build: building again"; env CC=/usr/bin/gcc CXX=/usr/bin/g++ CUDAHOSTCXX=/usr/bin/g++ bash scripts/gpu/roofline.sh build 2>&1 | tail -2; }
[ -e /tmp/m8b.gguf ] || bash scripts/gpu/roofline.sh model /tmp/m8b.gguf 2>&1 | tail -1
X=${1:-$(awk -F'|' '$2+0==128 && $6 ~ /turbo4 \/ turbo4/ && ($7+0==9 || $7+0==10 || $7+0==11) {print $8+0, $7+0}' /tmp/o1/fa-roofline.md 2>/dev/null | sort -n | head -1 | awk '{print $2}')}
X=${X:-9}; echo "variant X = $X"
for r in 1 2 3; do
  for run in f16/f16:- turbo4/turbo4:8 turbo4/turbo4:$X; do kv=${run%:*} dec=${run#*:}
    label=$kv; [ "$dec" != - ] && label="$kv DEC=$dec"
    echo "r$r == $label"
    GGML_CUDA_TURBO_FA_DEC=${dec/#-/8} $B/llama-bench -m /tmp/m8b.gguf -ngl 99 -fa 1 -ctk ${kv%/*} -ctv ${kv#*/} -p 0 -n 64 -d 0,16384,65536 -r 1 -o md 2>>$OUT/bench.err | grep -E '^\| ' | grep -v -E '^\| (model|---)'
  done
done | tee $OUT/bench-m8b-rounds.txt
echo "== q8_0/q8_0"; $B/llama-bench -m /tmp/m8b.gguf -ngl 99 -fa 1 -ctk q8_0 -ctv q8_0 -p 0 -n 64 -d 65536 -r 1 -o md 2>>$OUT/bench.err | grep -E 'tg64' | tee -a $OUT/bench-m8b-rounds.txt
echo "left $(left) s"
t=$(( $(left) - 100 )); [ $t -gt 30 ] && DECS="11" timeout $t bash scripts/gpu/roofline.sh check 2>&1 | grep -E 'DEC=|FAIL' | head -12
F="hsk=128,hsv=128,nh=8,nr23=\[4,1\],kv=32768,nb=1,.*type_K=turbo4,type_V=turbo4,"
S="--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats"
GGML_CUDA_TURBO_FA_DEC=$X timeout 80 ncu --clock-control none -k regex:flash_attn_ext --launch-skip 3 --launch-count 1 $S --print-details all $B/test-backend-ops perf -b CUDA0 -o FLASH_ATTN_EXT -p "$F" > $OUT/ncu-turbo4-dec$X.txt 2>&1 || echo "ncu sections rc $?"
GGML_CUDA_TURBO_FA_DEC=$X timeout 80 ncu --clock-control none -k regex:flash_attn_ext --launch-skip 3 --launch-count 1 --metrics 'regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,smsp__inst_executed.sum' $B/test-backend-ops perf -b CUDA0 -o FLASH_ATTN_EXT -p "$F" > $OUT/ncu-stalls-turbo4-dec$X.txt 2>&1 || echo "ncu metrics rc $?"
grep -E '^ +(Duration|DRAM Throughput|Registers Per|Achieved Active Warps|Issued Warp Per|No Eligible)|Pipe (Alu|Fma|Tensor) Cycles' $OUT/ncu-turbo4-dec$X.txt | sed -E 's/ +/ /g' | sort -u | head -12
grep -E 'stalled_(long_scoreboard|wait|math_pipe|not_selected)|inst_executed' $OUT/ncu-stalls-turbo4-dec$X.txt | sed -E 's/ +/ /g; s/smsp__average_warps_issue_stalled_//; s/_per_issue_active.ratio//'
echo "done at $(( $(date +%s) - T0 )) s"
