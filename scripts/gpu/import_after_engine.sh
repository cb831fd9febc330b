#!/usr/bin/env bash
# On the GPU machine, after `tqgguf build --backend cuda` (or with a stage build linked into a
# site, scripts/gpu/load_order_site.sh): does an extension module still load and work once the
# CUDA engine is in the process, and does the engine still work when numpy came first?
# (issue 26 item 5: matplotlib's ft2font, pybind11, "returned NULL without setting an exception"
# while `tqgguf bench -ngl 99` wrote bench.png; earlier a SIGSEGV in the tokenizer's std::regex
# with numpy imported before the engine; docs/CUDA.md "load order").
#
#   scripts/gpu/import_after_engine.sh [MODEL.gguf [VOCAB.gguf]]
#
# Each check is a fresh python3 process. Engine modes (ENGINES, default all three):
#   llama_cpp  import llama_cpp (it loads libllama RTLD_LOCAL), init the backends
#   tqgguf     the product's path: import tqgguf, list the backends and the cache types
#              (tqgguf.engine / tqgguf.cachetypes load libggml and libggml-base themselves)
#   global     llama_cpp, then libggml-base dlopen'ed again with RTLD_GLOBAL (what tqgguf did up
#              to session 15: the suspected cause; expected to FAIL where the engine carries a
#              static libstdc++)
# then, given MODEL, load it with every layer on the GPU and decode a token; then import and use
# the module. "numpy first": numpy imported before anything else, then the tqgguf path, VOCAB (a
# BPE vocabulary: its pre-tokenizer runs std::regex) loaded vocab-only and a text tokenized, MODEL
# decoded on the GPU. Prints OK/FAIL per check and how many libstdc++ symbols each engine library
# exports; the exit status is the number of FAILs outside the "global" mode.
set -u
MODEL=${1:-} VOCAB=${2:-}
LIB=$(python3 -c "import llama_cpp, os; print(os.path.join(os.path.dirname(llama_cpp.__file__), 'lib'))") || {
    echo "FAIL: llama_cpp cannot be imported"; exit 1; }
for so in "$LIB"/*.so*; do
    [ -e "$so" ] || continue
    echo "exports $(basename "$so"): codecvt $(nm -D --defined-only -C "$so" 2>/dev/null | grep -c codecvt)," \
         "std:: defined (T/D/B/R) $(nm -D --defined-only -C "$so" 2>/dev/null | grep ' [TDBR] ' | grep -c 'std::')"
done
LOADS='
import ctypes, os, sys
def load_and_decode(m):
    import llama_cpp
    p = llama_cpp.llama_model_default_params(); p.n_gpu_layers = 999
    model = llama_cpp.llama_model_load_from_file(m.encode(), p); assert model, "model load failed"
    cp = llama_cpp.llama_context_default_params(); cp.n_ctx = 256
    ctx = llama_cpp.llama_init_from_model(model, cp)
    tok = (ctypes.c_int32 * 1)(1)
    assert llama_cpp.llama_decode(ctx, llama_cpp.llama_batch_get_one(tok, 1)) == 0, "decode failed"
def tokenize(v):
    import llama_cpp
    p = llama_cpp.llama_model_default_params(); p.vocab_only = True
    model = llama_cpp.llama_model_load_from_file(v.encode(), p); assert model, "vocab load failed"
    vocab = llama_cpp.llama_model_get_vocab(model)
    text = "Hello world, 12345 tokens of text: the pre-tokenizer\x27s regex runs here.".encode()
    out = (llama_cpp.llama_token * 128)()
    n = llama_cpp.llama_tokenize(vocab, text, len(text), out, 128, True, False)
    assert n > 5, f"tokenize gave {n}"
'
declare -A ENGINE=(
    [llama_cpp]='import llama_cpp; llama_cpp.llama_backend_init()'
    [tqgguf]='import tqgguf.engine as e, tqgguf.cachetypes as c; assert "CUDA" in e.backend_names(), e.backend_names(); c.libggml_base()'
    [global]='import llama_cpp, os; llama_cpp.llama_backend_init(); ctypes.CDLL(os.path.join(os.path.dirname(llama_cpp.__file__), "lib", "libggml-base.so"), mode=ctypes.RTLD_GLOBAL)'
)
declare -A USE=(
    [matplotlib.ft2font]='import matplotlib, matplotlib.ft2font as f; f.FT2Font(matplotlib.get_data_path() + "/fonts/ttf/DejaVuSans.ttf").set_text("tqgguf")
import matplotlib.pyplot as plt; plt.figure(); plt.plot([1, 2]); plt.savefig("/tmp/import_after_engine.png")'
    [scipy]='import scipy, scipy.linalg, numpy; scipy.linalg.svd(numpy.ones((4, 4)))'
    [torch]='import torch; torch.ones(4).sum().item(); torch.cuda.is_available() and torch.ones(4, device="cuda").sum().item()'
    [numpy]='import numpy; numpy.linalg.svd(numpy.ones((4, 4)))'
)
check() {  # check LABEL PYTHON-CODE: OK/FAIL line; returns 1 on FAIL
    local out
    out=$(python3 -c "$2
print('used')" 2>&1)
    if [ $? -eq 0 ] && [[ $out == *used* ]]; then echo "OK   $1"; return 0; fi
    echo "FAIL $1: $(echo "$out" | grep -v '^llama\|^load\|^print_info\|^ggml\|^init\|^graph\|^sched\|^\.' | tail -3 | tr '\n' ' ')"
    return 1
}
fails=0
for eng in ${ENGINES:-llama_cpp tqgguf global}; do
    for mod in matplotlib.ft2font scipy torch numpy; do
        if ! python3 -c "import ${mod%%.*}" 2>/dev/null; then echo "SKIP $mod (not installed)"; continue; fi
        code="$LOADS
${ENGINE[$eng]}
${MODEL:+load_and_decode(\"$MODEL\")}
${USE[$mod]}"
        check "[$eng] engine${MODEL:+ + GPU decode} then $mod" "$code" || { [ "$eng" = global ] || fails=$((fails + 1)); }
    done
done
code="import numpy; numpy.linalg.svd(numpy.ones((4, 4)))
$LOADS
${ENGINE[tqgguf]}
${VOCAB:+tokenize(\"$VOCAB\")}
${MODEL:+load_and_decode(\"$MODEL\")}"
check "numpy first, then the engine (tqgguf)${VOCAB:+, BPE tokenize}${MODEL:+, GPU decode}" "$code" || fails=$((fails + 1))
exit $fails
