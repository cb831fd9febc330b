#!/usr/bin/env bash
# Here, before the GPU serve run (issue 13's throughput check, issue 12's bench check): the kit
# that `scripts/gpu/cuda.sh serve` needs on a machine with no internet and no tqgguf deps,
# into .device/serve/ (git-ignored; about 4 MB; name it in the device call's carry list):
#   wheels/     the server's Python deps the device image lacks (fastapi, starlette, uvicorn,
#               pydantic + pydantic_core, annotated_types, typing_inspection, annotated_doc,
#               opentelemetry-api (fastapi imports it), httptools (uvicorn's C HTTP parser, which
#               the front uses when it is there; the image has uvloop but not httptools),
#               typing_extensions, gguf, diskcache), at the versions this environment runs,
#               for CPython PYVER (default 3.12, the device's python3) on manylinux x86_64;
#               the image has the rest (aiohttp, httpx, click, rich, numpy, jinja2, ...: KINDS.md)
#   llama_cpp/  the pure-Python part of the installed engine package (no lib/: the device step
#               links the stage build's CUDA libraries in)
#   old/tqgguf/ the last tqgguf before the in-process server was removed (the parent of the
#               commit that deleted tqgguf/server/pool.py), for the "≥ 5x the old server" figure
#
#   scripts/gpu/serve_pack.sh [PYVER]   PYVER 3.12 (default), or e.g. KIT=.device/serve311 ... 3.11 for a
#                                          rehearsal here; PY=python with fastapi etc. and the engine
# Needs: pip able to download (or find in its cache) the wheels; the engine installed here.
set -euo pipefail
cd "$(dirname "$0")/../.."
PYVER=${1:-3.12}
PY=${PY:-python3}
K=${KIT:-.device/serve}
rm -rf "$K" && mkdir -p "$K/wheels" "$K/old"

# versions: the ones this environment runs (what the tests here passed with)
mapfile -t REQS < <("$PY" - <<'PY'
from importlib.metadata import version
for n in ("fastapi", "starlette", "uvicorn", "pydantic", "pydantic_core", "annotated_types",
          "typing_inspection", "annotated_doc", "typing_extensions", "opentelemetry-api", "gguf", "diskcache",
          "httptools"):
    print(f"{n}=={version(n)}")
PY
)
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version "$PYVER" --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d "$K/wheels" "${REQS[@]}"

# the engine's Python package, without its compiled libraries
SRC=${LLAMA_CPP_SRC:-$("$PY" -c 'import importlib.util as u, os; print(os.path.dirname(u.find_spec("llama_cpp").origin))')}
mkdir -p "$K/llama_cpp"
( cd "$SRC" && tar --exclude=lib --exclude=__pycache__ --exclude=server -cf - . ) | tar -xf - -C "$K/llama_cpp"
[ -f "$K/llama_cpp/llama_cpp.py" ] || { echo "error: no llama_cpp package copied from $SRC" >&2; exit 1; }

# the old in-process server: tqgguf/ as it was just before pool.py was deleted
GONE=$(git rev-list -1 HEAD -- tqgguf/server/pool.py)
git archive "$GONE^" tqgguf | tar -x -C "$K/old"
git log -1 --format='%H %s' "$GONE^" > "$K/old/COMMIT"

echo "kit for CPython $PYVER in $K: $(du -sh "$K" | cut -f1)"
ls "$K/wheels"
echo "old server: $(cut -c1-80 "$K/old/COMMIT")"
