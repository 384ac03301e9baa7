package publish

import (
	"os"

	"golang.org/x/sys/unix"
)

// Writeback is a file written front to back that starts the disk writes
// of each finished stretch while the rest is still being written, so that
// the fsync publishing it (SyncTree) waits only for the last stretch
// instead of the whole file: for a multi-GB weights pack, that fsync
// otherwise follows the whole write.
type Writeback struct {
	*os.File
	// Chunk is how many bytes may accumulate before their writeback
	// starts (default 64 MiB).
	Chunk            int64
	written, started int64
}

// Write writes b and, a Chunk at a time, starts writeback of what is
// written. sync_file_range(2) is advice that does not wait: an
// error changes nothing, as the fsync writes whatever is left.
func (w *Writeback) Write(b []byte) (int, error) {
	n, err := w.File.Write(b)
	w.written += int64(n)
	chunk := w.Chunk
	if chunk <= 0 {
		chunk = 64 << 20
	}
	if w.written-w.started >= chunk {
		unix.SyncFileRange(int(w.File.Fd()), w.started, w.written-w.started, unix.SYNC_FILE_RANGE_WRITE)
		w.started = w.written
	}
	return n, err
}
