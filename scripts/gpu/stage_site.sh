# Sourced by the GPU scripts (serve.sh, rpc.sh, load_order.sh): a Python site in which tqgguf runs
# on a stage build's libraries instead of an installed engine. Needs BIN (the stage build's bin/
# with lib*.so), KIT (scripts/gpu/serve_pack.sh: wheels/ and the llama_cpp package), PY, W (a
# work dir, emptied) and ROOT (this checkout). Sets SITE and exports PYTHONPATH (ROOT and SITE),
# PYTHONUNBUFFERED; the engine's build record says backend cuda when BIN has libggml-cuda.
rm -rf "$W" && mkdir -p "$W/logs"
SITE=$W/site
"$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$SITE" "$KIT"/wheels/*.whl || {
    # no pip there: a wheel is a zip of the files to put on the path
    echo "pip install failed; unpacking the wheels instead"
    "$PY" -c 'import sys, zipfile; [zipfile.ZipFile(w).extractall(sys.argv[1]) for w in sys.argv[2:]]' "$SITE" "$KIT"/wheels/*.whl
}
cp -r "$KIT/llama_cpp" "$SITE/llama_cpp"
mkdir -p "$SITE/llama_cpp/lib"
ln -s "$BIN"/lib*.so* "$SITE/llama_cpp/lib/"
backend=cpu; [[ -e $BIN/libggml-cuda.so ]] && backend=cuda
"$PY" - "$SITE/llama_cpp/_tqgguf_build.json" "$backend" "$BIN" <<'PY'
import json, sys, time
path, backend, lib = sys.argv[1:]
info = json.load(open(path))
# what this engine is now: the carried Python package over another build's libraries
info.update(backend=backend, lib_dir=lib, built_at=time.strftime("%Y-%m-%dT%H:%M:%S"),
            note="llama_cpp Python package carried by scripts/gpu/serve_pack.sh; libraries from lib_dir")
json.dump(info, open(path, "w"), indent=1)
PY
export PYTHONPATH=$ROOT:$SITE PYTHONUNBUFFERED=1
