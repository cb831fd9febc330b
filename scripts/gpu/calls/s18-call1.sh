# session 18 call 1 (cold): build with the system g++; the 8B shape (background); FA prefill alone (512 queries,
# hd 128 / 8 KV heads / GQA 4, KV 8192 and 65536) per K/V pair with the new turbo -> f16 conversion and, for
# the turbo pairs, with GGML_CUDA_TURBO_CVT=0 (upstream's generic kernel); test-backend-ops FLASH_ATTN_EXT,
# SET_ROWS, GET_ROWS for the default decode variant (9)
. scripts/gpu/calls/common.sh; call_start 1
build
bash scripts/gpu/roofline.sh model /tmp/m8b.gguf > $OUT/model.log 2>&1 &
$B/copy-bandwidth | tee $OUT/copy-bandwidth.txt
F='hsk=128,hsv=128,nh=8,nr23=\[4,1\],kv=(8192|65536),nb=512,'
timeout 120 $B/test-backend-ops perf -b CUDA0 -o FLASH_ATTN_EXT -p "$F" > $OUT/fa-prefill-cvt-new.txt 2>&1 || echo "perf new rc $?"
GGML_CUDA_TURBO_CVT=0 timeout 90 $B/test-backend-ops perf -b CUDA0 -o FLASH_ATTN_EXT -p "${F}.*turbo" > $OUT/fa-prefill-cvt-generic.txt 2>&1 || echo "perf generic rc $?"
for f in new generic; do echo "== conversion: $f"; grep -E "us/run" $OUT/fa-prefill-cvt-$f.txt | sed -E 's/\x1b\[[0-9;]*m//g; s/.*kv=([0-9]+),nb=([0-9]+).*type_K=([a-z0-9_]+),type_V=([a-z0-9_]+).* ([0-9.]+) us\/run.*/kv \1 nb \2 \3\/\4 \5 us/'; done | tee $OUT/fa-prefill-summary.txt
wait; tail -1 $OUT/model.log
echo "left $(left) s"
DECS="9" timeout $(( $(left) - 5 )) bash scripts/gpu/roofline.sh check 2>&1 | grep -E 'DEC=|FAIL|SET_ROWS|GET_ROWS' | head -20
echo "done at $(( $(date +%s) - T0 )) s"
