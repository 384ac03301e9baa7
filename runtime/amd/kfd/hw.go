package kfd

// Compute SH registers (offsets from the SH register base 0x2C00, as
// SET_SH_REG takes them) that T1 sets for a gfx10+ dispatch besides the
// ones asm/pm4 names (COMPUTE_PGM_LO/HI, COMPUTE_USER_DATA_0).
const (
	RegNumThreadX      = 0x207
	RegNumThreadY      = 0x208
	RegNumThreadZ      = 0x209
	RegPgmRsrc1        = 0x212
	RegPgmRsrc2        = 0x213
	RegResourceLimits  = 0x215
	RegTmpringSize     = 0x218
	RegPgmRsrc3        = 0x228
	InitiatorCSW32En   = 1 << 15 // DISPATCH_INITIATOR.CS_W32_EN: wave32
	ReleaseIntSelShift = 24      // RELEASE_MEM dword 1: INT_SEL
)
