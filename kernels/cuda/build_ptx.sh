#!/bin/sh
# build_ptx.sh compiles every kernels/cuda/*.cu to PTX, once per
# architecture of $ARCHES (default: sm_80 sm_90), into OUT/<arch>/<entry>.ptx,
# and writes OUT/<arch>/BUILD: the nvcc version, the architecture's flags
# and the sha256 of every source file. It needs nvcc, not Go. Then, where Go
# is, `go run ./kernels/cuda/gen -pack OUT…` checks BUILD against the tree
# (the sources must not have changed since) and packs the PTX into
# kernels/cuda/ptx/ptx.tar.zst with its manifest, kernels/cuda/ptx/SOURCES.
# Usage: build_ptx.sh OUT. `make ptx` runs both steps.
#
# From a GPU machine that returns only a few files: there,
#   sh kernels/cuda/build_ptx.sh /tmp/ptx && tar -C /tmp -czf "$OUT/ptx.tgz" ptx
# and here, with the .tgz it returned (gen -pack reads a .tgz as the
# directory; several, one per architecture, may be given at once):
#   go run ./kernels/cuda/gen -dir kernels/cuda -pack ptx.tgz
#
# sm_80 is compute_80 PTX, which the driver JIT-compiles for any later GPU
# (sm_86, sm_89, sm_90 too); sm_90 is what Hopper runs (programmatic
# dependent launch: dep_sync in common.cuh).
# --fmad=false: the kernels mirror T-CPU's float expressions, which round
# each multiply and add separately (see common.cuh).
set -e
out=${1:?usage: build_ptx.sh OUT}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$(dirname "$0")"
NVCC=${NVCC:-nvcc}
ARCHES=${ARCHES:-sm_80 sm_90}
jobs=$(nproc 2>/dev/null || echo 4)
for arch in $ARCHES; do
	flags="-arch=$arch -ptx -O3 --fmad=false -std=c++17"
	mkdir -p "$out/$arch"
	ls *.cu | xargs -P "$jobs" -I{} sh -c \
		'n=$(basename {} .cu); '"$NVCC $flags"' -o '"$out/$arch"'/$n.ptx {}'
	{
		echo "nvcc $($NVCC --version | tail -1)"
		echo "arch $arch $flags"
		sha256sum *.cu $(find . -name '*.cuh' | sed 's|^\./||' | LC_ALL=C sort)
	} >"$out/$arch/BUILD"
done
