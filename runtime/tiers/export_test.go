package tiers

// CUDARunsForTest is cudaRuns, for the external tests.
var CUDARunsForTest = cudaRuns
