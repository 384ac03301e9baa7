package server

import (
	"sync"

	"github.com/zrtdev/zrt/kernels"
	"github.com/zrtdev/zrt/runtime/engine"
)

// A model served by several replicas sends each request to one of them.
// Each replica keeps its own prefix cache, so a conversation's next turn
// computes again what its last turn left cached unless it goes back to
// the replica that served it. The router remembers, for the prompts it
// sent, which replica each run of whole KV pages of prompt tokens went to
// (the pages a prefix cache keeps, in the request's prefix-cache scope:
// its tenant's), and sends a prompt to the replica
// that holds its longest such prefix while that replica has a free slot;
// otherwise, and for a prompt no replica holds, to the replica holding
// the fewest requests (SGLang's cache-aware router and vLLM's
// prefix-aware routing do likewise). What it remembers is bounded
// (routeKeys), the oldest forgotten first.

// routeKeys bounds the prefixes a model's router remembers; routePages
// the pages of one prompt it hashes.
const (
	routeKeys  = 1 << 16
	routePages = 256
)

// router is a model's memory of where prompt prefixes went.
type router struct {
	mu    sync.Mutex
	where map[uint64]int // a prefix of whole pages → the replica it went to
	order []uint64       // the keys in where, oldest first from next (a ring)
	next  int
}

// prefixKeys hashes prompt's runs of whole pages in prefix-cache scope
// scope, each key the FNV-1a hash of the scope and every token before its
// page's end: key j names the first (j+1)·KVPageTokens tokens.
func prefixKeys(scope string, prompt []int32) []uint64 {
	n := min(len(prompt)/kernels.KVPageTokens, routePages)
	keys := make([]uint64, n)
	h := uint64(14695981039346656037)
	for _, c := range []byte(scope + "\x00") {
		h ^= uint64(c)
		h *= 1099511628211
	}
	for j := range n {
		for _, t := range prompt[j*kernels.KVPageTokens : (j+1)*kernels.KVPageTokens] {
			for b := range 4 {
				h ^= uint64(byte(uint32(t) >> (8 * b)))
				h *= 1099511628211
			}
		}
		keys[j] = h
	}
	return keys
}

// submit sends a request with prompt in prefix-cache scope scope, by
// send, to the replica it should go to, remembered as where its prefixes
// went. The pick and the submission happen under the router's lock, so
// the next pick counts this request in its replica's load (engine.Load):
// requests arriving together spread over idle replicas instead of all
// finding the first one idle.
func (m *Model) submit(scope string, prompt []int32, send func(*engine.Engine) ([]<-chan engine.Event, error)) ([]<-chan engine.Event, error) {
	if len(m.Engines) == 1 {
		return send(m.Engines[0])
	}
	r := &m.routes
	r.mu.Lock()
	defer r.mu.Unlock()
	least, held := 0, make([]int, len(m.Engines))
	free := make([]bool, len(m.Engines))
	for i, e := range m.Engines {
		h, slots := e.Load()
		held[i], free[i] = h, h < slots
		if h < held[least] {
			least = i
		}
	}
	keys := prefixKeys(scope, prompt)
	pick := least
	for j := len(keys) - 1; j >= 0; j-- {
		if at, ok := r.where[keys[j]]; ok {
			if free[at] {
				pick = at
			}
			break
		}
	}
	r.remember(keys, pick)
	return send(m.Engines[pick])
}

// remember records that keys went to replica at (r.mu held).
func (r *router) remember(keys []uint64, at int) {
	if r.where == nil {
		r.where, r.order = map[uint64]int{}, make([]uint64, 0, routeKeys)
	}
	for _, k := range keys {
		if _, ok := r.where[k]; ok {
			r.where[k] = at
			continue
		}
		if len(r.order) < routeKeys {
			r.order = append(r.order, k)
		} else {
			delete(r.where, r.order[r.next])
			r.order[r.next] = k
			r.next = (r.next + 1) % routeKeys
		}
		r.where[k] = at
	}
}
