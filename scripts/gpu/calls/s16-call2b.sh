# session 16 call 2, second part: torch / numpy probes and RPC through the worker, on the shared-libstdc++ build
R=$OUT; export OUT=/tmp/o2b; mkdir -p $OUT; trap 'tar -C $OUT -czf $R/d2b.tgz . 2>/dev/null' EXIT
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
ROOT=$PWD BIN=/tmp/tqr/build/bin KIT=$ROOT/.device/serve PY=python3 W=/tmp/tq-lo2
source scripts/gpu/stage_site.sh > /dev/null 2>&1; mkdir -p $W/cache/build/tools-cuda/bin && ln -sf $BIN/* $W/cache/build/tools-cuda/bin/; export TQGGUF_CACHE=$W/cache
V=$ROOT/.device/m/ggml-vocab-gpt-2.gguf; L=$OUT/probes.txt
t() { echo "== $1" >> $L; timeout 90 python3 -X faulthandler -c "$2" > /tmp/o.txt 2>&1; rc=$?; echo "rc $rc" >> $L; grep -vE "^(llama_|ggml_|load|print_info|init|graph|sched|\.|llm_|create_|set_|reserve|done|model|common)" /tmp/o.txt | tail -12 >> $L; echo "$1 rc $rc"; }
DEC="import ctypes; p=llama_cpp.llama_model_default_params(); p.n_gpu_layers=999; m=llama_cpp.llama_model_load_from_file(b'/tmp/l1b.gguf', p); assert m; cp=llama_cpp.llama_context_default_params(); cp.n_ctx=256; c=llama_cpp.llama_init_from_model(m, cp); tok=(ctypes.c_int32*1)(1); assert llama_cpp.llama_decode(c, llama_cpp.llama_batch_get_one(tok,1))==0; print('decoded')"
TOK="p=llama_cpp.llama_model_default_params(); p.vocab_only=True; m=llama_cpp.llama_model_load_from_file(b'$V', p); print('vocab', bool(m))"
t llama_cpp-import-torch "import llama_cpp; llama_cpp.llama_backend_init(); import torch; print(torch.ones(4,device='cuda').sum().item())"
t decode-torch "import llama_cpp; llama_cpp.llama_backend_init(); $DEC; import torch; print(torch.ones(4,device='cuda').sum().item())"
t torch-first-decode "import torch; print(torch.ones(4,device='cuda').sum().item()); import llama_cpp; llama_cpp.llama_backend_init(); $DEC"
t tqgguf-decode-torch "import tqgguf, llama_cpp; llama_cpp.llama_backend_init(); $DEC; import torch; print(torch.ones(4,device='cuda').sum().item())"
t numpy-tok "import numpy, llama_cpp; llama_cpp.llama_backend_init(); $TOK"
t numpy-decode "import numpy, llama_cpp; llama_cpp.llama_backend_init(); $DEC"
t numpy-tok-decode "import numpy, llama_cpp; llama_cpp.llama_backend_init(); $TOK; $DEC"
(CUDA_VISIBLE_DEVICES=0 python3 -m tqgguf rpc-server -p 50052 -d CUDA0 > $W/worker.log 2>&1 &)
for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/50052) 2>/dev/null && break; sleep 0.2; done
A=(-m /tmp/l1b.gguf -ngl 99 -fa 1 -ctk turbo4 -ctv turbo4 -p 128 -n 32 -r 2 -o md)
{ echo "== llama-bench local"; $BIN/llama-bench "${A[@]}" 2>&1 | grep -E '^\| |error|Segm' | grep -v -- '---'
  echo "== llama-bench --rpc, client sees no GPU"; CUDA_VISIBLE_DEVICES= timeout 120 $BIN/llama-bench "${A[@]}" --rpc 127.0.0.1:50052 2>&1 | grep -E '^\| |error|Segm|Abort' | grep -v -- '---'; echo "rc ${PIPESTATUS[0]}"
  echo "== tqgguf bench --rpc"; CUDA_VISIBLE_DEVICES= timeout 150 python3 -m tqgguf bench /tmp/l1b.gguf --rpc 127.0.0.1:50052 -ngl all -ctk turbo4 -ctv turbo4 -p 64 -n 16 -r 2 --dir $W/b --no-plot 2>&1 | grep -E '^\||rror|placement' | head; echo "rc ${PIPESTATUS[0]}"
} 2>&1 | tee $OUT/rpc-shared.txt
pkill -f "rpc-server" || true
