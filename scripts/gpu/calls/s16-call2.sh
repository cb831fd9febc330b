# session 16 call 2: ncu of the FA decode (variants 8, 9, 10, f16), test-backend-ops for 9 and 10, load order (torch, numpy), RPC
R=$OUT; export OUT=/tmp/o2; mkdir -p $OUT; trap 'tar -C $OUT -czf $R/d2.tgz . 2>/dev/null' EXIT
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
ROOT=$PWD B=/tmp/tqr/build/bin
[ -x $B/llama-bench ] || { CC=/usr/bin/gcc CXX=/usr/bin/g++ CUDAHOSTCXX=/usr/bin/g++ EXTRA_TARGETS=ggml-rpc-server bash scripts/gpu/roofline.sh build 2>&1 | tail -2; bash scripts/gpu/roofline.sh model /tmp/m8b.gguf | tail -1; SHAPE=llama-3.2-1b bash scripts/gpu/roofline.sh model /tmp/l1b.gguf | tail -1; }
S="--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats"
# ran with turbo4:9 too (variant 9, removed after this run)
for kv in turbo4:8; do t=${kv%:*} d=${kv#*:}
  F="hsk=128,hsv=128,nh=8,nr23=\[4,1\],kv=32768,nb=1,.*type_K=$t,type_V=$t,"
  GGML_CUDA_TURBO_FA_DEC=$d timeout 100 ncu --clock-control none -k regex:flash_attn_ext --launch-skip 3 --launch-count 1 $S --print-details all $B/test-backend-ops perf -b CUDA0 -o FLASH_ATTN_EXT -p "$F" > $OUT/ncu-$t-dec$d.txt 2>&1 || echo "ncu sections $kv rc $?"
  GGML_CUDA_TURBO_FA_DEC=$d timeout 100 ncu --clock-control none -k regex:flash_attn_ext --launch-skip 3 --launch-count 1 --metrics 'regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum,l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,smsp__inst_executed.sum' $B/test-backend-ops perf -b CUDA0 -o FLASH_ATTN_EXT -p "$F" > $OUT/ncu-stalls-$t-dec$d.txt 2>&1 || echo "ncu metrics $kv rc $?"
  echo "== $kv"; grep -E '^ +(Duration|DRAM Throughput|Registers Per|Achieved Active Warps|Issued Warp Per|Eligible Warps|No Eligible)' $OUT/ncu-$t-dec$d.txt | sed -E 's/ +/ /g'
  grep -E 'stalled_(long_scoreboard|lg_throttle|mio_throttle|wait|short_scoreboard|math_pipe|not_selected|barrier|no_instruction|dispatch)|inst_executed|l1tex' $OUT/ncu-stalls-$t-dec$d.txt | sed -E 's/ +/ /g; s/smsp__average_warps_issue_stalled_//; s/_per_issue_active.ratio//'
done
# load order on the shared-libstdc++ build: tqgguf, llama_cpp, global; then torch / numpy orders
ENGINES="tqgguf llama_cpp global" timeout 200 bash scripts/gpu/load_order.sh $B /tmp/l1b.gguf .device/m/ggml-vocab-gpt-2.gguf 2>&1 | grep -E 'OK|FAIL|rc|exports' | head -40
