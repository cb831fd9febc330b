# call 2 (cold machine): build, then the load-order probes and the copy bandwidth through the engine
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
ROOT=$PWD; [ -x /tmp/tqr/build/bin/llama-bench ] || bash scripts/gpu/roofline.sh build 2>&1 | tail -3
[ -e /tmp/l1b.gguf ] || SHAPE=llama-3.2-1b bash scripts/gpu/roofline.sh model /tmp/l1b.gguf 2>&1 | tail -1
BIN=/tmp/tqr/build/bin KIT=$ROOT/.device/serve PY=python3 W=/tmp/tq-lo
source scripts/gpu/stage_site.sh > /dev/null 2>&1; mkdir -p $W/cache/build/tools-cuda/bin && ln -sf $BIN/* $W/cache/build/tools-cuda/bin/; export TQGGUF_CACHE=$W/cache
V=$ROOT/.device/m/ggml-vocab-gpt-2.gguf; L=$OUT/probes.txt
t() { echo "== $1" >> $L; timeout 90 python3 -X faulthandler -c "$2" > /tmp/o.txt 2>&1; rc=$?; echo "rc $rc" >> $L; grep -v "^llama_\|^ggml_\|^load\|resolve_fused\|^print_info\|^init\|^graph\|^sched\|^\.\|^ *Device\|^llm_\|^create_\|^set_\|^reserve\|^done\|^model\|^common\|^srv\|^sampler" /tmp/o.txt | tail -25 >> $L; echo "$1 rc $rc"; }
DEC="import ctypes; p=llama_cpp.llama_model_default_params(); p.n_gpu_layers=999; m=llama_cpp.llama_model_load_from_file(b'/tmp/l1b.gguf', p); assert m; cp=llama_cpp.llama_context_default_params(); cp.n_ctx=256; c=llama_cpp.llama_init_from_model(m, cp); tok=(ctypes.c_int32*1)(1); assert llama_cpp.llama_decode(c, llama_cpp.llama_batch_get_one(tok,1))==0; print('decoded')"
TOK="import ctypes; p=llama_cpp.llama_model_default_params(); p.vocab_only=True; m=llama_cpp.llama_model_load_from_file(b'$V', p); print('vocab', bool(m))"
timeout 120 python3 -m tqgguf bench /tmp/l1b.gguf -ngl 99 -ctk f16,turbo4 -ctv f16,turbo4 -p 0 -n 32 -d 0,4096 -r 3 --dir /tmp/tq-bw --no-plot 2>&1 | grep -E "^\|" >> $L; cat /tmp/tq-bw/bandwidth.json >> $L
t torch-alone "import torch; print(torch.ones(4,device='cuda').sum().item())"
t llama_cpp-import-torch "import llama_cpp; llama_cpp.llama_backend_init(); import torch; print('imported')"
t llama_cpp-torch-cuda "import llama_cpp; llama_cpp.llama_backend_init(); import torch; print(torch.ones(4,device='cuda').sum().item())"
t decode-torch "import llama_cpp; llama_cpp.llama_backend_init(); $DEC; import torch; print(torch.ones(4,device='cuda').sum().item())"
t torch-first-decode "import torch; print(torch.ones(4,device='cuda').sum().item()); import llama_cpp; llama_cpp.llama_backend_init(); $DEC"
t numpy-init "import numpy, llama_cpp; llama_cpp.llama_backend_init(); print('ok')"
t numpy-tok "import numpy, llama_cpp; llama_cpp.llama_backend_init(); $TOK"
t nonumpy-tok "import llama_cpp; llama_cpp.llama_backend_init(); $TOK"
t numpy-decode "import numpy, llama_cpp; llama_cpp.llama_backend_init(); $DEC"
t nonumpy-decode "import llama_cpp; llama_cpp.llama_backend_init(); $DEC"
t tqgguf-numpy-decode "import tqgguf, numpy, llama_cpp; llama_cpp.llama_backend_init(); $TOK; $DEC"
t bandwidth "import tqgguf.engine as e
for n in (1<<28, 1<<30, 1<<32):
    b, d = e.copy_bandwidth(device='CUDA0', nbytes=n); print(n>>20, 'MiB', round(b/1e9,1), 'GB/s', d)
b, d = e.copy_bandwidth(device=None, n_threads=16, nbytes=1<<28); print('cpu 16 threads', round(b/1e9,1), 'GB/s', d)"
$BIN/copy-bandwidth >> $L 2>&1
ldd $BIN/libggml-cuda.so | grep -i "stdc\|cublas\|cudart" >> $L
