M=~/.cache/tqgguf/models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf
run() { local tag=$1 bin=$2 kv=$3 kc=$4; echo "$tag $kv kc=$kc $(LLAMA_K_CENTER=$kc LD_LIBRARY_PATH=$bin $bin/llama-bench -m $M -ctk $kv -ctv $kv -fa 1 -p 0 -n 64 -d 4096 -r 3 -t 2 2>&1 | grep -E 'tg64' | awk -F'|' '{print $(NF-1)}')"; }
for i in 1 2 3 4 5 6; do
  if [ $((i % 2)) = 1 ]; then run before /tmp/b27/bin-before turbo4 full; run after /tmp/b27/bin-after turbo4 full
  else run after /tmp/b27/bin-after turbo4 full; run before /tmp/b27/bin-before turbo4 full; fi
done
