// Package prefix is the serving engine's prefix cache (seed 000 §18.14):
// full 16-token chunks of prompts whose KV pages stay in the pool after
// their request ends, found again by a chained hash, so a later request
// that starts with the same tokens maps those pages read-only and skips
// their prefill.
//
// Chunk i's key is SipHash-2-4 over (key of chunk i-1, chunk i's tokens),
// under a secret drawn once per process and seeded with the request's
// isolation scope (a tenant, or a group of tenants that may share). A
// scope never finds another scope's pages, so no tenant can learn from
// timing whether another sent a prompt (vLLM's cache_salt exists for the
// same leak, CVE-2025-46570).
package prefix

import (
	"container/list"
	"crypto/rand"
	"encoding/binary"

	"github.com/dchest/siphash"
	"github.com/zrtdev/zrt/kernels"
)

// Cache maps chunk keys to pages. It holds one pool reference to each page
// it indexes (the caller's pool does the counting); it is not safe for
// concurrent use.
type Cache struct {
	k0, k1 uint64
	pages  map[uint64]*list.Element // key → entry in lru
	lru    *list.List               // of *entry, least recently used first
	// held is by page the keys it is cached under: a slice over the
	// pool's dense page numbers, which the engine's step reads for every
	// cached page (Held), faster than a map.
	held []int32
}

type entry struct {
	key    uint64
	page   uint32
	tenant string // charged for the page
}

// New returns an empty cache with a fresh secret.
func New() *Cache {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("prefix: no randomness for the cache secret: " + err.Error())
	}
	return &Cache{k0: binary.LittleEndian.Uint64(b[:8]), k1: binary.LittleEndian.Uint64(b[8:]), pages: map[uint64]*list.Element{}, lru: list.New()}
}

// Keys returns the chained keys of tokens' full chunks within scope,
// stopping before the chunk that holds the last token (its logits must be
// computed, so it is never served from the cache).
func (c *Cache) Keys(scope string, tokens []int32) []uint64 {
	n := (len(tokens) - 1) / kernels.KVPageTokens
	keys := make([]uint64, 0, n)
	prev := siphash.Hash(c.k0, c.k1, []byte(scope))
	buf := make([]byte, 8+4*kernels.KVPageTokens)
	for i := range n {
		binary.LittleEndian.PutUint64(buf, prev)
		for j, t := range tokens[i*kernels.KVPageTokens : (i+1)*kernels.KVPageTokens] {
			binary.LittleEndian.PutUint32(buf[8+4*j:], uint32(t))
		}
		prev = siphash.Hash(c.k0, c.k1, buf)
		keys = append(keys, prev)
	}
	return keys
}

// Lookup returns the pages of the longest cached run of keys from the
// first, marking them recently used.
func (c *Cache) Lookup(keys []uint64) []uint32 { return c.run(keys, true) }

// Peek returns the pages of the longest cached run of keys from the
// first, like Lookup, without marking them used.
func (c *Cache) Peek(keys []uint64) []uint32 { return c.run(keys, false) }

// run is Lookup (use: marking the pages recently used) or Peek.
func (c *Cache) run(keys []uint64, use bool) []uint32 {
	var out []uint32
	for _, k := range keys {
		el, ok := c.pages[k]
		if !ok {
			break
		}
		if use {
			c.lru.MoveToBack(el)
		}
		out = append(out, el.Value.(*entry).page)
	}
	return out
}

// Page returns the page cached under key, without marking it used.
func (c *Cache) Page(key uint64) (uint32, bool) {
	el, ok := c.pages[key]
	if !ok {
		return 0, false
	}
	return el.Value.(*entry).page, true
}

// Refs is how many pool references the cache holds to page (one per key
// it is cached under).
func (c *Cache) Refs(page uint32) int {
	if int(page) < len(c.held) {
		return int(c.held[page])
	}
	return 0
}

// Has reports whether key is cached.
func (c *Cache) Has(key uint64) bool { _, ok := c.pages[key]; return ok }

// Insert indexes page under key; the caller has added the cache's pool
// reference.
func (c *Cache) Insert(key uint64, page uint32, tenant string) {
	c.pages[key] = c.lru.PushBack(&entry{key, page, tenant})
	if int(page) >= len(c.held) {
		c.held = append(c.held, make([]int32, int(page)+1-len(c.held))...)
	}
	c.held[page]++
}

// Len is the number of cached pages.
func (c *Cache) Len() int { return c.lru.Len() }

// Evict removes the least recently used entry whose page no request maps
// (inUse says whether one does) and returns its page, for the caller to
// release, and the key it was cached under (a host tier keeps the page's
// bytes by it); ok is false when every cached page is in use.
func (c *Cache) Evict(inUse func(page uint32) bool) (key uint64, page uint32, ok bool) {
	for el := c.lru.Front(); el != nil; el = el.Next() {
		e := el.Value.(*entry)
		if !inUse(e.page) {
			c.lru.Remove(el)
			delete(c.pages, e.key)
			c.held[e.page]--
			return e.key, e.page, true
		}
	}
	return 0, 0, false
}

// Held calls f for every cached page, in page order, with the number of
// keys it is cached under (the times Pages would give it).
func (c *Cache) Held(f func(page uint32, keys int)) {
	for pg, n := range c.held {
		if n > 0 {
			f(uint32(pg), int(n))
		}
	}
}

// Pages calls f for every cached page (for invariant checks).
func (c *Cache) Pages(f func(page uint32)) {
	for el := c.lru.Front(); el != nil; el = el.Next() {
		f(el.Value.(*entry).page)
	}
}
