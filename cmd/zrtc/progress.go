package main

import (
	"fmt"
	"io"
	"time"

	"github.com/zrtdev/zrt/runtime/sysmem"
)

// progress reports a long task on stderr: say always (unless quiet), tick
// at most once a second, so a task of a minute says a few dozen lines.
type progress struct {
	w    io.Writer // nil: quiet
	last time.Time
}

// newProgress reports on w, or nowhere when quiet.
func newProgress(w io.Writer, quiet bool) *progress {
	if quiet {
		w = nil
	}
	return &progress{w: w, last: time.Now()}
}

func (p *progress) say(format string, a ...any) {
	if p.w != nil {
		fmt.Fprintf(p.w, "zrtc: "+format+"\n", a...)
		p.last = time.Now()
	}
}

func (p *progress) tick(format string, a ...any) {
	if time.Since(p.last) >= time.Second {
		p.say(format, a...)
	}
}

// size writes a byte count for people.
func size(n int64) string { return sysmem.Bytes(n) }
