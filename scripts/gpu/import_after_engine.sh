#!/usr/bin/env bash
# On the GPU machine, after `tqgguf build --backend cuda`: does an extension module still load
# and work once the CUDA engine is in the process? Each check is a fresh python3 process that
# imports llama_cpp, initializes the backends (CUDA included) and, with MODEL given, loads it
# with every layer on the GPU and decodes a token; then imports and uses the module (the
# crash of issue 26 item 5: matplotlib's ft2font, pybind11, "returned NULL without setting
# an exception" while writing bench.png). Prints OK/FAIL per module, and how many libstdc++
# symbols each engine library exports (0 codecvt ones after the fix: -Wl,--exclude-libs,ALL,
# tqgguf/builder/driver.py; docs/CUDA.md "load order").
#   scripts/gpu/import_after_engine.sh [MODEL.gguf]
set -u
MODEL=${1:-}
LIB=$(python3 -c "import llama_cpp, os; print(os.path.join(os.path.dirname(llama_cpp.__file__), 'lib'))") || {
    echo "FAIL: llama_cpp cannot be imported"; exit 1; }
for so in "$LIB"/*.so*; do
    [ -f "$so" ] || continue
    echo "exports $(basename "$so"): codecvt $(nm -D --defined-only -C "$so" 2>/dev/null | grep -c codecvt)," \
         "std:: defined (T/D/B/R) $(nm -D --defined-only -C "$so" 2>/dev/null | grep ' [TDBR] ' | grep -c 'std::')"
done
ENGINE='
import ctypes, sys, llama_cpp
llama_cpp.llama_backend_init()
m = sys.argv[1] if len(sys.argv) > 1 else ""
if m:
    p = llama_cpp.llama_model_default_params(); p.n_gpu_layers = 999
    model = llama_cpp.llama_model_load_from_file(m.encode(), p); assert model, "model load failed"
    cp = llama_cpp.llama_context_default_params(); cp.n_ctx = 256
    ctx = llama_cpp.llama_init_from_model(model, cp)
    tok = (ctypes.c_int32 * 1)(1)
    assert llama_cpp.llama_decode(ctx, llama_cpp.llama_batch_get_one(tok, 1)) == 0, "decode failed"
'
declare -A USE=(
    [matplotlib.ft2font]='import matplotlib, matplotlib.ft2font as f; f.FT2Font(matplotlib.get_data_path() + "/fonts/ttf/DejaVuSans.ttf").set_text("tqgguf")
import matplotlib.pyplot as plt; plt.figure(); plt.plot([1, 2]); plt.savefig("/tmp/import_after_engine.png")'
    [scipy]='import scipy, scipy.linalg, numpy; scipy.linalg.svd(numpy.ones((4, 4)))'
    [torch]='import torch; torch.ones(4).sum().item(); torch.cuda.is_available() and torch.ones(4, device="cuda").sum().item()'
    [numpy]='import numpy; numpy.linalg.svd(numpy.ones((4, 4)))'
)
fails=0
for mod in matplotlib.ft2font scipy torch numpy; do
    if ! python3 -c "import ${mod%%.*}" 2>/dev/null; then echo "SKIP $mod (not installed)"; continue; fi
    out=$(python3 -c "$ENGINE
${USE[$mod]}
print('used')" $MODEL 2>&1)
    if [ $? -eq 0 ] && [[ $out == *used* ]]; then echo "OK   llama_cpp then $mod"
    else echo "FAIL llama_cpp then $mod: $(echo "$out" | grep -v '^llama\|^load\|^print_info\|^ggml' | tail -3 | tr '\n' ' ')"; fails=$((fails + 1)); fi
done
exit $fails
