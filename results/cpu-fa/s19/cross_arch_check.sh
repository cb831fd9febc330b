#!/usr/bin/env bash
# The codec's bytes and floats on Arm against x86: cross_arch_check.c built from native/ggml/src/ggml-turbo.c
# with ggml-base's flags for x86-64 and (statically) for aarch64, run here and under qemu-user; the x86 run
# once with the portable code (GGML_TURBO_NO_SIMD=1) and once with its best SIMD path. Needs
# gcc-aarch64-linux-gnu and qemu-user-static (Debian packages) and `tqgguf build` (the patched tree's headers).
#   bash results/cpu-fa/s19/cross_arch_check.sh
set -euo pipefail
cd "$(dirname "$0")"
ROOT=$(git rev-parse --show-toplevel)
S=$(ls -d ${TQGGUF_CACHE:-$HOME/.cache/tqgguf}/src/*/vendor/llama.cpp/ggml/src | head -1)
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
F="-O3 -std=gnu11 -ffp-contract=off -D_GNU_SOURCE -I$S -I$S/../include"
gcc $F cross_arch_check.c "$ROOT/native/ggml/src/ggml-turbo.c" -o "$W/x86" -lm
aarch64-linux-gnu-gcc $F -static cross_arch_check.c "$ROOT/native/ggml/src/ggml-turbo.c" -o "$W/a64" -lm
GGML_TURBO_NO_SIMD=1 "$W/x86" > "$W/x86-portable.bin"
"$W/x86" > "$W/x86-simd.bin"
qemu-aarch64-static "$W/a64" > "$W/a64.bin"
python3 - "$W" <<'PY'
import sys, numpy as np
w = sys.argv[1]
a64, port, simd = (open(f"{w}/{n}.bin", "rb").read() for n in ("a64", "x86-portable", "x86-simd"))
print("aarch64 against x86 portable:", "identical bytes" if a64 == port else "DIFFER")
N, off = 4096, 0
for t, bs in (("turbo4", 34), ("turbo3", 26), ("turbo2", 18)):
    for part, size in (("encoder (search)", bs*N), ("encoder (ref)", bs*N), ("dequantize", N*256), ("8-head dot", N*8)):
        x, y = simd[off:off + size], a64[off:off + size]
        if x == y:
            print(f"aarch64 against x86 SIMD, {t} {part}: identical")
        else:
            fx, fy = np.frombuffer(x, np.float32), np.frombuffer(y, np.float32)
            print(f"aarch64 against x86 SIMD, {t} {part}: {np.count_nonzero(fx != fy)} of {fx.size} differ, "
                  f"largest |diff| / row scale {np.max(np.abs(fx - fy)) / np.max(np.abs(fy)):.1e}")
        off += size
PY
