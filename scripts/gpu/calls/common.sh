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
