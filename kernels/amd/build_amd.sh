#!/bin/sh
# build_amd.sh compiles every AMD kernel instance (INSTANCES, written by
# make generate) from kernels.cl for each target processor into an HSA
# code object v5 (obj/<gfx>/<entry>.co), and records in obj/SOURCES the
# hash of the sources each object was built from (kernels.cl, every .h in
# name order, INSTANCES and this script, which holds the flags), which a Go
# test checks against the tree so a stale object cannot be committed
# unnoticed. Needs Debian's clang-19 and lld-19. Usage: build_amd.sh [outdir].
set -e
cd "$(dirname "$0")"
out=${1:-obj}
CLANG=${CLANG:-clang-19}
LLD=${LLD:-ld.lld-19}
TARGETS="gfx1201 gfx1100"
# -nogpulib: no ROCm device libraries (the kernels use clang builtins);
# -ffp-contract=off: a*b+c is not fused where T-CPU rounds twice.
FLAGS="-x cl -cl-std=CL2.0 -target amdgcn-amd-amdhsa -mcode-object-version=5 -O3 -nogpulib -ffp-contract=off -Werror"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for gfx in $TARGETS; do
	mkdir -p "$out/$gfx"
	rm -f "$out/$gfx"/*.co
	grep -v '^#' INSTANCES | while read -r entry defs; do
		echo "$gfx $entry $defs"
	done
done | xargs -P "$(nproc)" -L 1 sh -c '
	gfx=$0 entry=$1; shift 1
	'"$CLANG $FLAGS"' -mcpu=$gfx "$@" -c kernels.cl -o '"$tmp"'/$gfx-$entry.o &&
	'"$LLD"' -shared --build-id=none -o '"$out"'/$gfx/$entry.co '"$tmp"'/$gfx-$entry.o'
hash=$(cat kernels.cl $(ls *.h | LC_ALL=C sort) INSTANCES build_amd.sh | sha256sum | cut -d' ' -f1)
{
	echo "# sha256 of kernels.cl, every .h in name order, INSTANCES and build_amd.sh; $($CLANG --version | head -1)"
	for gfx in $TARGETS; do
		for f in $(ls "$out/$gfx" | LC_ALL=C sort); do
			printf '%s  %s/%s\n' "$hash" "$gfx" "$f"
		done
	done
} >"$out/SOURCES"
