#!/usr/bin/env python3
"""Leading tokens that match between CUDA and CPU greedy generations (scripts/gpu/cuda.sh gen).

    python scripts/gpu/compare_gen.py GEN_DIR MODEL.gguf

GEN_DIR holds ``<K>-<V>-ngl<99|0>-p<i>.txt`` (64 greedy tokens each). For every K/V pair it
prints, per prompt, how many leading tokens of the CUDA text equal the CPU text's (tokenized
with the model's own vocabulary through the installed engine), and the median. The f16/f16
row is the yardstick: two backends' arithmetic already differs there.
"""
from __future__ import annotations

import os
import re
import statistics
import sys
from collections import defaultdict
from pathlib import Path


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    gen_dir, model = Path(sys.argv[1]), sys.argv[2]
    import llama_cpp

    vocab = llama_cpp.Llama(model_path=model, vocab_only=True, verbose=False)
    files = defaultdict(dict)
    for f in sorted(gen_dir.glob("*-ngl*-p*.txt")):
        m = re.match(r"(.+)-ngl(\d+)-p(\d+)\.txt", f.name)
        if m:
            files[m.group(1)][(int(m.group(2)), int(m.group(3)))] = f.read_text(errors="replace")
    print("| K-V | leading tokens equal, CUDA vs CPU, prompts 0..7 | median |")
    print("|---|---|---|")
    for pair, texts in files.items():
        counts = []
        for i in range(8):
            if (99, i) in texts and (0, i) in texts:
                a = vocab.tokenize(texts[(99, i)].encode(), add_bos=False, special=False)
                b = vocab.tokenize(texts[(0, i)].encode(), add_bos=False, special=False)
                counts.append(min(len(os.path.commonprefix([a, b])), 64))  # lists: item by item
        if counts:
            print(f"| {pair} | {', '.join(map(str, counts))} | {statistics.median(counts):g} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
