#!/usr/bin/env bash
# Here, before the GPU run: the patched tree of THIS checkout (patches/series + native/,
# through tqgguf.builder.source.prepare_tree of this repository, not an installed tqgguf),
# trimmed to what the CUDA build needs, into .device/cuda/tree.tar.xz (about 9 MB).
#   scripts/gpu/pack.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
D=.device/cuda
rm -rf "$D/src" && mkdir -p "$D"
PYTHONPATH=$PWD python3 -c "import sys; from pathlib import Path; from tqgguf.builder.source import prepare_tree; prepare_tree(Path(sys.argv[1]), log=lambda *a, **k: None)" "$D/src"
tar -C "$D/src/vendor" --exclude=llama.cpp/docs --exclude=llama.cpp/media --exclude=llama.cpp/models \
    --exclude=llama.cpp/benches --exclude=llama.cpp/examples --exclude=llama.cpp/tools/ui/node_modules \
    --exclude=llama.cpp/tools/server/public --exclude=llama.cpp/.git -cJf "$D/tree.tar.xz" llama.cpp
rm -rf "$D/src"
ls -la "$D/tree.tar.xz"
