#!/bin/sh
# build_ptx.sh compiles every kernels/cuda/*.cu to PTX for sm_90 and
# records in ptx/SOURCES the hash of each kernel's sources (its .cu plus
# every .cuh, in name order), which a Go test checks against the tree so a
# stale PTX cannot be committed unnoticed. Usage: build_ptx.sh [outdir].
# --fmad=false: the kernels mirror T-CPU's float expressions, which round
# each multiply and add separately (see common.cuh).
set -e
cd "$(dirname "$0")"
out=${1:-ptx}
NVCC=${NVCC:-nvcc}
mkdir -p "$out"
ls *.cu | xargs -P "$(nproc)" -I{} sh -c \
	'n=$(basename {} .cu); '"$NVCC"' -arch=sm_90 -ptx -O3 --fmad=false -std=c++17 -o '"$out"'/$n.ptx {}' 
{
	echo "# sha256 of each kernel's .cu followed by every .cuh in name order; $($NVCC --version | tail -1)"
	for f in *.cu; do
		printf '%s  %s\n' "$(cat "$f" $(ls *.cuh | LC_ALL=C sort) | sha256sum | cut -d' ' -f1)" "$f"
	done
} >"$out/SOURCES"
