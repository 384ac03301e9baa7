package kernels

// The request table ("io" buffer) is how data-dependent shape reaches
// kernels without changing the packet stream: the number of active rows,
// each row's token, position, slot and flags, and each slot's KV page table.
// The host writes it before each replay; kernels only read it. Offsets are
// in 32-bit words.
const (
	IOWordRows       = 0 // active rows in this step (≤ the variant's row capacity)
	IOWordMaxPages   = 1 // page-table entries per slot
	IOWordPageTable  = 2 // word offset of the page table
	IOWordRowBase    = 8 // first row record
	IORowWords       = 4 // words per row record
	IORowToken       = 0
	IORowPos         = 1
	IORowSlot        = 2
	IORowFlags       = 3
	RowWantsLogits   = 1 // flag: LM_HEAD writes logits for this row's slot
	KVPageTokens     = 16
	RouteEntryBytes  = 8 // one (expert id u32, weight f32) pair of a MoE route
	OutFenceWordSize = 4
)

// IOWords returns the size in words of a request table for rows row records
// and slots×maxPages page-table entries.
func IOWords(rows, slots, maxPages int) int {
	return IOWordRowBase + rows*IORowWords + slots*maxPages
}

// PageTableOffset returns the word offset of the page table for a table
// sized for rows row records.
func PageTableOffset(rows int) int { return IOWordRowBase + rows*IORowWords }

// KVPageBytes returns the bytes of one KV page: KVPageTokens tokens of K and V
// (F16) for every layer, laid out [layer][k|v][token][kvDim].
func KVPageBytes(nLayer, kvDim int) int { return nLayer * 2 * KVPageTokens * kvDim * 2 }
