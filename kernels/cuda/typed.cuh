// typed.cuh: what the weight-typed kernel families (family/*.cuh of the
// families whose catalog ABI is typed) share. An instance file (written by
// kernels/cuda/gen) defines WT (the ggml type id), FAMILY (its family's
// number: one of families.cuh's FAMILY_* names) and NAME (the PTX entry:
// the catalog instance name with '.' replaced by '_'), then includes its
// family's .cuh, which includes this.
#pragma once
#include "common.cuh"
#include "families.cuh"
#include "mmq.cuh"
#include "mmt.cuh"

#define VT (Geom<WT>::VT)

// The entry points of the integer matrix families (kcuda.EntryPoint):
// NAME, the matrix-vector kernel; NAME_tile, the multi-row kernel (mmt's
// 64-row tile for MMT_TYPE types, else mmq); for MMT_TYPE types
// NAME_tile16 and NAME_tile32, mmt's 16- and 32-row tiles for steps of up
// to 64 rows;
// NAME_stage, which stages the activation rows for mmt (mt_stage): it and
// the three mmt entries take the staging buffer as one more parameter
// (STAGE_PARAM), which the tier appends; and NAME_dp4a, mmq for MMT_TYPE
// types: lm_head's in prefill, and every family's for Q8_0 rows whose k
// is not a multiple of 256 (mmt walks k by 256). MMQ_TYPE types have
// NAME_rows too: the matrix-vector kernel taking MMV_MR rows a block, for
// steps of a few rows, and NAME_rows4, the same taking MMV_MR4 rows a
// block, for the steps of one-row bits (speculative verify steps).
#define ENTRY_MAIN 0
#define ENTRY_TILE 1
#define ENTRY_DP4A 2
#define ENTRY_TILE16 4
#define ENTRY_TILE32 5
#define ENTRY_ROWS 9
#define ENTRY_ROWS4 12
#if MMT_TYPE(WT)
#define STAGE_PARAM , const u8* q8
#define STAGE_ARG q8
#else
#define STAGE_PARAM
#define STAGE_ARG nullptr
#endif
