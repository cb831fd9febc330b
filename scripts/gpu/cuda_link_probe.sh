#!/usr/bin/env bash
# Where the libstdc++ symbols a CUDA shared library exports come from: the toolkit's static
# archives (cudart_static, cudadevrt, culibos: std:: definitions in them?), the libstdc++ a
# numpy import maps, and a tiny CMake CUDA library linked as ggml-cuda is, with and without
# -Wl,--exclude-libs,ALL (docs/CUDA.md, load order). Needs nvcc, g++, cmake; no GPU.
set -u
nvcc --version | tail -2; g++ --version | head -1; cmake --version | head -1
NV=$(readlink -f "$(command -v nvcc)"); CU=$(dirname "$(dirname "$NV")"); echo "CUDA root $CU"
for a in $(find "$CU" /usr/local/cuda* -name 'libcudart_static.a' -o -name 'libcudadevrt.a' -o -name 'libculibos.a' 2>/dev/null | sort -u); do
  echo "$a: std defs $(nm -C --defined-only "$a" 2>/dev/null | grep -c 'std::'), codecvt $(nm -C --defined-only "$a" 2>/dev/null | grep -c codecvt)"; done
python3 -c "import numpy; print('numpy', numpy.__version__)"
python3 -c "import sys,numpy,os; print(open('/proc/self/maps').read().count('libstdc++'))"
grep -h libstdc /proc/self/maps 2>/dev/null | head -2
python3 - <<'P'
import numpy
for l in open('/proc/self/maps'):
    if 'stdc++' in l or 'gcc_s' in l: print(l.split()[-1])
P
D=$(mktemp -d); cd "$D"
printf '#include <string>\n#include <regex>\n#include <sstream>\n__global__ void k(float*x){x[threadIdx.x]*=2;}\nstd::string f(const std::string&s){std::ostringstream o;o<<s<<1.5;return std::regex_replace(o.str(),std::regex("a+"),"b");}\nextern "C" void launch(float*x){k<<<1,32>>>(x);}\n' > a.cu
for X in "" "-Wl,--exclude-libs,ALL"; do
printf 'cmake_minimum_required(VERSION 3.18)\nproject(r LANGUAGES CXX CUDA)\nset(CMAKE_CUDA_ARCHITECTURES 90)\nfind_package(CUDAToolkit)\nadd_library(x SHARED a.cu)\ntarget_link_libraries(x PRIVATE CUDA::cudart)\nif(TARGET CUDA::cublas)\ntarget_link_libraries(x PRIVATE CUDA::cublas)\nendif()\ntarget_link_options(x PRIVATE %s)\n' "$X" > CMakeLists.txt
rm -rf b; cmake -S . -B b >/dev/null 2>&1; cmake --build b -v 2>&1 | grep -- "-shared" | head -1
echo "link [$X]: exported defined $(nm -D --defined-only b/libx.so | wc -l), std:: $(nm -D --defined-only -C b/libx.so | grep -c 'std::'), codecvt $(nm -D --defined-only -C b/libx.so | grep -c codecvt), T/B/D std:: $(nm -D --defined-only -C b/libx.so | grep ' [TBDR] ' | grep -c 'std::')"
done
