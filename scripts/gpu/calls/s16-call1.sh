# session 16 call 1 (cold): build linked against the system's shared libstdc++, what each library needs/exports, the FA kernel table (run with DECS="0 8 9 10": variants 9, 10 measured then removed)
R=$OUT; export OUT=/tmp/o1; mkdir -p $OUT; trap 'tar -C $OUT -czf $R/d1.tgz . 2>/dev/null' EXIT
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
B=/tmp/tqr/build/bin
SYS="CC=/usr/bin/gcc CXX=/usr/bin/g++ CUDAHOSTCXX=/usr/bin/g++"; /usr/bin/g++ --version | head -1; /usr/bin/g++ -print-file-name=libstdc++.so
env $SYS EXTRA_TARGETS=ggml-rpc-server bash scripts/gpu/roofline.sh build 2>&1 | tail -4; [ -x $B/llama-bench ] || { echo "system g++ build failed: /opt/gcc"; EXTRA_TARGETS=ggml-rpc-server bash scripts/gpu/roofline.sh build 2>&1 | tail -3; }
grep -E "CXX compiler|host compiler" $OUT/configure.log
for so in $B/lib*.so; do echo "$(basename $so): NEEDED $(readelf -d $so | grep -o 'libstdc++[^]]*' | head -1), std:: defs $(nm -D --defined-only -C $so | grep ' [TDBR] ' | grep -c 'std::'), codecvt $(nm -D --defined-only -C $so | grep -c codecvt)"; done | tee $OUT/libstdcxx.txt
ldd $B/libggml-cuda.so | grep -E 'stdc|gcc_s' | tee -a $OUT/libstdcxx.txt
bash scripts/gpu/roofline.sh model /tmp/m8b.gguf 2>&1 | tail -1
SHAPE=llama-3.2-1b bash scripts/gpu/roofline.sh model /tmp/l1b.gguf 2>&1 | tail -1
DECS="0 8" timeout 200 bash scripts/gpu/roofline.sh kernel 2>&1 | grep -E 'copy|turbo4 / turbo4|f16 / f16|turbo3 / turbo3'
