package engine

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/zrtdev/zrt/runtime/engine/sched"
)

// The trace's thread ids: steps and request events on separate tracks so
// the instants do not hide under the step bars in a viewer.
const (
	tracePID      = 1
	traceTIDSteps = 1
	traceTIDReqs  = 2
)

// tracer writes a Chrome trace-event file (the JSON object format, whose
// "traceEvents" array chrome://tracing and Perfetto read): one complete
// event per step, counters of slots, pages and queue after it, and an
// instant per admission, preemption and finish. A nil *tracer is off, so
// the step loop calls it unconditionally.
//
// Events of one step are buffered and written with one Write at the step's
// end, so the file always ends on a whole event: a process that dies
// before Close leaves a file that lacks only the closing "]}".
type tracer struct {
	w      io.Writer
	now    func() time.Time
	start  time.Time
	buf    []byte
	n      int // events written, for the separating commas
	err    error
	closed bool
}

// traceEvent is one event of the Chrome trace-event format; ts and dur are
// in microseconds.
type traceEvent struct {
	Name  string         `json:"name"`
	Cat   string         `json:"cat,omitempty"`
	Ph    string         `json:"ph"`
	TS    float64        `json:"ts"`
	Dur   *float64       `json:"dur,omitempty"`
	PID   int            `json:"pid"`
	TID   int            `json:"tid"`
	Scope string         `json:"s,omitempty"`
	Args  map[string]any `json:"args,omitempty"`
}

func newTracer(w io.Writer, now func() time.Time) *tracer {
	t := &tracer{w: w, now: now, start: now()}
	t.buf = append(t.buf, `{"displayTimeUnit":"ms","traceEvents":[`...)
	t.meta("process_name", 0, "zrt engine")
	t.meta("thread_name", traceTIDSteps, "steps")
	t.meta("thread_name", traceTIDReqs, "requests")
	t.flush()
	return t
}

func (t *tracer) meta(name string, tid int, value string) {
	t.add(traceEvent{Name: name, Ph: "M", PID: tracePID, TID: tid, Args: map[string]any{"name": value}})
}

// us is the trace time of at: microseconds since the engine started.
func (t *tracer) us(at time.Time) float64 {
	return float64(at.Sub(t.start).Nanoseconds()) / 1e3
}

func (t *tracer) add(ev traceEvent) {
	if t == nil || t.closed || t.err != nil {
		return
	}
	b, err := json.Marshal(ev)
	if err != nil {
		t.err = fmt.Errorf("engine: trace event %s: %w", ev.Name, err)
		return
	}
	if t.n > 0 {
		t.buf = append(t.buf, ',')
	}
	t.buf = append(t.buf, '\n')
	t.buf = append(t.buf, b...)
	t.n++
}

// instant records something that happened to request r now.
func (t *tracer) instant(name string, r *request, args map[string]any) {
	if t == nil {
		return
	}
	if args == nil {
		args = map[string]any{}
	}
	args["id"], args["tenant"], args["qos"] = r.id, r.Tenant, r.QoS.String()
	t.add(traceEvent{Name: name, Cat: "request", Ph: "i", Scope: "t", TS: t.us(t.now()), PID: tracePID, TID: traceTIDReqs, Args: args})
}

// step records one computed step, from start to now, with its plan.
func (t *tracer) step(n uint64, start time.Time, plan sched.Plan, decodeRows, prefillRows int, variant string, parts stepParts, err error) {
	if t == nil {
		return
	}
	end := t.now()
	dur := t.us(end) - t.us(start)
	args := map[string]any{"step": n, "rows": plan.NRows, "decode_rows": decodeRows, "prefill_rows": prefillRows,
		"variant": variant, "admitted": len(plan.Admit), "preempted": len(plan.Preempt), "plan": plan.String()}
	// Where the step's time went, in µs: scheduling and batching, the
	// model's step (the device and the wait for it), advancing the
	// device-masked rows' constraints, and sampling and sending the rest
	// (to the step's end); each part only as far as the step got.
	from := start
	for _, p := range []struct {
		name string
		at   time.Time
	}{{"schedule_us", parts.launch}, {"replay_us", parts.replayed}, {"advance_us", parts.advanced}, {"sample_us", end}} {
		if p.at.IsZero() {
			break
		}
		args[p.name] = t.us(p.at) - t.us(from)
		from = p.at
	}
	if parts.maskWait > 0 {
		args["mask_wait_us"] = float64(parts.maskWait.Nanoseconds()) / 1e3
	}
	if err != nil {
		args["error"] = err.Error()
	}
	t.add(traceEvent{Name: "step", Cat: "step", Ph: "X", TS: t.us(start), Dur: &dur, PID: tracePID, TID: traceTIDSteps, Args: args})
}

// counter records the values of one counter track now.
func (t *tracer) counter(name string, values map[string]any) {
	if t == nil {
		return
	}
	t.add(traceEvent{Name: name, Ph: "C", TS: t.us(t.now()), PID: tracePID, TID: traceTIDSteps, Args: values})
}

// flush writes the buffered events.
func (t *tracer) flush() {
	if t == nil || t.err != nil || len(t.buf) == 0 {
		return
	}
	if _, err := t.w.Write(t.buf); err != nil {
		t.err = fmt.Errorf("engine: writing the trace: %w", err)
	}
	t.buf = t.buf[:0]
}

// close ends the JSON document; later events are dropped. It returns the
// first error writing the trace met.
func (t *tracer) close() error {
	if t == nil || t.closed {
		return nil
	}
	t.buf = append(t.buf, "\n]}\n"...)
	t.flush()
	t.closed = true
	return t.err
}

// traceCounters records the slots by state, the KV pages and the queue
// after a step.
func (e *Engine) traceCounters() {
	if e.tr == nil {
		return
	}
	free, prefill, dec := 0, 0, 0
	for _, r := range e.slots {
		switch {
		case r == nil:
			free++
		case r.done < len(r.Prompt):
			prefill++
		default:
			dec++
		}
	}
	waiting, preempted := 0, 0
	for _, r := range e.reqs {
		switch {
		case r.slot >= 0:
		case len(r.pages) > 0:
			preempted++
		default:
			waiting++
		}
	}
	e.mu.Lock()
	waiting += len(e.arrivals)
	e.mu.Unlock()
	e.tr.counter("slots", map[string]any{"free": free, "prefill": prefill, "decode": dec})
	e.tr.counter("kv_pages", map[string]any{"free": e.pool.Free(), "used": e.pool.Pages() - e.pool.Free()})
	e.tr.counter("queue", map[string]any{"waiting": waiting, "preempted": preempted})
}

// Close ends the engine's trace (Config.Trace), writing the closing
// bracket that makes the file valid JSON, and returns the first error
// writing the trace or the step log met. Call it after Drain or once the
// step loop has stopped; steps after it are not traced or logged. The
// engine keeps serving: Close touches nothing but those two files.
func (e *Engine) Close() error {
	e.stepping.Lock()
	defer e.stepping.Unlock()
	e.flushMasks() // a request that still runs may wait for its mask
	err := e.tr.close()
	if e.slog != nil {
		err = errors.Join(err, e.slog.err)
		e.slog = nil
	}
	return err
}
