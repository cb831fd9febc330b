#!/usr/bin/env bash
# GPU machine: issue 13's throughput check (llama-server directly vs `tqgguf serve` vs the old
# in-process server, same run) and issue 12's `tqgguf bench` vs llama-bench, on a machine with
# no internet, no tqgguf deps and no Python engine build. Called by `scripts/gpu/cuda.sh
# serve` after its `stage` and `parts` steps; here it can be rehearsed against a CPU build.
#
#   scripts/gpu/serve.sh BIN MODEL
#
# BIN: a shared-library llama.cpp build of the patched tree (libllama.so, libggml*.so,
# llama-server, llama-bench), e.g. /tmp/tqc/build/bin. MODEL: a GGUF path.
# KIT=.device/serve (scripts/gpu/serve_pack.sh made it here), PY=python3, W=/tmp/tqc-serve
# (scratch), OUT=./out. Load settings as scripts/tools/serve_throughput.sh reads them (NP, CLIENTS,
# TOKENS, REQUESTS, NGL, CTK, CTV, CTX, THREADS, READY_TIMEOUT); defaults = issue 13's GPU run.
# OLD=0 skips the old server; BENCH=0 skips the bench comparison, BENCH_ARGS replaces its options.
#
# Python: the device's python3 is itself a virtual environment (/opt/torch/.venv), and a venv made
# from it would see the base interpreter's packages, not that venv's (numpy, httpx, click, rich):
# so the wheels go into a --target folder on PYTHONPATH instead, beside the tree's tqgguf (run as
# `python3 -m tqgguf`, nothing to build). The engine: the carried llama_cpp package gets a lib/ of
# symbolic links to BIN's libraries, the layout `tqgguf build` installs, so llama_cpp and tqgguf's
# own checks (tqgguf.cachetypes.libggml_base, tqgguf.engine.backend_names) load the stage build.
# Writes $OUT/serve-summary.txt, $OUT/serve-logs.tar.gz and $OUT/bench.txt (3 files).
set -euo pipefail
[[ $# -eq 2 ]] || { sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
BIN=$(cd "$1" && pwd) MODEL=$2
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
KIT=$(cd "${KIT:-$ROOT/.device/serve}" && pwd)
PY=${PY:-python3} W=${W:-/tmp/tqc-serve} OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
for f in "$BIN/llama-server" "$BIN/llama-bench" "$BIN/libllama.so" "$BIN/libggml-base.so" "$MODEL" \
         "$KIT/llama_cpp/llama_cpp.py" "$KIT/old/tqgguf/server/pool.py"; do
    [[ -e $f ]] || { echo "error: $f is missing (stage/parts not run, or the kit not carried: scripts/gpu/serve_pack.sh)" >&2; exit 1; }
done
ls "$KIT"/wheels/*.whl > /dev/null

source "$ROOT/scripts/gpu/stage_site.sh"
export TQGGUF_LLAMA_SERVER=$BIN/llama-server
export NGL=${NGL:-99}

{
    echo "== $(date -u +%FT%TZ) tqgguf serve throughput; BIN $BIN; model $MODEL"
    "$PY" -c 'import fastapi, uvicorn, pydantic, gguf, diskcache, aiohttp, httpx, click, rich, numpy, llama_cpp, httptools, uvloop; print("imports ok; llama_cpp", llama_cpp.__file__, "httptools", httptools.__version__, "uvloop", uvloop.__version__)'
    info=$("$PY" -m tqgguf info 2>&1) || { echo "$info"; echo "error: tqgguf info failed"; exit 1; }
    sed -n '1,5p' <<< "$info"
    if [[ $backend == cuda ]] && ! grep -q '^backends.*CUDA' <<< "$info"; then
        echo "error: the engine does not register the CUDA backend"; exit 1
    fi
    old=()
    if [[ ${OLD:-1} != 0 ]]; then
        # -P: no current directory first on sys.path, so the tree's tqgguf/ does not shadow the old one
        old=(OLD_TQGGUF="env PYTHONPATH=$KIT/old:$SITE $PY -P -m tqgguf")
        echo "old server: $(cut -c1-100 "$KIT/old/COMMIT")"
        env PYTHONPATH="$KIT/old:$SITE" "$PY" -P -c 'import tqgguf.server.pool, tqgguf.cli; print("old tqgguf imports ok:", tqgguf.__file__)'
    fi
    rc=0
    env "${old[@]}" TQGGUF="$PY -m tqgguf" PY="$PY" OUT="$W/logs" READY_TIMEOUT="${READY_TIMEOUT:-180}" \
        bash "$ROOT/scripts/tools/serve_throughput.sh" "$BIN/llama-server" "$MODEL" 2>&1 || rc=$?
    echo "serve_throughput.sh exit $rc"
} 2>&1 | tee "$OUT/serve-summary.txt"
tar -C "$W" -czf "$OUT/serve-logs.tar.gz" logs

if [[ ${BENCH:-1} != 0 ]]; then
    # issue 12: `tqgguf bench` (the Python engine, in-process) vs llama-bench, same binary tree, same run
    # shellcheck disable=SC2086
    "$PY" "$ROOT/scripts/tools/bench_vs_llama_bench.py" --llama-bench "$BIN/llama-bench" --model "$MODEL" \
        ${BENCH_ARGS:---kv q8_0/q8_0,turbo4/turbo4 -p 512 -n 128 -d 0,8192 -r 10 -ngl $NGL} \
        --out "$W/bench" 2>&1 | tee "$OUT/bench.txt" || true
fi
