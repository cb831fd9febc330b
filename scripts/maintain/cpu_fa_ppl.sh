#!/usr/bin/env bash
# PPL before/after per K/V pair: llama-perplexity, WikiText-2 test, n_ctx 512, 4 chunks, 2 threads.
#   cd DIR_WITH_before-bin_AND_after-bin && cpu_fa_ppl.sh MODEL.gguf f16/f16 turbo4/turbo4 turbo4/turbo4:full ...
# (a pair suffixed :full runs with LLAMA_K_CENTER=full, which needs one stream: PPL_ARGS="-b 512");
# PPL_ARGS goes to llama-perplexity; one line per pair and build.
M=$1; shift
for pair in "$@"; do
  kc=off; case $pair in *:full) kc=full; pair=${pair%:full};; esac
  k=${pair%/*}; v=${pair#*/}
  for b in before after; do
    ppl=$(LLAMA_K_CENTER=$kc $b-bin/llama-perplexity -m $M -f /work/shared/data/wiki.test.raw -c 512 --chunks 4 -fa 1 -ctk $k -ctv $v -t 2 ${PPL_ARGS:-} 2>&1 | grep -o "Final estimate: PPL = [0-9.]* +/- [0-9.]*")
    echo "$(basename $M) $pair k_center=$kc $b: $ppl"
  done
done
