// Package hostkv is the prefix cache's host-memory tier (llama.cpp's
// --cache-ram, SGLang's HiCache, vLLM's CPU offload): the bytes of KV
// pages the device's pool evicted, kept in RAM under a bound in bytes,
// least recently used out first, so a request whose prefix they hold gets
// fresh device pages with the bytes copied back instead of computing
// them again.
//
// A page is stored under its prefix-cache chunk key and its KV layout's
// identity (the model, the bundle's build and target, the cache types and
// the page size): a page of another model, bundle or layout is never
// found, so a store can be shared by several engines.
package hostkv

import (
	"container/list"
	"sync"
)

// Key names a page's bytes: the identity of the KV layout they are in
// (runtime.Program.KVLayout) and the page's prefix-cache chunk key, which
// chains every token before it and the request's isolation scope.
type Key struct {
	Layout string
	Chunk  uint64
}

// Store holds page bytes up to a capacity in bytes. It is safe for
// concurrent use (engines of several models may share one).
type Store struct {
	mu       sync.Mutex
	capacity int64
	bytes    int64
	pages    map[Key]*list.Element // → entry in lru
	lru      *list.List            // of *entry, least recently used first
	stats    Stats
}

type entry struct {
	key   Key
	bytes []byte
}

// Stats count a store's traffic since it was made.
type Stats struct {
	// Stored and Evicted count pages put in and pushed out for room;
	// Hits the pages read back.
	Stored, Evicted, Hits uint64
}

// New returns an empty store of capacity bytes.
func New(capacity int64) *Store {
	return &Store{capacity: capacity, pages: map[Key]*list.Element{}, lru: list.New()}
}

// Capacity is the store's bound in bytes.
func (s *Store) Capacity() int64 { return s.capacity }

// Put copies page under k, pushing the least recently used pages out
// until it fits; it reports false (and keeps nothing) when the page alone
// exceeds the capacity. A page already stored under k is only marked
// used: a key's bytes never change (the key chains every token before
// them).
func (s *Store) Put(k Key, page []byte) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if el, ok := s.pages[k]; ok {
		s.lru.MoveToBack(el)
		return true
	}
	n := int64(len(page))
	if n == 0 || n > s.capacity {
		return false
	}
	var buf []byte
	for _, b := range s.makeRoom(n) {
		if len(b) == len(page) {
			buf = b // pages of one layout are one size: reuse the memory
		}
	}
	if buf == nil {
		buf = make([]byte, len(page))
	}
	copy(buf, page)
	s.pages[k] = s.lru.PushBack(&entry{key: k, bytes: buf})
	s.bytes += n
	s.stats.Stored++
	return true
}

// Adopt stores page under k as it is, without copying it: the store
// owns the buffer until it pushes it out or Take hands it back (a host
// tier whose buffers are page-locked keeps them so, and copies none on
// the host). It returns the buffers the caller owns again: those of the
// pages pushed out for room, and page itself when k is stored already
// (only marked used) or the page alone exceeds the capacity.
func (s *Store) Adopt(k Key, page []byte) (free [][]byte) {
	return s.adopt(k, page, true)
}

// Return gives back, as Adopt does, bytes Take handed out (counted as
// stored when they were first).
func (s *Store) Return(k Key, page []byte) (free [][]byte) {
	return s.adopt(k, page, false)
}

func (s *Store) adopt(k Key, page []byte, stored bool) (free [][]byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if el, ok := s.pages[k]; ok {
		s.lru.MoveToBack(el)
		return [][]byte{page}
	}
	n := int64(len(page))
	if n == 0 || n > s.capacity {
		return [][]byte{page}
	}
	free = s.makeRoom(n)
	s.pages[k] = s.lru.PushBack(&entry{key: k, bytes: page})
	s.bytes += n
	if stored {
		s.stats.Stored++
	}
	return free
}

// Take removes the bytes stored under k and hands them to the caller (a
// hit), who gives them back with Return (or keeps them); it reports
// false when none are stored.
func (s *Store) Take(k Key) ([]byte, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	el, ok := s.pages[k]
	if !ok {
		return nil, false
	}
	e := el.Value.(*entry)
	s.lru.Remove(el)
	delete(s.pages, k)
	s.bytes -= int64(len(e.bytes))
	s.stats.Hits++
	return e.bytes, true
}

// Has reports whether bytes are stored under k.
func (s *Store) Has(k Key) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.pages[k]
	return ok
}

// Get copies the bytes stored under k into dst and marks them used; it
// reports false when none are stored or they are not len(dst) bytes.
func (s *Store) Get(k Key, dst []byte) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	el, ok := s.pages[k]
	if !ok {
		return false
	}
	e := el.Value.(*entry)
	if len(e.bytes) != len(dst) {
		return false
	}
	copy(dst, e.bytes)
	s.lru.MoveToBack(el)
	s.stats.Hits++
	return true
}

// Len is the number of pages stored; Bytes their size.
func (s *Store) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lru.Len()
}

// Bytes is the bytes stored.
func (s *Store) Bytes() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bytes
}

// Stats returns the store's counters.
func (s *Store) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
}

// makeRoom pushes out the least recently used pages until n more bytes
// fit, and returns their buffers.
func (s *Store) makeRoom(n int64) (freed [][]byte) {
	for s.bytes+n > s.capacity {
		el := s.lru.Front()
		e := el.Value.(*entry)
		s.lru.Remove(el)
		delete(s.pages, e.key)
		s.bytes -= int64(len(e.bytes))
		s.stats.Evicted++
		freed = append(freed, e.bytes)
	}
	return freed
}
