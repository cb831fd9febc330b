# session 17 call 1 (cold): build with the system g++, the 8B shape, the FA kernel table for the vector kernel and
# variants 8 (default), 9 (8 + int8 V), 10 (9 at 3 blocks/SM), 11 (6 + int8 V), test-backend-ops FLASH_ATTN_EXT for 9
R=$OUT; export OUT=/tmp/o1; mkdir -p $OUT; trap 'tar -C $OUT -czf $R/d1.tgz . 2>/dev/null' EXIT
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
T0=$(date +%s); left() { echo $(( 575 - ($(date +%s) - T0) )); }
env CC=/usr/bin/gcc CXX=/usr/bin/g++ CUDAHOSTCXX=/usr/bin/g++ bash scripts/gpu/roofline.sh build 2>&1 | tail -3
bash scripts/gpu/roofline.sh model /tmp/m8b.gguf 2>&1 | tail -1 &
DECS="0 8 9 10 11" timeout 180 bash scripts/gpu/roofline.sh kernel 2>&1 | grep -E 'copy|\| 128 .*(turbo4 / turbo4|f16 / f16|turbo3 / turbo3|turbo2 / turbo2|q8_0 / q8_0)'
wait
echo "left $(left) s"
DECS="9" timeout $(( $(left) - 5 )) bash scripts/gpu/roofline.sh check 2>&1 | grep -E 'DEC=|FAIL|SET_ROWS|GET_ROWS' | head -20
echo "done at $(( $(date +%s) - T0 )) s"
