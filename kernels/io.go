package kernels

import "github.com/zrtdev/zrt/format/bundle"

// The memory plan's regions that the compiler, the stream checker and the
// tiers refer to by name. Weight regions are RegionWeights followed by the
// layer class ("weights.attn_q").
const (
	RegionKV      = "kv"
	RegionIO      = "io" // the request table
	RegionLogits  = "out.logits"
	RegionTokens  = "out.tokens"
	RegionFence   = "fence" // written by every stream's last RELEASE_MEM
	RegionScratch = "scratch"
	RegionWeights = "weights."
	// RegionRecurrent holds every slot's recurrent-layer state, slot after
	// slot (Hparams.RecurrentBytes each); only models with recurrent
	// layers have it.
	RegionRecurrent = "recurrent"
	// RegionKVWindow holds the sliding-window layers' KV pages as a ring
	// per slot (Hparams.KVWindowRing pages each), and RegionIOWindow a
	// copy of the request table whose page tables map positions onto
	// those rings; only bundles that ring their window layers have them.
	RegionKVWindow = "kv.window"
	RegionIOWindow = "io.window"
)

// The request table ("io" buffer) is how data-dependent shape reaches
// kernels without changing the packet stream: the number of active rows,
// each row's token, position, slot and flags, and each slot's KV page table.
// The host writes it before each replay; kernels only read it. Offsets are
// in 32-bit words.
const (
	IOWordRows      = 0 // active rows in this step (≤ the variant's row capacity)
	IOWordMaxPages  = 1 // page-table entries per slot
	IOWordPageTable = 2 // word offset of the page table
	IOWordRowBase   = 8 // first row record
	IORowWords      = 4 // words per row record
	IORowToken      = 0
	IORowPos        = 1
	IORowSlot       = 2
	IORowFlags      = 3
	RowWantsLogits  = 1 // flag: LM_HEAD writes logits for this row's slot
	// RowPrompt marks a row that evaluates a prompt token (not a decode
	// step), and RowLongPrompt one whose prompt has at least
	// LongPromptRows tokens. They describe the row's request, not the
	// step, so a tier that picks a computation path by them (T-CPU's
	// attention, which follows ggml's choice by batch size) gives a
	// request the same bits however the scheduler chunked or batched it.
	RowPrompt     = 2
	RowLongPrompt = 4
	// RowPromptTail marks a prompt row among the last (n mod 4) rows of
	// the n rows of the ubatch (PromptUbatchRows at most, the prompt
	// evaluated from its start) llama.cpp would evaluate it in: ggml's
	// repacked matrix products take their GEMV for those rows and their
	// GEMM for the others (quant.OrderGEMV, OrderGEMM). Like RowPrompt it
	// describes the request, not the step.
	RowPromptTail = 8
	// PromptUbatchRows is llama.cpp's n_ubatch in the references: a
	// prompt is evaluated in ubatches of at most this many rows.
	PromptUbatchRows = 512
	// LongPromptRows is the batch size from which llama.cpp's CPU
	// backend attends on its tiled path (GGML_FA_TILE_Q).
	LongPromptRows   = 64
	KVPageTokens     = 16
	RouteEntryBytes  = 8 // one (expert id u32, weight f32) pair of a MoE route
	OutFenceWordSize = 4
)

// RequestTable is the layout of a program's request table: room for Rows
// row records (the most any variant replays) and a page table of
// Slots × MaxPages entries. The compiler sizes the "io" region with it and
// the runtime fills the table through it, so the two cannot disagree.
type RequestTable struct {
	Rows, Slots, MaxPages int
}

// NewRequestTable is the table of a program whose largest prefill variant
// evaluates prefillRows rows and whose decode variant serves slots slots
// of at most maxPages KV pages each.
func NewRequestTable(prefillRows, slots, maxPages int) RequestTable {
	return RequestTable{Rows: max(prefillRows, slots), Slots: slots, MaxPages: maxPages}
}

// Words returns the table's size in 32-bit words.
func (t RequestTable) Words() int { return t.PageTable() + t.Slots*t.MaxPages }

// PageTable returns the word offset of the page table.
func (t RequestTable) PageTable() int { return IOWordRowBase + t.Rows*IORowWords }

// KVPageBytes returns the bytes of a KV page of nLayer regions, each
// KVPageTokens tokens of K and V (F16), laid out [layer][k|v][token][kvDim].
// The kernels address a layer's region by its index among regions of its
// own width, which is how the compiler places layers of several widths.
func KVPageBytes(nLayer, kvDim int) int { return nLayer * 2 * KVPageTokens * kvDim * 2 }

// PageBytes is one KV page of the model h: as the compiler placed the
// layers, or, in bundles that do not say, n_layer regions of one width.
func PageBytes(h *bundle.Hparams) int {
	if h.KVPageBytes > 0 {
		return h.KVPageBytes
	}
	return KVPageBytes(h.NLayer, h.KVDim())
}
