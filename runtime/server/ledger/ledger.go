// Package ledger is the server's append-only usage ledger (seed 000
// §18.11): one record per finished request, written as a line of JSON
// followed by its CRC-32C, appended and fsynced in small batches. A torn
// tail left by a crash is detected by its checksum or missing newline,
// dropped and cut off on open, never misread; the totals per tenant are
// rebuilt from the records that were complete, so they survive restarts.
package ledger

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"strconv"
	"sync"
	"time"
)

// Record is one finished request.
type Record struct {
	Time       time.Time `json:"time"`
	Tenant     string    `json:"tenant"`
	RequestID  string    `json:"request_id"`
	Model      string    `json:"model"`
	Prompt     int       `json:"prompt_tokens"`
	Cached     int       `json:"cached_tokens"`
	Completion int       `json:"completion_tokens"`
	TTFTms     float64   `json:"ttft_ms"`
	DurationMs float64   `json:"duration_ms"`
	Finish     string    `json:"finish_reason"`
}

// Totals are a tenant's usage.
type Totals struct {
	Requests   int64 `json:"requests"`
	Prompt     int64 `json:"prompt_tokens"`
	Cached     int64 `json:"cached_tokens"`
	Completion int64 `json:"completion_tokens"`
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Ledger appends records to a file.
type Ledger struct {
	mu      sync.Mutex
	f       *os.File
	w       *bufio.Writer
	pending int // records written since the last fsync
	totals  map[string]*Totals
	// Dropped is how many bytes of torn tail Open cut off.
	Dropped int64
	done    chan struct{}
	stopped chan struct{}
}

// syncEvery bounds how long an appended record may wait for its fsync.
const syncEvery = 100 * time.Millisecond

// Open opens (or creates) the ledger at path, reads its complete records
// into the totals and cuts off a torn tail.
func Open(path string) (*Ledger, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("ledger: %w", err)
	}
	l := &Ledger{f: f, totals: map[string]*Totals{}, done: make(chan struct{}), stopped: make(chan struct{})}
	good, size, err := l.replay()
	if err != nil {
		f.Close()
		return nil, err
	}
	if good < size {
		l.Dropped = size - good
		if err := f.Truncate(good); err != nil {
			f.Close()
			return nil, fmt.Errorf("ledger: cutting the torn tail: %w", err)
		}
	}
	if _, err := f.Seek(good, io.SeekStart); err != nil {
		f.Close()
		return nil, fmt.Errorf("ledger: %w", err)
	}
	l.w = bufio.NewWriter(f)
	go l.syncLoop()
	return l, nil
}

// replay reads every complete, intact record and returns the offset after
// the last one and the file's size.
func (l *Ledger) replay() (good, size int64, err error) {
	b, err := io.ReadAll(l.f)
	if err != nil {
		return 0, 0, fmt.Errorf("ledger: %w", err)
	}
	for len(b[good:]) > 0 {
		line, _, ok := bytes.Cut(b[good:], []byte("\n"))
		if !ok {
			break // no newline: torn
		}
		rec, err := decodeLine(line)
		if err != nil {
			break // the first bad record ends what can be trusted
		}
		l.add(rec)
		good += int64(len(line)) + 1
	}
	return good, int64(len(b)), nil
}

func decodeLine(line []byte) (Record, error) {
	var rec Record
	body, sum, ok := bytes.Cut(line, []byte("\t"))
	if !ok {
		return rec, errors.New("no checksum")
	}
	want, err := strconv.ParseUint(string(sum), 16, 32)
	if err != nil || uint32(want) != crc32.Checksum(body, castagnoli) {
		return rec, errors.New("checksum mismatch")
	}
	return rec, json.Unmarshal(body, &rec)
}

func (l *Ledger) add(r Record) {
	t, ok := l.totals[r.Tenant]
	if !ok {
		t = &Totals{}
		l.totals[r.Tenant] = t
	}
	t.Requests++
	t.Prompt += int64(r.Prompt)
	t.Cached += int64(r.Cached)
	t.Completion += int64(r.Completion)
}

// Append adds a record; it reaches the disk within syncEvery.
func (l *Ledger) Append(r Record) error {
	body, err := json.Marshal(r)
	if err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.w == nil {
		return errors.New("ledger: closed")
	}
	fmt.Fprintf(l.w, "%s\t%08x\n", body, crc32.Checksum(body, castagnoli))
	l.pending++
	l.add(r)
	return nil
}

// Totals returns a tenant's usage.
func (l *Ledger) Totals(tenant string) Totals {
	l.mu.Lock()
	defer l.mu.Unlock()
	if t, ok := l.totals[tenant]; ok {
		return *t
	}
	return Totals{}
}

// Sync writes and fsyncs what was appended.
func (l *Ledger) Sync() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.syncLocked()
}

func (l *Ledger) syncLocked() error {
	if l.w == nil || l.pending == 0 {
		return nil
	}
	if err := l.w.Flush(); err != nil {
		return fmt.Errorf("ledger: %w", err)
	}
	l.pending = 0
	return l.f.Sync()
}

func (l *Ledger) syncLoop() {
	defer close(l.stopped)
	t := time.NewTicker(syncEvery)
	defer t.Stop()
	for {
		select {
		case <-l.done:
			return
		case <-t.C:
			l.Sync()
		}
	}
}

// Close flushes, fsyncs and closes the ledger.
func (l *Ledger) Close() error {
	close(l.done)
	<-l.stopped
	l.mu.Lock()
	defer l.mu.Unlock()
	err := l.syncLocked()
	l.w = nil
	if cerr := l.f.Close(); err == nil {
		err = cerr
	}
	return err
}
