package engine

import (
	"slices"

	"github.com/zrtdev/zrt/runtime/engine/sched"
)

// Fast-forward (SGLang's jump-forward, llguidance's forced tokens). Where
// a request's constraint allows one token alone — the rest of a JSON
// key, the punctuation between fields — no logits can choose another, so
// the engine takes that token ahead of the model (decode's NextForced)
// and sends it at once, then the next it forces, and so on. The tokens
// taken so still need their rows, for their KV: they go after the
// request's pending token as the rows of a verify chunk would, each in a
// slot no request holds (sched's draft rows, which the scheduler grants
// only from spare slots, budget and free pages), and only the last wants
// logits, the next token's once every forced token has its row. A step
// that has no spare slot for them leaves them to the next: the request's
// chunk then computes its pending token alone and takes no token (its
// next one is already known), as it would have spent that step on it
// anyway. So a request gains where the batch has room, and on a
// batch-invariant tier its output is the same token for token as without
// fast-forward: a greedy choice under a mask that allows one token is
// that token, and a sampled request takes such a token without a draw
// (NextFrom too), so its stream does not depend on where the token was
// taken.
//
// Speculating requests are unconstrained (Config.Speculative), so draft
// rows and forced rows never meet in one request. A model with state in
// its slots (recurrent layers) cannot compute a request's rows in other
// slots, so it does not force; nor does an engine that writes a step log
// (its rerun has no constraints, so it must not have forced either).

// fastForward takes, for each running constrained request whose tokens
// are all computed but the pending one, the tokens its constraint forces
// next, while the step has slots no request holds for their rows (more
// would only wait for later steps). The constraint found them forced
// when it computed the mask that allows the first of them alone
// (decode's lookahead), beside the device's last step, so this costs the
// step no mask: a request whose next mask is still due (masksDue, which
// the step's MasksReady computes) has none to take yet.
func (e *Engine) fastForward() {
	if !e.forcing || e.logging() {
		return
	}
	spare := len(e.borrowSlots())
	if spare == 0 {
		return
	}
	ended, forced := false, uint64(0)
	for _, r := range e.reqs {
		if r.slot < 0 || r.done < len(r.Prompt) || r.done != len(r.tokens)-1 || r.replay > 0 && r.done < r.replay || slices.Contains(e.masksDue, r.dec) {
			continue
		}
		for spare > 0 {
			st, ok := r.dec.NextForced(len(r.tokens))
			if !ok {
				break
			}
			forced++
			spare--
			if !e.take(r, st) {
				ended = true // at that token
				break
			}
		}
	}
	if forced > 0 {
		e.mu.Lock()
		e.stats.ForcedTokens += forced
		e.mu.Unlock()
	}
	if ended {
		e.compact()
	}
}

// forced is how many tokens r has taken ahead of the model (fastForward)
// that wait for their rows after its pending one.
func (r *request) forced() int {
	if r.slot < 0 || r.spec != nil || r.done < max(len(r.Prompt), r.replay) {
		return 0
	}
	return max(len(r.tokens)-1-r.done, 0)
}

// takes says that chunk c of r's ends at r's newest token, so that its
// last row's outcome is r's next token (sched.Chunk.Logits, unless forced
// tokens follow the chunk's rows).
func (r *request) takes(c sched.Chunk) bool {
	return c.Logits && c.From+c.N == len(r.tokens)
}

// lastSlots is the slot of each of the plan's chunks' last row: the
// request's own, or for a chunk with draft or forced rows the last slot
// it borrowed (borrowed: those slots, in the order of those chunks, as
// batch returns them).
func lastSlots(plan sched.Plan, byID map[uint64]*request, borrowed []int) []int {
	last := make([]int, len(plan.Rows))
	for i, c := range plan.Rows {
		last[i] = byID[c.ID].slot
		if c.Draft > 0 {
			last[i] = borrowed[c.Draft-1]
			borrowed = borrowed[c.Draft:]
		}
	}
	return last
}
