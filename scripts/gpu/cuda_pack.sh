#!/usr/bin/env bash
# Here, before the GPU run: the patched tree (patches/series + native/, as `tqgguf build
# --source-only` writes it) trimmed to what the CUDA build needs, xz-compressed, into
# .device/cuda/tree.tar.xz (about 9 MB), and model/text pieces of at most 48 MiB (PIECE=61M: larger) into
# .device/cuda/pieces/ (send them a few per call through .device/cuda/parts/).
#   scripts/gpu/cuda_pack.sh [MODEL.gguf ...]
set -euo pipefail
cd "$(dirname "$0")/../.."
D=.device/cuda
rm -rf "$D/src" && mkdir -p "$D/pieces" "$D/parts"
tqgguf build --source-only "$D/src" >/dev/null
tar -C "$D/src/vendor" --exclude=llama.cpp/docs --exclude=llama.cpp/media --exclude=llama.cpp/models \
    --exclude=llama.cpp/benches --exclude=llama.cpp/examples --exclude=llama.cpp/tools/ui/node_modules \
    --exclude=llama.cpp/tools/server/public --exclude=llama.cpp/.git -cJf "$D/tree.tar.xz" llama.cpp
rm -rf "$D/src"
ls -la "$D/tree.tar.xz"
for f in "$@"; do
    name=$(basename "$f")
    split -b "${PIECE:-48M}" -d "$f" "$D/pieces/$name.part"
    ls "$D/pieces/$name".part* | wc -l | tr -d ' ' > "$D/pieces/$name.nparts"
done
ls -la "$D/pieces"
